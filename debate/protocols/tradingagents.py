"""`tradingagents`: analyst team → bull/bear researchers → trader → risk team → portfolio manager (PAPER_NOTES §6).

Analysts (the quick tier) read their own slices of the memo in parallel; the researchers, trader and
portfolio manager are meant for the deep tier (route them with `models.roles`). A persistent decision log
in the results directory feeds a reflection loop: when the log holds this universe's decision for the
previous quarter, its realised outcome (backtested on the pack, which by then is point-in-time history)
is written as a short reflection and put into this run's trader and manager prompts.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from madbench.debate.config import DebateConfig
from madbench.debate.context import RunContext, gather_turns
from madbench.debate.events import Reflection
from madbench.debate.outcome import Outcome
from madbench.debate.protocols.desks import bull_bear, debate_steps, reports_json, run_desks, stage_task
from madbench.debate.protocols.plan import Plan, Step, stage
from madbench.debate.protocols.staged import Staged, ask_stage, known_ids_check, tickers_check
from madbench.debate.rules import staged_answers as rules
from madbench.debate.stage_schemas import PMDecision, RiskView, TradePlan

P = "tradingagents"
LOG_NAME = "decision_log.jsonl"
STANCES = ("aggressive", "neutral", "conservative")


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    debate_rounds: int = Field(2, ge=0, le=6)
    reflection: bool = True


def risk_role(stance: str) -> str:
    return f"risk_{stance}"


def plan(cfg: DebateConfig, desks: tuple[str, ...] = ()) -> Plan:
    """analysts → bull, bear per round → trader → the risk stances concurrently → portfolio manager. The trader
    and the manager are also shown the reflection line; the risk team the trader's proposed book."""
    opt = Options.model_validate(cfg.options)
    steps, reports, history = debate_steps("analyst", desks, opt.debate_rounds)
    steps.append(Step("trader", (stage("trader", "trader", TradePlan, reports + history, context=("reflection",)),)))
    steps.append(Step("risk", tuple(stage("risk", risk_role(s), RiskView, reports, context=("book",)) for s in STANCES)))
    steps.append(Step("portfolio_manager", (stage("portfolio_manager", "portfolio_manager", PMDecision,
                                                  ("trader",) + ("risk",) * len(STANCES), context=("reflection",)),)))
    return Plan(protocol=P, prompts="stages", rounds=0, steps=tuple(steps))


def _alloc(a):
    return a.allocation, a.cash_weight


def universe_key(tickers: list[str]) -> str:
    return ",".join(sorted(tickers))


def read_log(path: Path) -> list[dict]:
    """Entries of the decision log, one per run (a resumed run's repeated line is kept once)."""
    if not path.exists():
        return []
    entries = {}
    for line in path.read_text().splitlines():
        if line.strip():
            e = json.loads(line)
            entries[e["run_id"]] = e
    return list(entries.values())


def append_log(path: Path, entry: dict) -> None:
    """One line per decision, appended whole (O_APPEND, one write, fsync)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(entry, sort_keys=True) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def reflection_for(ctx: RunContext, log: list[dict]) -> tuple[str, str | None]:
    """(text, source run id) for the previous quarter's decision on this universe, if the log has one."""
    prev = str(ctx.scenario.quarter.previous())
    same = [e for e in log if e["universe"] == universe_key(ctx.universe) and e["invest_quarter"] == prev
            and e["config"] == ctx.config.name and e["replicate"] == ctx.sample_index]
    if not same:
        return "No earlier decision on this universe is in the log.", None
    if ctx.past_performance is None:  # the runner always supplies it; without prices the outcome cannot be told
        raise RuntimeError("tradingagents reflection needs past_performance on the run context")
    entry = same[-1]
    m = ctx.past_performance(ctx.scenario.quarter.previous(), entry["weights"], f"decision log entry {entry['run_id']}")
    held = ", ".join(f"{t} {w:.0%}" for t, w in sorted(entry["weights"].items(), key=lambda x: -x[1]) if w > 0)
    verdict = "beat" if m.excess_return_pct > 0 else "lagged"
    return (f"Last quarter the desk held {held}. It returned {m.total_return_pct:+.2f}% against SPY's "
            f"{m.spy_return_pct:+.2f}% ({m.excess_return_pct:+.2f} points: it {verdict} the market; Sharpe "
            f"{m.sharpe if m.sharpe is not None else float('nan'):.2f}). Weigh what drove that before repeating or reversing it."), entry["run_id"]


