"""A sweep's record (``sweep.json`` in its results directory): the design, every look with each arm's statistic and
decision, each arm's final decision and its adjusted inference, and the runs the decisions made unnecessary. The
runner writes it (whole, atomically) at each look and reads it on resume; `stats` and the report read it
(``madbench.eval.stats.sweep_design`` has the formulas)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, ValidationError

from madbench.data.atomic import atomic_write_text
from madbench.data.errors import InputError, format_validation_error
from madbench.eval.stats.sequential_record import Continuation
from madbench.eval.stats.sweep_design import SweepDesign
from madbench.results import BatchDirs

ArmDecision = Literal["efficacy", "futility", "dropped", "final"]


class SweepDesignRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")
    n: list[int]
    arms: int
    alpha: float
    rule: str
    spending: str
    correlation: float
    efficacy: list[float]
    ci: list[float]
    futility: list[float] | None
    effect: float
    power: float
    beta: float
    df: list[float] | None = None
    notes: list[str] = []

    @classmethod
    def of(cls, d: SweepDesign) -> SweepDesignRecord:
        return cls(n=list(d.n), arms=d.arms, alpha=d.alpha, rule=d.rule, spending=d.spending, correlation=d.correlation,
                   efficacy=list(d.efficacy), ci=list(d.ci), futility=None if d.futility is None else list(d.futility),
                   effect=d.effect, power=d.power, beta=d.beta, df=None if d.df is None else list(d.df),
                   notes=list(d.notes))

    def design(self) -> SweepDesign:
        return SweepDesign(tuple(self.n), self.arms, self.alpha, self.rule, self.spending, self.correlation,
                           tuple(self.efficacy), tuple(self.ci), None if self.futility is None else tuple(self.futility),
                           self.effect, self.power, self.beta, None if self.df is None else tuple(self.df),
                           tuple(self.notes))


class ArmLook(BaseModel):
    """One arm at one look: its paired statistic (oriented: positive is better) and what the look decided."""
    model_config = ConfigDict(extra="forbid", allow_inf_nan=True, ser_json_inf_nan="constants")
    arm: str
    diff: float
    sd: float
    se: float
    t: float
    z: float
    df: float
    #: the estimated d_z (diff / sd), what the selection rule compares
    effect_size: float
    efficacy_t: float
    futility_t: float | None
    #: racing (undecided), estimating (declared better, going on), or the decision taken here
    decision: Literal["racing", "estimating", "efficacy", "futility", "dropped", "final"]


class SweepLook(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=True, ser_json_inf_nan="constants")
    look: int
    n: int
    planned_n: int
    scenarios: list[str]
    arms: list[ArmLook]
    #: the mean pairwise correlation of the sampled arms' differences at this look (the design assumes ``correlation``)
    correlation: float | None = None
    at: str


class ArmResult(BaseModel):
    """An arm's decision and the inference at the look that decided it (its CI at the last look it was sampled)."""
    model_config = ConfigDict(extra="forbid", allow_inf_nan=True, ser_json_inf_nan="constants")
    arm: str
    decision: ArmDecision
    look: int
    n: int
    diff: float
    adjusted_p: float
    ci_low: float
    ci_high: float
    #: the look the interval is from (later than ``look`` for an arm that went on to estimate)
    ci_look: int
    naive_p: float
    naive_ci_low: float
    naive_ci_high: float


class SweepRecord(BaseModel):
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants")
    control: str
    arms: list[str]
    metric: str
    #: higher or lower: which way of the metric is better (every diff here is oriented: positive is better)
    better: str
    design: SweepDesignRecord
    order: list[str]
    looks: list[SweepLook] = []
    results: dict[str, ArmResult] = {}
    #: every arm decided: the sweep needs no more runs
    decided: bool = False
    overrun: list[str] = []
    #: arm (or the control) → its runs never started because of a decision
    not_needed: dict[str, list[str]] = {}
    continued: list[Continuation] = []
    #: The rules a look applies besides the bounds (``select``, its ``margin`` where it is ``best``, ``on_efficacy``);
    #: None in a record written before they were recorded.
    select: Literal["all", "best"] | None = None
    margin: float | None = None
    on_efficacy: Literal["stop", "continue"] | None = None
    #: Replicates per scenario and config (the fixed grid is arms + 1 × scenarios × these); None in older records.
    replicates: int | None = None

    @property
    def stopped(self) -> bool:
        """Every arm decided, and no `--continue` went past it."""
        return self.decided and not self.continued


def path_of(root: str | Path) -> Path:
    return BatchDirs(root).sweep


def write_record(root: str | Path, record: SweepRecord) -> Path:
    return atomic_write_text(path_of(root), record.model_dump_json(indent=1))


def read_record(root: str | Path) -> SweepRecord | None:
    """The record of a sweep, None for any other batch; a damaged one is an InputError naming it."""
    path = path_of(root)
    if not path.is_file():
        return None
    try:
        return SweepRecord.model_validate(json.loads(path.read_text()))
    except (json.JSONDecodeError, UnicodeDecodeError, ValidationError) as exc:
        why = (format_validation_error(exc) if isinstance(exc, ValidationError) else
               f"not UTF-8 text (byte {exc.start})" if isinstance(exc, UnicodeDecodeError) else f"not JSON ({exc.msg})")
        raise InputError(path, f"not a sweep record ({why[:300]})", "restore it from a copy; deleting it makes the "
                         "next run take every look again from the committed runs") from None


