"""A batch's ``sequential:`` design, and the driver's side of it: pair-first scheduling, the looks, the stop.

Scenarios run in a seeded random order, every run of a scenario (both arms, all replicates) together, so that the
complete pairs come in as whole scenarios. Each time the planned number of complete pairs is in, the ``Monitor``
takes a look: the paired t on the scenario means of the first n_k complete scenarios in schedule order
(``madbench.eval.stats.paired.scenario_differences``), quarter-clustered (CR2, Satterthwaite df) as the primary test
is, since every scenario carries its invest_quarter, against the design's bounds on the t scale
(``madbench.eval.stats.group_sequential``). On a crossing the dispatch stops submitting; runs in flight finish (overrun),
runs never started become ``not_needed``. The record (``sequential.json``) is written at each look and read on resume,
which honours a decision unless `madbench run --continue` goes past it (recorded too).
"""

from __future__ import annotations

import difflib
import math
import random
import sys
import time
from collections.abc import Iterable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np
import pandas as pd
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, field_validator

from madbench.data.errors import InputError
from madbench.eval.stats.group_sequential import (
    SPENDING,
    look_df,
    make_design,
    planned_looks,
    repeated_ci,
    stagewise_p,
    take_look,
)
from madbench.eval.stats.paired import scenario_differences
from madbench.eval.stats.sequential_record import (
    Continuation,
    Decision,
    DesignRecord,
    LookRecord,
    SequentialRecord,
    read_record,
    write_record,
)
from madbench.results import BatchDirs, ManifestRun
from madbench.results.records import RunStatus
from madbench.results.table_schemas import SPECS
from madbench.runner.run_rows import CommittedRows

if TYPE_CHECKING:
    from madbench.runner.store import BatchLayout

#: A run of the batch (``runner.batch.RunSpec``, whose module imports this one for the spec): its run_id, scenario,
#: config and sample_index are what is read here.
RunSpec = Any

#: The most looks a design may plan: each look spends α, and more than this buys nothing measurable.
MAX_LOOKS = 20
NOT_NEEDED: RunStatus = "not_needed"


class SequentialSpec(BaseModel):
    """``sequential:`` in a batch file: the one primary comparison and its group-sequential design."""
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    #: The treatment of one of the batch's declared ``pairs`` (its control is that pair's).
    pair: str
    #: A numeric column of runs.parquet, compared on scenario means (treatment − control).
    metric: str = "sharpe"
    #: Two-sided type I error.
    alpha: float = Field(0.05, gt=0, lt=0.5)
    #: The power planned for at ``effect``.
    power: float = Field(0.8, gt=0, lt=1)
    #: The standardised effect d_z = δ/σ_d planned for, signed: positive when the treatment should score higher.
    effect: float
    #: Looks at equally spaced counts of complete pairs, the last at every scenario of the batch.
    looks: int = Field(5, ge=1, le=MAX_LOOKS)
    #: The Lan–DeMets spending family of the efficacy (and futility) bounds.
    spending: Literal[tuple(SPENDING)] = "obrien-fleming"  # type: ignore[valid-type]
    #: ``non-binding``: also stop when the effect is out of reach (ignoring such a stop keeps α); ``none``: never.
    futility: Literal["none", "non-binding"] = "none"
    #: The schedule's seed: which scenarios run first.
    seed: int = 0

    @field_validator("metric")
    @classmethod
    def _metric(cls, v: str) -> str:
        return numeric_metric(v)

    @field_validator("effect")
    @classmethod
    def _effect(cls, v: float) -> float:
        if v == 0 or abs(v) > 5:
            raise ValueError(f"effect {v}: give the standardised effect d_z to plan for, non-zero and at most 5 in size "
                             "(e.g. 0.39, the paper's A7)")
        return v


