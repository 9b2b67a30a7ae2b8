"""A batch's ``sweep:`` section, and the driver's side of it: many arms raced against one control, losers dropped early,
the family-wise error held (``madbench.eval.stats.sweep_design``).

Scheduling is the sequential design's (``runner.sequential``): scenarios in a seeded random order, every run of a
scenario together, the scenarios past the next look held until it is taken. A look is taken on the first n_k
scenarios in schedule order on which the control and every arm still sampled are complete: each arm's paired t on its
scenario-mean differences (quarter-clustered, CR2, where they span quarters), oriented so that positive is better,
against the sweep's bounds on the t scale. An arm that crosses efficacy is declared better (and stops, or goes on to
estimate while others race); one that crosses futility, or that the selection rule drops, stops; its runs not yet
started are ``not_needed`` and never dispatched. The sweep ends when no arm races. The record (``sweep.json``) is
written at each look and read on resume, which honours the decisions unless `madbench run --continue` goes past
them (recorded).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from madbench.data.errors import InputError
from madbench.eval.stats.clustered import cr2_se_df
from madbench.eval.stats.group_sequential import SPENDING, look_df, planned_looks, t_to_z, z_to_t
from madbench.eval.stats.paired import scenario_differences
from madbench.eval.stats.sequential_record import Continuation
from madbench.eval.stats.sweep_design import DECISIONS, RULES, SweepDesign, adjusted_p, decide, make_sweep, simultaneous_ci
from madbench.eval.stats.sweep_record import (
    ArmLook,
    ArmResult,
    SweepDesignRecord,
    SweepLook,
    SweepRecord,
    read_record,
    write_record,
)
from madbench.eval.stats.sweep_simulation import Rules, simulate
from madbench.results import BatchDirs, ManifestRun
from madbench.runner.run_rows import CommittedRows
from madbench.runner.sequential import MAX_LOOKS, NOT_NEEDED, _now, numeric_metric, quarters_of, schedule_order

if TYPE_CHECKING:
    from madbench.runner.store import BatchLayout

#: A run of the batch (``runner.batch.RunSpec``): its run_id, scenario, config and sample_index are read here.
RunSpec = Any


class SweepSpec(BaseModel):
    """``sweep:`` in a batch file: a control, the arms raced against it, and the design."""
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    #: The control's config name.
    control: str
    #: The arms' config names (grid cells included: ``name+key=value``); default every other config of the batch.
    arms: list[str] | None = None
    #: A numeric column of runs.parquet, compared on scenario means (arm − control).
    metric: str = "sharpe"
    #: Which way of the metric is better: an arm is declared better in this direction only.
    better: Literal["higher", "lower"] = "higher"
    #: One-sided family-wise error: the chance of declaring any arm that is no better than the control better.
    alpha: float = Field(0.05, gt=0, lt=0.5)
    #: Looks at equally spaced counts of complete scenarios, the last at every scenario.
    looks: int = Field(5, ge=1, le=MAX_LOOKS)
    #: ``mams``: the generalised Dunnett boundary (the arms' correlation through the shared control);
    #: ``bonferroni``: α/arms to each arm (any correlation).
    rule: Literal[tuple(RULES)] = "mams"  # type: ignore[valid-type]
    #: The Lan–DeMets spending shape of the family's α and of each arm's futility β.
    spending: Literal[tuple(SPENDING)] = "pocock"  # type: ignore[valid-type]
    #: The correlation of two arms' statistics the mams boundary is computed for (1/2: equal noise in every config).
    correlation: float = Field(0.5, ge=0, lt=1)
    #: ``non-binding``: an arm stops once a better result is out of reach (ignoring such a stop keeps α); ``none``.
    futility: Literal["none", "non-binding"] = "non-binding"
    #: The standardised effect d_z of a better arm the futility bounds are planned for, and one arm's power there.
    effect: float = Field(0.5, gt=0, le=5)
    power: float = Field(0.85, gt=0, lt=1)
    #: ``all``: each arm raced on its own bounds; ``best``: also drop an arm whose estimated d_z is more than
    #: ``margin`` behind the leader's (drop-the-losers).
    select: Literal["all", "best"] = "all"
    margin: float = Field(0.5, gt=0, le=10)
    #: What an arm declared better does: ``stop``, or ``continue`` to estimate while other arms race.
    on_efficacy: Literal["stop", "continue"] = "stop"
    #: The schedule's seed: which scenarios run first.
    seed: int = 0

    @field_validator("metric")
    @classmethod
    def _metric(cls, v: str) -> str:
        return numeric_metric(v)

    @model_validator(mode="after")
    def _arms(self) -> SweepSpec:
        if self.arms is not None:
            if not self.arms:
                raise ValueError("arms: [] races nothing: list at least one arm, or leave `arms` out for every other config")
            if self.control in self.arms:
                raise ValueError(f"arms: {self.control!r} is the control; an arm is compared with it")
            twice = sorted({a for a in self.arms if self.arms.count(a) > 1})
            if twice:
                raise ValueError(f"arms: {', '.join(twice)} listed more than once")
        return self

    @property
    def sign(self) -> int:
        return 1 if self.better == "higher" else -1

    @property
    def margin_or_none(self) -> float | None:
        return self.margin if self.select == "best" else None


def arms_of(spec, names: Iterable[str]) -> list[str]:
    """The sweep's arms among the batch's config ``names`` (in the batch's order)."""
    sw = spec.sweep
    return list(sw.arms) if sw.arms is not None else [n for n in dict.fromkeys(names) if n != sw.control]


def check_sweep(spec, config_names: list[str], n_scenarios: int, where: str) -> None:
    """The sweep's control and arms are configs of the batch, every config is one of them, and its looks fit in the
    scenarios: an InputError naming the field otherwise."""
    sw = spec.sweep
    if sw is None:
        return
    names = list(dict.fromkeys(config_names))
    if sw.control not in names:
        raise InputError(where, f"sweep.control: {sw.control!r} is no config of the batch (its configs: "
                         f"{', '.join(names)})", "name one of them (a grid cell is name+key=value)")
    unknown = [a for a in sw.arms or [] if a not in names]
    if unknown:
        raise InputError(where, f"sweep.arms: {', '.join(unknown)} is no config of the batch (its configs: "
                         f"{', '.join(names)})", "name configs of the batch, or leave `arms` out for every other one")
    others = [n for n in names if n != sw.control and n not in arms_of(spec, names)]
    if others:
        raise InputError(where, f"sweep.arms: the batch also runs {', '.join(others)}, neither the control nor an arm",
                         "list them under sweep.arms, or run them in another batch")
    if not arms_of(spec, names):
        raise InputError(where, "sweep: no arm to race (the batch's only config is the control)",
                         "list arms under `configs:` (or a grid)")
    try:
        planned_looks(n_scenarios, sw.looks)
    except ValueError as exc:
        raise InputError(where, f"sweep.looks: {exc}", "plan fewer looks, or list more scenarios") from None


def design_of(spec, quarters: dict[str, str], arms: int) -> SweepDesign:
    """The sweep's design on its scenarios (``quarters``: each one's quarter), planned on the t scale of its looks."""
    sw = spec.sweep
    order = schedule_order(quarters, sw.seed)
    n = planned_looks(len(order), sw.looks)
    df = [look_df([quarters[s] for s in order[:k]]) for k in n]
    return make_sweep(n, arms, sw.alpha, sw.rule, sw.spending, sw.correlation, sw.futility == "non-binding",
                      sw.effect, sw.power, df=df)


def arm_statistics(diffs: np.ndarray, clusters: list[str]) -> tuple[float, float, float, float, float]:
    """(d̄, sd, SE, t, df) of one arm's oriented differences: the quarter-clustered CR2 t with its Satterthwaite df
    where the scenarios span two quarters, else the ordinary paired t (as ``group_sequential.take_look``); no spread
    gives an infinite t of the mean's sign (0 for a zero mean)."""
    x = np.asarray(diffs, float)
    n = len(x)
    diff, sd = float(x.mean()), float(x.std(ddof=1))
    if len(set(clusters)) >= 2:
        _, se_arr, df, _ = cr2_se_df(x, clusters)
        se = float(se_arr)
    else:
        se, df = sd / math.sqrt(n), float(n - 1)
    scale = max(1.0, float(np.abs(x).max()))
    if se <= 1e-12 * scale:
        t = 0.0 if abs(diff) <= 1e-12 * scale else math.copysign(math.inf, diff)
    else:
        t = diff / se
    return diff, sd, se, t, float(df)


class SweepMonitor:
    """Takes the looks as scenarios complete, drops the arms a look decides, and says when the sweep needs no more
    runs (the interface of ``runner.sequential.Monitor``, and ``needed``)."""

    def __init__(self, spec, runs: list[RunSpec], layout: BatchLayout, manifest_runs: dict[str, ManifestRun],
                 continue_past: bool = False, quiet: bool = True):
        self.layout, self.manifest_runs, self.quiet = layout, manifest_runs, quiet
        self._committed: CommittedRows | None = None  # the runs' rows as they commit (runner/run_rows.py)
        self.sw = spec.sweep
        self.control = self.sw.control
        self.arms = arms_of(spec, [r.config.name for r in runs])
        self.quarter_of = quarters_of(runs)
        order = schedule_order(self.quarter_of, self.sw.seed)
        design = design_of(spec, self.quarter_of, len(self.arms))
        fresh = SweepRecord(control=self.control, arms=self.arms, metric=self.sw.metric, better=self.sw.better,
                            design=SweepDesignRecord.of(design), order=order, select=self.sw.select,
                            margin=self.sw.margin_or_none, on_efficacy=self.sw.on_efficacy,
                            replicates=len({r.sample_index for r in runs}) or None)
        record = read_record(layout.root)
        differs = None if record is None else _differs(record, fresh)
        if record is not None and differs and (record.looks or record.continued):
            raise InputError(BatchDirs(layout.root).sweep, f"records {len(record.looks)} look(s) of another sweep "
                             f"({differs} changed since)", "restore the batch's `sweep:` section, configs and scenarios, "
                             "or move sweep.json away to start a new sweep on these runs")
        if record is None or differs:
            record = fresh
        self.record, self.design = record, design
        if continue_past and record.stopped:
            record.continued.append(Continuation(at=_now(), after_look=len(record.looks), decision="final"))
        self.active = not record.continued  # past the decisions, no look stops anything
        self.members: dict[str, dict[str, list[RunSpec]]] = {s: {} for s in order}
        for r in runs:
            self.members[r.scenario.id].setdefault(r.config.name, []).append(r)
        self.rank = {s: i for i, s in enumerate(order)}
        self.rows: dict[str, dict] = {}
        self.failed: set[str] = set()
        self.horizon: int | None = None
        self._set_horizon()
        write_record(layout.root, record)

    @property
    def order(self) -> list[str]:
        return self.record.order

    def sampled(self) -> list[str]:
        """The arms still run: those racing, and those declared better that go on to estimate."""
        if not self.active:
            return list(self.arms)
        out = []
        for a in self.arms:
            r = self.record.results.get(a)
            if r is None or (r.decision == "efficacy" and self.sw.on_efficacy == "continue" and not self.record.decided):
                out.append(a)
        return out

    def racing(self) -> list[str]:
        return [a for a in self.arms if a not in self.record.results]

    def enough(self) -> bool:
        return self.active and self.record.stopped

    def needed(self, run: RunSpec) -> bool:
        """Whether ``run`` is still wanted: the control's and the sampled arms' are, a stopped arm's are not."""
        if not self.active:
            return True
        name = run.config.name
        return not self.record.stopped and (name == self.control or name in self.sampled())

    def waits(self, run: RunSpec) -> bool:
        rank = self.rank.get(run.scenario.id)
        return self.horizon is not None and rank is not None and rank >= self.horizon

    def _set_horizon(self) -> None:
        k = len(self.record.looks)
        if not self.active or self.record.decided or k >= self.design.looks:
            self.horizon = None
            return
        n = self.design.n[k]
        self.horizon = n + sum(1 for s in self.order[:n + len(self.failed)] if s in self.failed)

    def _wanted(self, s: str) -> list[RunSpec]:
        return [r for name in (self.control, *self.sampled()) for r in self.members[s].get(name, [])]

    def settled(self, run: RunSpec, ok: bool) -> None:
        if ok:
            self.seen(run)
        s = run.scenario.id
        m = self.sw.metric
        if any(self.manifest_runs[r.run_id].status == "failed" or
               (r.run_id in self.rows and not math.isfinite(self.rows[r.run_id][m])) for r in self._wanted(s)):
            self.failed.add(s)
        else:
            self.failed.discard(s)
        self.update()

    def seen(self, run: RunSpec) -> None:
        """A committed run of the batch (this invocation's or an earlier one's): its metric read."""
        if run.run_id in self.rows:
            return
        if self._committed is None:  # the runs it looks at, once it knows them
            self._committed = CommittedRows(self.layout.root, self.manifest_runs, ["status", self.sw.metric])
        row = self._committed.get(run.run_id)
        if row is None:
            return
        if row["status"] == "ok":
            value = row[self.sw.metric]
            self.rows[run.run_id] = {"config": run.config.name, "scenario_id": run.scenario.id,
                                     "replicate": run.sample_index,
                                     self.sw.metric: math.nan if value is None else float(value)}

    def complete(self) -> list[str]:
        """Scenarios on which the control and every sampled arm are in with a finite metric, in schedule order."""
        m = self.sw.metric
        out = []
        for s in self.order:
            want = self._wanted(s)
            if want and all(r.run_id in self.rows and math.isfinite(self.rows[r.run_id][m]) for r in want):
                out.append(s)
        return out

    def update(self, final: bool = False) -> None:
        """Take every look whose planned scenarios are in (``final``: the last look on whatever is complete)."""
        if not self.active or self.record.decided:
            return
        try:
            while not self.record.decided:
                done = self.complete()
                k = len(self.record.looks) + 1
                if k > self.design.looks:
                    return
                planned = self.design.n[k - 1]
                if len(done) >= planned:
                    use = done[:planned]
                elif final and len(done) >= 2:
                    k, use = self.design.looks, done
                else:
                    return
                self._look(k, planned, use)
        finally:
            self._set_horizon()

    def _look(self, k: int, planned: int, scenarios: list[str]) -> None:
        from scipy import stats
        d, sw = self.design, self.sw
        frame = pd.DataFrame([r for r in self.rows.values() if r["scenario_id"] in set(scenarios)])
        clusters = [self.quarter_of[s] for s in scenarios]
        sampled = self.sampled()
        racing = self.racing()
        cols: dict[str, np.ndarray] = {}
        stat = {}
        for a in sampled:
            x = sw.sign * scenario_differences(frame, a, self.control, sw.metric).reindex(scenarios).to_numpy()
            cols[a] = x
            stat[a] = arm_statistics(x, clusters)
        df = stat[sampled[0]][4]
        t = np.array([stat[a][3] for a in sampled])
        with np.errstate(divide="ignore", invalid="ignore"):
            # no spread: the d_z of t's sign (an arm identical to the control is 0, not an infinite leader)
            es = np.array([stat[a][0] / stat[a][1] if stat[a][1] > 0 else
                           0.0 if stat[a][3] == 0 else math.copysign(math.inf, stat[a][0]) for a in sampled])
        is_racing = np.array([a in racing for a in sampled])
        declared = np.array([a in self.record.results and self.record.results[a].decision == "efficacy" for a in sampled])
        codes = decide(d, k, t, df, es, is_racing, sw.margin_or_none, declared)
        eff_t = float(z_to_t(d.efficacy[k - 1], df))
        fut_t = None if d.futility is None or k == d.looks else float(z_to_t(d.futility[k - 1], df))
        arms = []
        for i, a in enumerate(sampled):
            diff, sd, se, ti, dfi = stat[a]
            z = float(t_to_z(ti, dfi)) if math.isfinite(ti) else ti
            label = DECISIONS[codes[i]] if codes[i] else ("racing" if is_racing[i] else "estimating")
            arms.append(ArmLook(arm=a, diff=diff, sd=sd, se=se, t=ti, z=z, df=dfi, effect_size=float(es[i]),
                                efficacy_t=eff_t, futility_t=fut_t, decision=label))
            low, high = simultaneous_ci(d, diff, se, dfi, k)
            if codes[i]:
                naive_half = float(stats.t.ppf(1 - d.alpha / 2, dfi)) * se
                naive_p = float(stats.t.sf(ti, dfi)) if math.isfinite(ti) else (0.0 if ti > 0 else 1.0)
                self.record.results[a] = ArmResult(
                    arm=a, decision=DECISIONS[codes[i]], look=k, n=len(scenarios), diff=diff,
                    adjusted_p=float(adjusted_p(d, k, z)), ci_low=float(low), ci_high=float(high), ci_look=k,
                    naive_p=naive_p, naive_ci_low=diff - naive_half, naive_ci_high=diff + naive_half)
            elif not is_racing[i]:  # declared better earlier and going on: its interval at this look
                r = self.record.results[a]
                self.record.results[a] = r.model_copy(update={"ci_low": float(low), "ci_high": float(high), "ci_look": k})
        corr = None
        if len(cols) >= 2:
            with np.errstate(invalid="ignore", divide="ignore"):  # an arm without spread has no correlation
                mat = np.corrcoef(np.stack(list(cols.values())))
            off = mat[~np.eye(len(cols), dtype=bool)]
            corr = float(np.nanmean(off)) if np.isfinite(off).any() else None
        self.record.looks.append(SweepLook(look=k, n=len(scenarios), planned_n=planned, scenarios=list(scenarios),
                                           arms=arms, correlation=corr, at=_now()))
        if not self.racing():
            self.record.decided = True
            self.record.overrun = sorted(r for r, m in self.manifest_runs.items() if m.in_flight_since)
        write_record(self.layout.root, self.record)
        if not self.quiet:
            said = ", ".join(f"{a.arm} {a.decision}" for a in arms if a.decision not in ("racing", "estimating"))
            print(f"\nsweep look {k}/{d.looks}: {len(scenarios)} complete scenarios; {said or 'every arm racing'}",
                  file=sys.stderr)

    def finish(self) -> list[str]:
        """After the dispatch: the last look if due, and the runs never started that a decision made unnecessary
        marked ``not_needed`` (recorded per arm); their ids."""
        if not self.active:
            return []
        if not self.record.decided and not any(m.status == "pending" and self.needed_id(r)
                                               for r, m in self.manifest_runs.items()):
            self.update(final=True)
        idle = sorted(r for r, m in self.manifest_runs.items() if m.status == "pending" and not self.needed_id(r))
        by_arm: dict[str, list[str]] = {}
        for r in idle:
            self.manifest_runs[r].status = NOT_NEEDED
            by_arm.setdefault(self.manifest_runs[r].config, []).append(r)
        for a, ids in by_arm.items():
            self.record.not_needed[a] = sorted(set(self.record.not_needed.get(a, [])) | set(ids))
        write_record(self.layout.root, self.record)
        return idle

    def needed_id(self, run_id: str) -> bool:
        name = self.manifest_runs[run_id].config
        return not self.record.stopped and (name == self.control or name in self.sampled())


def _differs(old: SweepRecord, new: SweepRecord) -> str | None:
    """What of the sweep ``old`` records differs from ``new`` (None: the same one); bounds compared to 1e-9."""
    a, b = old.design, new.design
    fields = [f for f in ("control", "arms", "metric", "better", "order") if getattr(old, f) != getattr(new, f)]
    if old.select is not None:  # recorded (a record from before the rules were kept is compared without them)
        fields += [f for f in ("select", "margin", "on_efficacy") if getattr(old, f) != getattr(new, f)]
    fields += [f"design.{f}" for f in ("n", "arms", "alpha", "rule", "spending", "correlation", "effect")
               if getattr(a, f) != getattr(b, f)]
    for f in ("efficacy", "ci", "futility", "df"):
        x, y = getattr(a, f), getattr(b, f)
        if (x is None) != (y is None) or (x is not None and not np.allclose(x, y, rtol=0, atol=1e-9)):
            fields.append(f"design.{f}")
    return ", ".join(fields) or None


def sweep_plan(spec, runs: list[RunSpec], todo: list[RunSpec], figures: dict[str, Any], sweeps: int = 2000) -> dict[str, Any]:
    """The dry run's plan of a sweep: its looks and bounds, and its runs and dollars at most (the fixed grid) and
    expected under the global null (no arm better) and under the planned alternative (one arm at ``effect``, the
    rest null), by simulating ``sweeps`` sweeps with a fixed seed on the batch's own looks (``sweep_simulation``),
    the dollars at the estimate's mean cost per run left."""
    sw = spec.sweep
    arms = arms_of(spec, [r.config.name for r in runs])
    quarters = quarters_of(runs)
    design = design_of(spec, quarters, len(arms))
    clusters = [quarters[s] for s in schedule_order(quarters, sw.seed)]
    per_cell = len(runs) / ((len(arms) + 1) * len(quarters))  # replicates
    cost = figures["estimated_cost_usd"]
    per_run = None if cost is None or not todo else cost / len(todo)
    rules = Rules(sw.margin_or_none, sw.on_efficacy)
    rows = {}
    for label, effects in (("h0", [0.0] * len(arms)), ("h1", [sw.effect] + [0.0] * (len(arms) - 1))):
        out = simulate(design, np.asarray(effects), sweeps, np.random.default_rng(sw.seed), sw.correlation, rules,
                       clusters)
        expected = out["runs"] * per_cell
        rows[label] = {"expected_runs": round(expected, 1), "share_of_fixed": round(out["share_of_fixed"], 4),
                       "expected_cost_usd": None if per_run is None else round(expected * per_run, 4),
                       "family_wise_error": round(out["fwer"], 4),
                       "power": None if label == "h0" else round(out["power_per_better_arm"], 4)}
    return {"arms": arms, "control": sw.control, "rule": sw.rule, "looks": list(design.n),
            "efficacy_z": [round(x, 4) for x in design.efficacy],
            "futility_z": None if design.futility is None else [round(x, 4) for x in design.futility],
            "df": [round(x, 2) for x in design.df or []], "effect": sw.effect, "planned_power": sw.power,
            "power": round(design.power, 4), "notes": list(design.notes), "max_runs": len(runs),
            "max_cost_usd": None if per_run is None else round(per_run * len(runs), 4), "sweeps": sweeps, **rows}


def plan_lines(s: dict[str, Any]) -> list[str]:
    """The dry run's lines of a sweep's plan."""
    def cost(x: float | None) -> str:
        return "unknown" if x is None else f"${x:.2f}"
    out = [f"sweep: {len(s['arms'])} arms against {s['control']}, rule {s['rule']}, looks at {s['looks']} complete "
           f"scenarios (efficacy z {s['efficacy_z']}, futility z {s['futility_z']}, t df "
           f"{', '.join(f'{x:.1f}' for x in s['df'])}); one arm's power {s['power']:.3f} at d_z = {s['effect']:g} "
           f"(planned {s['planned_power']:g}; no selection drop)",
           f"  at most {s['max_runs']} runs, {cost(s['max_cost_usd'])} (the fixed grid)"]
    for label, name in (("h0", "the global null (no arm better)"), ("h1", f"one arm at d_z = {s['effect']:g}")):
        r = s[label]
        power = "" if r["power"] is None else f"; that arm declared better {r['power']:.1%}"
        out.append(f"  under {name}: {r['expected_runs']:.0f} runs expected ({r['share_of_fixed']:.0%} of the grid), "
                   f"{cost(r['expected_cost_usd'])}; family-wise error {r['family_wise_error']:.3f}{power} "
                   f"({s['sweeps']:,} simulated sweeps)")
    out += [f"  note: {n}" for n in s["notes"]]
    return out