def _num(x: float | None, digits: int = 4) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:.{digits}g}"


def summary(record: SweepRecord, runs: pd.DataFrame | None) -> dict[str, Any]:
    """What `stats`, `run` and the report say of a sweep: per arm its decision, look, adjusted p and simultaneous CI
    (the naive figures beside them, labelled), and the runs and dollars saved against the fixed grid (every arm and
    the control on every scenario), at the mean paid per run of the sweep's runs (unknown when one's cost is)."""
    d = record.design
    cost = None
    if runs is not None and len(runs):
        mine = runs[runs["config"].isin([record.control, *record.arms])]
        column = next((c for c in ("cost_paid_usd", "cost_usd") if c in runs.columns), None)
        value = float(mine[column].astype(float).mean(skipna=False)) if column and len(mine) else math.nan
        cost = value if math.isfinite(value) else None
    saved = {a: len(v) for a, v in record.not_needed.items()}
    total_saved = sum(saved.values())
    dollars = None if cost is None else total_saved * cost
    conf = f"{1 - d.alpha:.0%}"
    arms = []
    lines = [f"sweep: {len(record.arms)} arms against {record.control} on {record.metric} ({record.better} is better), "
             f"rule {d.rule} ({d.spending} spending, family-wise α = {d.alpha:g} one-sided), looks at {d.n} scenarios; "
             f"{len(record.looks)} look(s) taken, {'every arm decided' if record.decided else 'arms still racing'}"]
    for a in record.arms:
        r = record.results.get(a)
        row: dict[str, Any] = {"arm": a, "decision": r.decision if r else "racing", "look": r.look if r else None,
                               "n": r.n if r else None, "diff": r.diff if r else math.nan,
                               "adjusted_p": r.adjusted_p if r else math.nan, "ci_low": r.ci_low if r else math.nan,
                               "ci_high": r.ci_high if r else math.nan, "naive_p": r.naive_p if r else math.nan,
                               "naive_ci_low": r.naive_ci_low if r else math.nan,
                               "naive_ci_high": r.naive_ci_high if r else math.nan,
                               "not_needed_runs": saved.get(a, 0),
                               "dollars_saved": None if cost is None else saved.get(a, 0) * cost}
        arms.append(row)
        if r is None:
            lines.append(f"{a}: racing")
            continue
        lines.append(f"{a}: {r.decision} at look {r.look} ({r.n} scenarios), diff {_num(r.diff)}; adjusted for the "
                     f"arms and looks: p = {_num(r.adjusted_p, 3)}, {conf} simultaneous CI [{_num(r.ci_low)}, "
                     f"{_num(r.ci_high)}] (look {r.ci_look}); naive (this arm alone, this look alone; not valid "
                     f"after looking): p = {_num(r.naive_p, 3)}, CI [{_num(r.naive_ci_low)}, {_num(r.naive_ci_high)}]; "
                     f"{saved.get(a, 0)} run(s) not needed"
                     f"{'' if cost is None else f' (${saved.get(a, 0) * cost:.2f})'}")
    fixed = (len(record.arms) + 1) * len(record.order) * (record.replicates or 1)
    grid = f"{fixed} runs" if record.replicates else f"{fixed} runs per replicate set"
    money = "unknown (a run's cost is unknown)" if dollars is None else f"${dollars:.2f}"
    if record.continued:
        lines.append(f"saved against the fixed grid: nothing, --continue went past the decisions and ran the "
                     f"{total_saved} of its {grid} they had made not needed; {len(record.overrun)} run(s) in flight at "
                     "a decision finished (overrun)")
    else:
        lines.append(f"saved against the fixed grid: {total_saved} of its {grid} not needed "
                     f"(control: {saved.get(record.control, 0)}), {money}; {len(record.overrun)} run(s) in flight at a "
                     "decision finished (overrun)")
    est = [x.correlation for x in record.looks if x.correlation is not None]
    if est:
        if d.rule == "mams":
            low = "; lower makes it anti-conservative: prefer rule bonferroni" if est[-1] < d.correlation - 0.15 else ""
            lines.append(f"the arms' differences correlate {est[-1]:.2f} at the last look (the mams boundary assumes "
                         f"{d.correlation:g}{low})")
        else:  # Boole's inequality: the bonferroni bound assumes no correlation
            lines.append(f"the arms' differences correlate {est[-1]:.2f} at the last look (the {d.rule} boundary "
                         "holds at any correlation)")
    lines += [f"--continue at {c.at} went past the decisions of look {c.after_look}" for c in record.continued]
    return {"control": record.control, "metric": record.metric, "better": record.better, "rule": d.rule,
            "alpha": d.alpha, "looks_planned": len(d.n), "looks_taken": len(record.looks), "decided": record.decided,
            "arms": arms, "not_needed_runs": total_saved, "fixed_runs": fixed, "dollars_saved": dollars,
            "overrun_runs": len(record.overrun), "continued": [c.model_dump() for c in record.continued],
            "lines": lines}


def path_frame(record: SweepRecord) -> pd.DataFrame:
    """Every arm's t at each look it was sampled, with the bounds on the t scale (for the report's figure)."""
    rows = [{"look": x.look, "n": x.n, "arm": a.arm, "t": a.t, "efficacy": a.efficacy_t,
             "futility": math.nan if a.futility_t is None else a.futility_t, "decision": a.decision}
            for x in record.looks for a in x.arms]
    return pd.DataFrame(rows, columns=["look", "n", "arm", "t", "efficacy", "futility", "decision"])