def numeric_metric(v: str) -> str:
    """``v``, a numeric column of runs.parquet (a design's metric); a ValueError naming close ones otherwise."""
    numeric = [f.name for f in SPECS["runs"].schema if pa.types.is_floating(f.type) or pa.types.is_integer(f.type)]
    if v not in numeric:
        close = ", ".join(difflib.get_close_matches(v, numeric, n=3)) or "sharpe, total_return_pct"
        raise ValueError(f"{v!r} is no numeric column of runs.parquet (e.g. {close})")
    return v


def check_sequential(spec, n_scenarios: int, where: str) -> None:
    """The design's looks fit in the batch's scenarios (an InputError); its pair is checked with the spec."""
    seq = spec.sequential
    if seq is None:
        return
    try:
        planned_looks(n_scenarios, seq.looks)
    except ValueError as exc:
        raise InputError(where, f"sequential.looks: {exc}", "plan fewer looks, or list more scenarios") from None


def _differs(old: SequentialRecord, new: SequentialRecord) -> str | None:
    """What of the experiment ``old`` records differs from ``new`` (None: the same one). Bounds are compared to 1e-9:
    another scipy build may solve them a few ulps apart."""
    a, b = old.design, new.design
    fields = [f for f in ("control", "treatment", "metric", "order") if getattr(old, f) != getattr(new, f)]
    fields += [f"design.{f}" for f in ("n", "alpha", "spending", "sign", "effect", "power") if getattr(a, f) != getattr(b, f)]
    for f in ("efficacy", "futility", "df"):
        x, y = getattr(a, f), getattr(b, f)
        if (x is None) != (y is None) or (x is not None and not np.allclose(x, y, rtol=0, atol=1e-9)):
            fields.append(f"design.{f}")
    return ", ".join(fields) or None


def pair_of(spec) -> tuple[str, str]:
    """(control, treatment) of the design's pair."""
    p = next(p for p in spec.pairs if p.treatment == spec.sequential.pair)
    return p.control, p.treatment


def quarters_of(runs: Iterable[RunSpec]) -> dict[str, str]:
    """Each scenario's invest_quarter: the clusters of the looks' t."""
    return {r.scenario.id: r.scenario.invest_quarter for r in runs}


def design_of(spec, quarters: dict[str, str]):
    """The batch's design on its scenarios (``quarters``: each one's quarter), planned on the t scale of the looks it
    will take: each look's df that of the quarter-clustered t on the first n_k scenarios of the schedule."""
    seq = spec.sequential
    order = schedule_order(quarters, seq.seed)
    n = planned_looks(len(order), seq.looks)
    df = [look_df([quarters[s] for s in order[:k]]) for k in n]
    return make_design(n, seq.alpha, seq.spending, seq.futility == "non-binding", seq.effect, seq.power, df=df)


def schedule_order(scenario_ids: Iterable[str], seed: int) -> list[str]:
    """The scenarios in a seeded random order (the same for the same scenarios and seed)."""
    ids = sorted(set(scenario_ids))
    random.Random(seed).shuffle(ids)
    return ids


