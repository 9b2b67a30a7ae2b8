"""A sequential batch's record (``sequential.json`` in its results directory): the design, every look taken, the
decision, and the runs it made unnecessary. The runner writes it (whole, atomically) at each look and reads it on
resume; `stats` and the report read it to give the inference that accounts for the looks
(``madbench.eval.stats.group_sequential``)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, ValidationError

from madbench.data.atomic import atomic_write_text
from madbench.data.errors import InputError, format_validation_error
from madbench.eval.stats.group_sequential import Design
from madbench.results import BatchDirs

#: What a look decides (``group_sequential.take_look``), and what a batch can be decided on.
LookDecision = Literal["continue", "efficacy", "futility", "final"]
Decision = Literal["efficacy", "futility", "final"]


class DesignRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")
    n: list[int]
    alpha: float
    spending: str
    efficacy: list[float]
    futility: list[float] | None
    sign: int
    effect: float
    power: float
    beta: float
    notes: list[str] = []
    #: Each look's planned t df (the quarter-clustered t's), and the effect detectable at ``power``; absent in
    #: records of designs planned on the normal scale.
    df: list[float] | None = None
    detectable: float | None = None

    @classmethod
    def of(cls, d: Design) -> DesignRecord:
        return cls(n=list(d.n), alpha=d.alpha, spending=d.spending, efficacy=[float(x) for x in d.efficacy],
                   futility=None if d.futility is None else [float(x) for x in d.futility], sign=d.sign,
                   effect=d.effect, power=d.power, beta=d.beta, notes=list(d.notes),
                   df=None if d.df is None else [float(x) for x in d.df],
                   detectable=d.detectable if math.isfinite(d.detectable) else None)

    def design(self) -> Design:
        return Design(tuple(self.n), self.alpha, self.spending, tuple(self.efficacy),
                      None if self.futility is None else tuple(self.futility), self.sign, self.effect, self.beta,
                      self.power, tuple(self.notes), None if self.df is None else tuple(self.df),
                      detectable=math.nan if self.detectable is None else self.detectable)


class LookRecord(BaseModel):
    """One look: its paired t on the first ``n`` complete pairs in schedule order, the bounds on the t scale at its
    df, the decision, and the inference that accounts for the looks (adjusted p, repeated CI)."""
    # A t over pairs without spread is infinite: written as JSON's Infinity, read back as such.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=True, ser_json_inf_nan="constants")
    look: int
    n: int
    planned_n: int
    diff: float
    sd: float
    t: float
    z: float
    efficacy_t: float
    futility_t: float | None
    decision: LookDecision
    adjusted_p: float
    ci_low: float
    ci_high: float
    #: The naive figures: the plain paired t-test's p and 1 − α interval on these pairs, as if this were the only look.
    naive_p: float
    naive_ci_low: float
    naive_ci_high: float
    scenarios: list[str]
    at: str
    #: The standard error of ``diff``, the t's df and the clusters it was computed over (quarters; ``n`` when each
    #: scenario is its own); absent in records of looks taken with the ordinary paired t.
    se: float | None = None
    df: float | None = None
    n_clusters: int | None = None


class Continuation(BaseModel):
    model_config = ConfigDict(extra="forbid")
    at: str
    after_look: int
    decision: Decision


class SequentialRecord(BaseModel):
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants")
    control: str
    treatment: str
    metric: str
    design: DesignRecord
    #: The scenarios in their seeded schedule order.
    order: list[str]
    looks: list[LookRecord] = []
    #: efficacy, futility or final once decided; None while the batch goes on.
    decision: Decision | None = None
    #: Runs in flight when the decision was taken (they finished and are kept), and runs it made unnecessary.
    overrun: list[str] = []
    not_needed: list[str] = []
    #: Each `madbench run --continue` past a decision.
    continued: list[Continuation] = []

    @property
    def decided_look(self) -> LookRecord | None:
        return next((x for x in self.looks if x.decision == self.decision), None) if self.decision else None

    @property
    def stopped(self) -> bool:
        """A decision stands that no `--continue` went past."""
        return self.decision is not None and not (self.continued and self.continued[-1].decision == self.decision)


def write_record(root: str | Path, record: SequentialRecord) -> Path:
    return atomic_write_text(BatchDirs(root).sequential, record.model_dump_json(indent=1))


def read_record(root: str | Path) -> SequentialRecord | None:
    """The record of a sequential batch, None for any other; a damaged one is an InputError naming it."""
    path = BatchDirs(root).sequential
    if not path.is_file():
        return None
    try:
        return SequentialRecord.model_validate(json.loads(path.read_text()))
    except (json.JSONDecodeError, UnicodeDecodeError, ValidationError) as exc:
        why = (format_validation_error(exc) if isinstance(exc, ValidationError) else
               f"not UTF-8 text (byte {exc.start})" if isinstance(exc, UnicodeDecodeError) else f"not JSON ({exc.msg})")
        raise InputError(path, f"not a sequential record ({why[:300]})",
                         "restore it from a copy; deleting it makes the next run take every look again from the "
                         "committed runs") from None


def _num(x: float, digits: int = 4) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:.{digits}g}"


class SequentialSummary(BaseModel):
    """``summary``'s figures as a typed record (``madbench.run``'s ``BatchRun.sequential``); NaN where no look was
    taken."""
    model_config = ConfigDict(extra="forbid")
    #: "treatment − control", the metric tested, and the decision (or "undecided").
    pair: str
    metric: str
    decision: str
    #: The look decided at (else the last taken; None before any), of ``looks_planned``, at n of n_max scenarios.
    look: int | None
    looks_planned: int
    n: int
    n_max: int
    #: At that look: adjusted for the looks (stagewise p, repeated CI), and naive (as if it were the only look).
    diff: float
    t: float
    adjusted_p: float
    ci_low: float
    ci_high: float
    naive_p: float
    naive_ci_low: float
    naive_ci_high: float
    overrun_runs: int
    not_needed_runs: int
    #: Against the fixed design: scenarios and dollars saved (None: a run's cost is unknown).
    scenarios_saved: int
    runs_per_scenario: int
    dollars_saved: float | None
    continued: list[Continuation]
    #: What `stats` and `madbench run` print.
    lines: list[str]


def summary(record: SequentialRecord, cost_per_run: float | None, runs_per_scenario: int) -> dict:
    """What `stats` and the report say of a sequential batch: the decision, its look, the adjusted figures (and the
    naive ones, labelled), and the scenarios and dollars saved against the fixed design (every scenario run):
    the runs never started, at ``cost_per_run`` (the mean paid per run of the pair), ``runs_per_scenario`` a
    scenario."""
    last = record.decided_look or (record.looks[-1] if record.looks else None)
    n_max = record.design.n[-1]
    saved_runs = len(record.not_needed) if record.stopped else 0
    saved_scenarios = saved_runs // max(1, runs_per_scenario)
    saved_runs = len(record.not_needed) if record.stopped else 0
    dollars = None if cost_per_run is None or not math.isfinite(cost_per_run) else saved_runs * cost_per_run
    out: dict[str, Any] = {"pair": f"{record.treatment} − {record.control}", "metric": record.metric,
           "decision": record.decision or "undecided", "look": last.look if last else None,
           "looks_planned": len(record.design.n), "n": last.n if last else 0, "n_max": n_max,
           "diff": last.diff if last else math.nan, "t": last.t if last else math.nan,
           "adjusted_p": last.adjusted_p if last else math.nan,
           "ci_low": last.ci_low if last else math.nan, "ci_high": last.ci_high if last else math.nan,
           "naive_p": last.naive_p if last else math.nan,
           "naive_ci_low": last.naive_ci_low if last else math.nan, "naive_ci_high": last.naive_ci_high if last else math.nan,
           "overrun_runs": len(record.overrun), "not_needed_runs": len(record.not_needed),
           "scenarios_saved": saved_scenarios, "runs_per_scenario": runs_per_scenario, "dollars_saved": dollars,
           "continued": [c.model_dump() for c in record.continued]}
    conf = f"{1 - record.design.alpha:.0%}"
    saved = "unknown (a run's cost is unknown)" if dollars is None else f"${dollars:.2f}"
    head = (f"{out['pair']} on {record.metric}: {out['decision']} at look {out['look']} of {out['looks_planned']} "
            f"({out['n']} of {n_max} scenarios)" if last else f"{out['pair']} on {record.metric}: no look taken yet")
    lines = [head]
    if last:
        lines += [f"adjusted for the looks: diff {_num(last.diff)}, stagewise p = {_num(last.adjusted_p, 3)}, "
                  f"{conf} repeated CI [{_num(last.ci_low)}, {_num(last.ci_high)}]",
                  f"naive (as if this were the only look; not valid after looking): p = {_num(last.naive_p, 3)}, "
                  f"{conf} CI [{_num(last.naive_ci_low)}, {_num(last.naive_ci_high)}]",
                  f"saved against the fixed design: {saved_scenarios} scenarios ({saved_runs} runs not needed), {saved}; "
                  f"{len(record.overrun)} run(s) were in flight at the decision and finished (overrun)"]
    lines += [f"--continue at {c.at} went past the {c.decision} decision of look {c.after_look}" for c in record.continued]
    out["lines"] = lines
    return out


def batch_summary(record: SequentialRecord, runs: pd.DataFrame | None) -> dict:
    """``summary`` with the cost per run and the runs per scenario taken from the batch's runs table (None: no run
    committed): the mean paid (``cost_paid_usd``) over the pair's runs, unknown when one is."""
    if runs is None or not len(runs):
        return summary(record, None, 1)
    mine = runs[runs["config"].isin([record.control, record.treatment])]
    column = next((c for c in ("cost_paid_usd", "cost_usd") if c in runs.columns), None)
    cost = float(mine[column].astype(float).mean(skipna=False)) if column and len(mine) else None
    per_scenario = int(mine.groupby("scenario_id").size().max()) if len(mine) else 1
    return summary(record, cost, per_scenario)


def path_frame(record: SequentialRecord) -> dict[str, np.ndarray]:
    """The statistic's path and the boundaries on the t scale, one entry per look taken (for the report's figure)."""
    return {"n": np.array([x.n for x in record.looks]), "t": np.array([x.t for x in record.looks]),
            "efficacy": np.array([x.efficacy_t for x in record.looks]),
            "futility": np.array([np.nan if x.futility_t is None else x.futility_t for x in record.looks])}
