"""`desks`: independent analyst desks → bull/bear debate → debate map → research manager → synthesiser.

After the independent-desks pipeline (PAPER_NOTES §6). Each desk's prompt is built from its slice of
the memo alone, so isolation is structural, not an instruction. The synthesiser picks directions, but
its conviction is capped by the desks' signal convergence, recomputed here, and zeroed where it
contradicts them; the allocation follows the calibrated convictions.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from madbench.debate.config import DebateConfig
from madbench.debate.context import RunContext, gather_turns
from madbench.debate.events import Conviction
from madbench.debate.outcome import Outcome
from madbench.debate.protocols.plan import Call, Plan, Step, stage
from madbench.debate.protocols.staged import (
    SLICES,
    Staged,
    ask_stage,
    known_ids_check,
    memo_slice,
    record_local,
    tickers_check,
)
from madbench.debate.rules import staged_answers as rules
from madbench.debate.rules.analyst import fix_rounding
from madbench.debate.stage_schemas import Argument, DebateMap, DeskReport, Ruling, Synthesis, TickerSignal, TickerView
from madbench.debate.task import StageTask
from madbench.debate.validation import cap_weights

# -- the deterministic ceiling (pure functions) -------------------------------------------------

SIGN = {"strong_buy": 1, "buy": 1, "neutral": 0, "sell": -1, "strong_sell": -1}
CONFIDENCE_WEIGHT = {"high": 1.0, "medium": 0.6, "low": 0.3}


def directional_totals(signals: list[TickerSignal]) -> tuple[float, float, float]:
    """(buy, sell, total) confidence weights; neutral signals count in the total only."""
    buy = sum(CONFIDENCE_WEIGHT[s.confidence] for s in signals if SIGN[s.signal] > 0)
    sell = sum(CONFIDENCE_WEIGHT[s.confidence] for s in signals if SIGN[s.signal] < 0)
    return buy, sell, sum(CONFIDENCE_WEIGHT[s.confidence] for s in signals)


def signal_convergence(signals: list[TickerSignal]) -> float:
    """max(buy, sell) / total: confidence-weighted agreement on a direction. Neutral or missing evidence
    stays in the denominator and so lowers convergence instead of being ignored. 0 with no signals."""
    buy, sell, total = directional_totals(signals)
    return 0.0 if total == 0 else round(max(buy, sell) / total, 4)


def directional_consensus(signals: list[TickerSignal]) -> float:
    """Signed convergence: +convergence when the desks lean buy, −convergence when they lean sell, 0 on a tie."""
    buy, sell, _ = directional_totals(signals)
    return 0.0 if buy == sell else (1 if buy > sell else -1) * signal_convergence(signals)


def calibrate_conviction(signal: str, model_conviction: float, consensus: float) -> float:
    """Cap the synthesiser's conviction by the desks: sign(signal)·min(|model|, |consensus|), and exactly 0
    when the signal is neutral or points against the desks' direction (sign(signal)·consensus ≤ 0)."""
    direction = SIGN[signal]
    if direction == 0 or direction * consensus <= 0:
        return 0.0
    return round(direction * min(abs(model_conviction), abs(consensus)), 4)


def conviction_allocation(convictions: dict[str, float], consensus: dict[str, float], universe: list[str], constraints,
                          no_conviction: str) -> tuple[dict[str, float], float, list[str]]:
    """Weights ∝ positive calibrated conviction, capped at max_weight; fill-ins and empty books follow declared policies."""
    notes = []
    held = sorted((t for t in universe if convictions[t] > 0), key=lambda t: (-convictions[t], t))
    if constraints.max_tickers:
        held = held[: constraints.max_tickers]
    if not held:
        if no_conviction == "cash" and constraints.allow_cash:
            return {t: 0.0 for t in universe}, 1.0, ["no positive calibrated conviction: all cash (options.no_conviction)"]
        notes.append("no positive calibrated conviction: equal weight (options.no_conviction)")
        return _rounded({t: 1 / len(universe) for t in universe}), 0.0, notes
    need = max(constraints.min_holdings, math.ceil(1 / constraints.max_weight - 1e-9))  # so the weight cap can hold
    raw = {t: convictions[t] for t in held}
    if len(held) < need:
        extra = sorted((t for t in universe if t not in raw), key=lambda t: (-consensus[t], t))[: need - len(held)]
        floor = min(raw.values()) / 2
        raw |= {t: floor for t in extra}
        notes.append(f"filled to {need} holdings (min_holdings / max_weight) with {', '.join(extra)} at half the smallest conviction")
    total = sum(raw.values())
    weights = cap_weights({t: raw[t] / total for t in raw}, constraints.max_weight)
    return _rounded({t: weights.get(t, 0.0) for t in universe}), 0.0, notes



def _rounded(weights: dict[str, float]) -> dict[str, float]:
    return fix_rounding({t: round(w, 6) for t, w in weights.items()})  # sums to exactly 1


# -- the protocol --------------------------------------------------------------------------------