async def run(ctx: RunContext) -> Outcome:
    opt = Options.model_validate(ctx.config.options)
    log_path = (ctx.workdir or Path(".")) / LOG_NAME
    reflection, source = ("Reflection is off for this configuration.", None)
    if opt.reflection:
        reflection, source = reflection_for(ctx, read_log(log_path))
    ctx.trace.write(Reflection(text=reflection, source_run=source, log=str(log_path)))
    reports = await run_desks(ctx, P, stage="analyst")
    history = await bull_bear(ctx, P, reports, opt.debate_rounds)
    allowed = {i for r in reports.values() for i in r.evidence_ids}
    text = {"reports": reports_json(reports), "history": json.dumps(history, indent=1), "reflection": reflection}
    inputs = {"reports": {d: r.model_dump(mode="json") for d, r in reports.items()}, "history": history, "reflection": reflection}
    trade, plan_w, _ = await ask_stage(ctx, stage_task(ctx, P, "trader", "trader", [], inputs), TradePlan, text,
                                      lambda t: known_ids_check(t, allowed, "the analyst reports"), allocation=_alloc,
                                      visible_ids=allowed)

    async def risk(stance: str) -> RiskView:
        def check(v: RiskView) -> list[str]:
            wrong = [] if v.stance == stance else [f"stance must be {stance!r}"]
            return wrong + tickers_check([c.ticker for c in v.caps], ctx.universe, "caps")
        view, _, _ = await ask_stage(ctx, stage_task(ctx, P, "risk", risk_role(stance), [], {"plan": plan_w, "stance": stance}),
                                     RiskView, {"plan": json.dumps(plan_w, indent=1), "stance": stance,
                                                "reports": text["reports"]}, check, label=f"risk:{stance}", enums={"stance": [stance]})
        return view
    views = await gather_turns(*(risk(s) for s in STANCES))
    risk_json = json.dumps([v.model_dump(mode="json") for v in views], indent=1)
    decision, weights, cash = await ask_stage(
        ctx, stage_task(ctx, P, "portfolio_manager", "portfolio_manager", [],
                        {"plan": plan_w, "risk": [v.model_dump(mode="json") for v in views], "reflection": reflection}),
        PMDecision, {"plan": trade.model_dump_json(indent=1), "risk": risk_json, "reflection": reflection}, allocation=_alloc)
    append_log(log_path, {"run_id": ctx.run_id, "universe": universe_key(ctx.universe), "invest_quarter": str(ctx.scenario.quarter),
                          "config": ctx.config.name, "replicate": ctx.sample_index, "weights": weights, "cash": cash,
                          "decision": decision.decision})
    return Outcome(weights=weights, cash=cash, method=f"tradingagents:pm:{decision.decision}", rounds_run=opt.debate_rounds,
                   rho_bar=None, extras={"pm_decision": decision.decision, "reflection_from": source or "none",
                                         "trader_weights": plan_w,
                                         "risk_caps": {v.stance: len(v.caps) for v in views}})


class TradingAgents(Staged):
    """Analyst team → bull/bear researchers → trader → risk team → portfolio manager, with a reflection loop."""
    name = P
    Options = Options
    rule_answers = {"analyst": rules.desk, "bull": rules.researcher, "bear": rules.researcher, "trader": rules.trader,
                    "risk": rules.risk_team, "portfolio_manager": rules.portfolio_manager}

    def plan(self, cfg: DebateConfig, desks: tuple[str, ...] = ()) -> Plan:
        return plan(cfg, desks)

    async def run(self, ctx: RunContext) -> Outcome:
        return await run(ctx)
