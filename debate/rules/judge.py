"""The rule-based judge: the capped mean of the final allocations (non-LLM)."""

from __future__ import annotations

from madbench.debate.rules.analyst import fix_rounding
from madbench.debate.schemas import Holding, JudgeDecision
from madbench.debate.task import AgentTask
from madbench.debate.validation import cap_weights


def judge(task: AgentTask) -> JudgeDecision:
    finals = [{h.ticker: h.weight for h in p.allocation} for p in task.peers.values()]
    mean = {t: sum(f.get(t, 0.0) for f in finals) / len(finals) for t in task.universe}
    c = task.constraints
    if c.max_tickers is not None:
        keep = sorted(task.universe, key=lambda t: (-mean[t], t))[: c.max_tickers]
        mean = {t: (mean[t] if t in keep else 0.0) for t in task.universe}
    total = sum(mean.values())
    weights = cap_weights({t: w / total for t, w in mean.items()}, c.max_weight)
    weights = fix_rounding({t: round(w, 6) for t, w in weights.items()})
    return JudgeDecision(
        allocation=[Holding(ticker=t, weight=weights[t]) for t in task.universe],
        rationale=f"Rule-based judge (non-LLM): capped mean of {len(finals)} final allocations.",
        consensus_points=[f"{t} held by every agent" for t in task.universe if all(f.get(t, 0) > 0 for f in finals)],
        dissent_points=[f"{t} held by some agents only" for t in task.universe
                        if 0 < sum(f.get(t, 0) > 0 for f in finals) < len(finals)])