class Options(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    debate_rounds: int = Field(3, ge=0, le=6)
    enable_research_manager: bool = True
    #: What an all-zero conviction book holds: equal weights, or cash where the scenario allows it.
    no_conviction: Literal["equal", "cash"] = "equal"


#: The debate's two sides, in the order they speak each round.
SIDES = ("bull", "bear")
DEBATE_MAP = stage("debate_map", "moderator", DebateMap)
RESEARCH_MANAGER = stage("research_manager", "research_manager", Ruling)
SYNTHESISER = stage("synthesiser", "synthesiser", Synthesis)


def desk_role(desk: str) -> str:
    return f"desk_{desk}"


def debate_steps(first: str, desks: tuple[str, ...], rounds: int) -> tuple[list[Step], tuple[str, ...], tuple[str, ...]]:
    """The desks (stage ``first``) with evidence in their slice, concurrently (a desk without evidence answers
    without a call), then each round the sides in turn, each seeing the reports and every argument so far:
    (steps, the reports' kinds, the history's kinds)."""
    steps = [Step(first, tuple(stage(first, desk_role(d), DeskReport, desk=d) for d in desks))] if desks else []
    reports = (first,) * len(desks)
    history: tuple[str, ...] = ()
    for r in range(1, rounds + 1):
        for side in SIDES:
            steps.append(Step(side, (stage(side, side, Argument, reports + history, round=r),)))
            history += (side,)
    return steps, reports, history


def _after(call: Call, sees: tuple[str, ...]) -> Step:
    return Step(call.kind, (replace(call, sees=sees),))


def plan(cfg: DebateConfig, desks: tuple[str, ...] = ()) -> Plan:
    """desks → bull, bear per round → debate map → [research manager] → synthesiser, one step after another."""
    opt = Options.model_validate(cfg.options)
    steps, reports, history = debate_steps("desk", desks, opt.debate_rounds)
    steps.append(_after(DEBATE_MAP, reports + history))
    ruling: tuple[str, ...] = ()
    if opt.enable_research_manager:
        steps.append(_after(RESEARCH_MANAGER, reports + history + ("debate_map",)))
        ruling = ("research_manager",)
    steps.append(_after(SYNTHESISER, reports + ("debate_map",) + ruling))
    return Plan(protocol="desks", prompts="stages", rounds=0, steps=tuple(steps))


def neutral_report(universe: list[str], desk: str) -> DeskReport:
    return DeskReport(signals=[TickerSignal(ticker=t, signal="neutral", confidence="low") for t in universe], key_points=[],
                      evidence_ids=[], summary=f"No {desk} evidence in the memo: neutral, low confidence, no model called.")


def stage_task(ctx: RunContext, protocol: str, stage: str, role: str, evidence=None, inputs=None, round_: int = 0, params=None) -> StageTask:
    return StageTask(protocol=protocol, stage=stage, role=role, agent_id=role, round=round_, universe=ctx.universe,
                     constraints=ctx.constraints, evidence=ctx.memo.items if evidence is None else evidence,
                     inputs=inputs or {}, params=params or {})


def covers_universe(tickers: list[str], universe: list[str], field: str) -> list[str]:
    problems = tickers_check(tickers, universe, field)
    missing = sorted(set(universe) - set(tickers))
    dupes = sorted({t for t in tickers if tickers.count(t) > 1})
    if missing:
        problems.append(f"{field}: give exactly one entry per ticker; missing {', '.join(missing)}")
    if dupes:
        problems.append(f"{field}: {', '.join(dupes)} listed more than once")
    return problems


async def run_desks(ctx: RunContext, protocol: str, stage: str = "desk") -> dict[str, DeskReport]:
    """Every desk concurrently, each prompted with its own slice of the memo only."""
    async def one(desk: str) -> DeskReport:
        evidence = memo_slice(ctx.memo.items, desk)
        task = stage_task(ctx, protocol, stage, desk_role(desk), evidence, params={"desk": desk})
        if not evidence:
            report = neutral_report(ctx.universe, desk)
            record_local(ctx, task, report, f"no {desk} evidence in the memo: neutral report without a model call")
            return report
        allowed = {i.id for i in evidence}

        def check(r: DeskReport) -> list[str]:
            return covers_universe([s.ticker for s in r.signals], ctx.universe, "signals") + \
                known_ids_check(r, allowed, f"the {desk} slice")
        report, _, _ = await ask_stage(ctx, task, DeskReport, {"desk": desk}, check, visible_ids=allowed)
        return report
    reports = await gather_turns(*(one(d) for d in SLICES))
    return dict(zip(SLICES, reports, strict=True))


def reports_json(reports: dict[str, DeskReport]) -> str:
    return json.dumps({d: r.model_dump(mode="json") for d, r in reports.items()}, indent=1)


async def bull_bear(ctx: RunContext, protocol: str, reports: dict[str, DeskReport], rounds: int) -> list[dict]:
    """Sequential bull then bear turns; each sees the desk reports and the whole history so far."""
    allowed = {i for r in reports.values() for i in r.evidence_ids}
    history: list[dict] = []
    for r in range(1, rounds + 1):
        for side in SIDES:
            task = stage_task(ctx, protocol, side, side, [], {"reports": {d: x.model_dump(mode="json") for d, x in reports.items()},
                                                             "history": history}, r)

            def check(a: Argument) -> list[str]:
                return tickers_check(a.favoured_tickers, ctx.universe, "favoured_tickers") + \
                    known_ids_check(a, allowed, "the desk reports")
            arg, _, _ = await ask_stage(ctx, task, Argument, {"reports": reports_json(reports),
                                                              "history": json.dumps(history, indent=1)}, check,
                                          visible_ids=allowed)
            history.append({"round": r, "side": side, **arg.model_dump(mode="json")})
    return history


async def run(ctx: RunContext) -> Outcome:
    opt = Options.model_validate(ctx.config.options)
    reports = await run_desks(ctx, "desks")
    history = await bull_bear(ctx, "desks", reports, opt.debate_rounds)
    shared = {"reports": {d: r.model_dump(mode="json") for d, r in reports.items()}, "history": history}
    text = {"reports": reports_json(reports), "history": json.dumps(history, indent=1)}
    dmap, _, _ = await ask_stage(ctx, stage_task(ctx, "desks", DEBATE_MAP.kind, DEBATE_MAP.role, [], shared), DebateMap,
                                 text)
    ruling = None
    if opt.enable_research_manager:
        memo_ids = ctx.memo_ids

        def check_ruling(r: Ruling) -> list[str]:
            bad = sorted({c.metric_id for c in r.invalidation_conditions} - memo_ids)
            return [f"invalidation_conditions: metric_id {', '.join(bad)} not in the memo; name a memo evidence ID"] if bad else []
        ruling, _, _ = await ask_stage(ctx, stage_task(ctx, "desks", RESEARCH_MANAGER.kind, RESEARCH_MANAGER.role, [],
                                                       {**shared, "debate_map": dmap.model_dump(mode="json")}),
                                       Ruling, {**text, "debate_map": dmap.model_dump_json(indent=1)}, check_ruling)
    ruling_json = ruling.model_dump_json(indent=1) if ruling else "(no research manager in this configuration)"
    synth, _, _ = await ask_stage(
        ctx, stage_task(ctx, "desks", SYNTHESISER.kind, SYNTHESISER.role, [],
                        {**shared, "debate_map": dmap.model_dump(mode="json"), "ruling": ruling.model_dump(mode="json") if ruling else None}),
        Synthesis, {**text, "debate_map": dmap.model_dump_json(indent=1), "ruling": ruling_json},
        lambda s: covers_universe([v.ticker for v in s.views], ctx.universe, "views"))
    per_ticker = {t: [s for r in reports.values() for s in r.signals if s.ticker == t] for t in ctx.universe}
    convergence = {t: signal_convergence(per_ticker[t]) for t in ctx.universe}
    consensus = {t: directional_consensus(per_ticker[t]) for t in ctx.universe}
    views: dict[str, TickerView] = {v.ticker: v for v in synth.views}
    calibrated = {t: calibrate_conviction(views[t].signal, views[t].conviction, consensus[t]) for t in ctx.universe}
    weights, cash, notes = conviction_allocation(calibrated, consensus, ctx.universe, ctx.constraints, opt.no_conviction)
    ctx.trace.write(Conviction(convergence=convergence, consensus=consensus,
                   model={t: views[t].conviction for t in ctx.universe}, calibrated=calibrated, weights=weights, notes=notes))
    zeroed = sorted(t for t in ctx.universe if views[t].conviction != 0 and calibrated[t] == 0)
    return Outcome(weights=weights, cash=cash, method="desks:conviction", rounds_run=opt.debate_rounds, rho_bar=None,
                   notes=notes, extras={
                       "ruling": ruling.ruling if ruling else "none", "debate_map": dmap.model_dump(mode="json"),
                       "mean_convergence": round(sum(convergence.values()) / len(convergence), 4),
                       "conviction": calibrated, "conviction_zeroed": len(zeroed),
                       "desks_without_evidence": sum(1 for d in SLICES if not memo_slice(ctx.memo.items, d)),
                       "departs_from_ruling": synth.departs_from_ruling})


class Desks(Staged):
    """Independent analyst desks → bull/bear debate → debate map → research manager → synthesiser."""
    name = "desks"
    Options = Options
    rule_answers = {"desk": rules.desk, "bull": rules.researcher, "bear": rules.researcher, "debate_map": rules.debate_map,
                    "research_manager": rules.research_manager, "synthesiser": rules.synthesiser}

    def plan(self, cfg: DebateConfig, desks: tuple[str, ...] = ()) -> Plan:
        return plan(cfg, desks)

    async def run(self, ctx: RunContext) -> Outcome:
        return await run(ctx)