def pair_first(runs: list[RunSpec], order: list[str]) -> list[RunSpec]:
    """``runs`` grouped by scenario in ``order``: every run of a scenario (each config, each replicate) together."""
    rank = {s: i for i, s in enumerate(order)}
    return sorted(runs, key=lambda r: (rank[r.scenario.id], r.config.name, r.sample_index))


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class Monitor:
    """Takes the looks as pairs complete, and says when the batch needs no more runs."""

    def __init__(self, spec, runs: list[RunSpec], layout: BatchLayout, manifest_runs: dict[str, ManifestRun],
                 continue_past: bool = False, quiet: bool = True):
        self.layout, self.manifest_runs, self.quiet = layout, manifest_runs, quiet
        self.seq = spec.sequential
        self.control, self.treatment = pair_of(spec)
        self.quarter_of = quarters_of(runs)
        order = schedule_order(self.quarter_of, self.seq.seed)
        design = design_of(spec, self.quarter_of)
        fresh = SequentialRecord(control=self.control, treatment=self.treatment, metric=self.seq.metric,
                                 design=DesignRecord.of(design), order=order)
        record = read_record(layout.root)
        differs = None if record is None else _differs(record, fresh)
        if record is not None and differs and (record.looks or record.continued):
            # Looks taken bind the design: changing it after seeing them (another metric, spending or scenarios)
            # would spend α again on the same pairs.
            raise InputError(BatchDirs(layout.root).sequential, f"records {len(record.looks)} look(s) of another "
                             f"design ({differs} changed since)", "restore the batch's `sequential:` block and "
                             "scenarios, or move sequential.json away to start a new experiment on these runs")
        if record is None or differs:
            record = fresh  # nothing looked at yet: the new design simply replaces the old
        self.record, self.design = record, design
        if continue_past and record.stopped:
            assert record.decided_look is not None  # a stopped record holds the look that decided it
            record.continued.append(Continuation(at=_now(), after_look=record.decided_look.look, decision=record.decision))
        self.active = not record.continued  # past a decision, no further look stops anything
        self.members: dict[str, list[RunSpec]] = {s: [] for s in order}
        for r in runs:
            if r.config.name in (self.control, self.treatment):
                self.members[r.scenario.id].append(r)
        self.pair_runs = [r for rs in self.members.values() for r in rs]
        self.rank = {s: i for i, s in enumerate(order)}
        self.rows: dict[str, dict] = {}
        self._rows = CommittedRows(layout.root, [r.run_id for r in self.pair_runs], ["status", self.seq.metric])
        self.failed = {r.scenario.id for r in self.pair_runs if manifest_runs[r.run_id].status == "failed"}
        self.horizon: int | None = None
        self._set_horizon()
        write_record(layout.root, record)

    @property
    def order(self) -> list[str]:
        return self.record.order

    def enough(self) -> bool:
        """A decision stands: no more runs are needed."""
        return self.record.stopped

    def waits(self, run: RunSpec) -> bool:
        """Whether ``run`` lies past the scenarios the next look needs: held, so that a decision leaves it unstarted
        rather than overrun."""
        rank = self.rank.get(run.scenario.id)
        return self.horizon is not None and rank is not None and rank >= self.horizon

    def _set_horizon(self) -> None:
        """The scenarios the next look needs, in schedule order: its planned pairs plus one for each scenario before
        them that cannot complete (a failed run); None once no look is ahead."""
        k = len(self.record.looks)
        if not self.active or self.record.decision is not None or k >= self.design.looks:
            self.horizon = None
            return
        n = self.design.n[k]
        self.horizon = n + sum(1 for s in self.order[:n + len(self.failed)] if s in self.failed)

    def settled(self, run: RunSpec, ok: bool) -> None:
        """A run of this invocation settled: its metric read (``seen``), a failure noted, and the looks now due taken."""
        if ok:
            self.seen(run)
        s = run.scenario.id
        if self._blocked(s):
            self.failed.add(s)
        else:
            self.failed.discard(s)
        self.update()

    def _blocked(self, s: str) -> bool:
        """Whether scenario ``s`` cannot complete as it stands: a pair run failed, or one came back without a finite
        metric (it would otherwise hold the next look, and the dispatch, until the runs past it go one at a time)."""
        m = self.seq.metric
        return any(self.manifest_runs[r.run_id].status == "failed"
                   or (r.run_id in self.rows and not math.isfinite(self.rows[r.run_id][m])) for r in self.members.get(s, []))

    def seen(self, run: RunSpec) -> None:
        """A committed run of the batch (this invocation's or an earlier one's)."""
        if run.config.name not in (self.control, self.treatment) or run.run_id in self.rows:
            return
        row = self._row(run.run_id)
        if row is None:
            return
        if row["status"] == "ok":
            self.rows[run.run_id] = {"config": run.config.name, "scenario_id": run.scenario.id,
                                     "replicate": run.sample_index, self.seq.metric: _finite_or_nan(row[self.seq.metric])}
            if not math.isfinite(self.rows[run.run_id][self.seq.metric]):
                self.failed.add(run.scenario.id)

    def _row(self, run_id: str) -> dict[str, Any] | None:
        """The run's status and metric from its logged rows or the tables; None: none yet."""
        return self._rows.get(run_id)

    def complete(self) -> list[str]:
        """Scenarios whose every pair run is in with a finite metric, in schedule order."""
        m = self.seq.metric
        return [s for s in self.order if self.members[s] and all(
            r.run_id in self.rows and math.isfinite(self.rows[r.run_id][m]) for r in self.members[s])]

    def update(self, final: bool = False) -> None:
        """Take every look whose planned pairs are in (``final``: the dispatch ended, so the last look is taken on
        whatever complete pairs there are)."""
        if not self.active or self.record.decision is not None:
            return
        done = self.complete()
        try:
            self._due(done, final)
        finally:
            self._set_horizon()

    def _due(self, done: list[str], final: bool) -> None:
        while self.record.decision is None:
            k = len(self.record.looks) + 1
            planned = self.design.n[k - 1]
            if len(done) >= planned:
                use = done[:planned]
            elif final and len(done) >= 2:
                k, use = self.design.looks, done  # failures left fewer pairs: the last look on those there are
            else:
                return
            self._look(k, planned, use)

    def _look(self, k: int, planned: int, scenarios: list[str]) -> None:
        from scipy import stats
        frame = pd.DataFrame([r for r in self.rows.values() if r["scenario_id"] in set(scenarios)])
        diffs = scenario_differences(frame, self.treatment, self.control, self.seq.metric).reindex(scenarios).to_numpy()
        result = take_look(self.design, k, diffs, [self.quarter_of[s] for s in scenarios])
        low, high = repeated_ci([result.diff], [result.se], [result.efficacy_t])
        half = stats.t.ppf(1 - self.design.alpha / 2, result.df) * result.se
        naive_p = float(2 * stats.t.sf(abs(result.t), result.df)) if math.isfinite(result.t) else 0.0
        self.record.looks.append(LookRecord(
            **asdict(result), planned_n=planned,
            adjusted_p=float(stagewise_p(self.design, k, result.z)), ci_low=float(low[0]), ci_high=float(high[0]),
            naive_p=naive_p, naive_ci_low=result.diff - half, naive_ci_high=result.diff + half,
            scenarios=list(scenarios), at=_now()))
        if result.decision != "continue":
            self.record.decision = cast(Decision, result.decision)
            self.record.overrun = sorted(r for r, m in self.manifest_runs.items() if m.in_flight_since)
        write_record(self.layout.root, self.record)
        if not self.quiet:
            fut = "" if result.futility_t is None else f", futility {result.futility_t:.3f}"
            print(f"\nlook {k}/{self.design.looks}: {result.n} complete pairs, t = {result.t:.3f} (bounds ±"
                  f"{result.efficacy_t:.3f}{fut}): {result.decision}", file=sys.stderr)

    def finish(self) -> list[str]:
        """After the dispatch: the last look if due, and the runs never started marked ``not_needed``; their ids."""
        if self.active and self.record.decision is None and not any(
                m.status == "pending" for m in self.manifest_runs.values()):
            self.update(final=True)
        if not self.record.stopped:
            return []
        idle = sorted(r for r, m in self.manifest_runs.items() if m.status == "pending")
        for r in idle:
            self.manifest_runs[r].status = NOT_NEEDED
        self.record.not_needed = idle
        write_record(self.layout.root, self.record)
        return idle


def _finite_or_nan(value: Any) -> float:
    """A run's metric as the looks take it: null (no backtest) as NaN, which no look counts."""
    return math.nan if value is None else float(value)
