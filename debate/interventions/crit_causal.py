"""A10 CRIT-causal: an agent whose causal-alignment pillar (P4) falls below a threshold is nudged,
revises again, and is re-scored.

Hook: ``after_crit`` — nudges and re-revises each agent below the threshold (up to ``max_retries``
times, re-scored each time), then measures the revisions' divergence again.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from madbench.debate.grading import CritScore
from madbench.debate.interventions.hooks import Debate, fired

DEFAULT_NUDGE = ("Your causal claims outrun their evidence. For each claim, either name the mechanism and what would "
                 "have to hold for it, or relabel it as observational or pattern. Do not claim causes from price statistics.")


#: Its place in a protocol's call plan (``madbench.debate.protocols.plan``): the rates (fields of the estimate's
#: ``Rates``) at which an agent falls below the threshold, and stays below after a re-revision.
FIRING_RATES = ("cc_fire", "cc_refire")


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    p4_threshold: float = Field(0.8, ge=0, le=1)
    nudge: str = DEFAULT_NUDGE
    max_retries: int = Field(1, ge=1)


def targets(p4_by_agent: dict[str, float], p: Params) -> list[str]:
    return sorted(a for a, p4 in p4_by_agent.items() if p4 < p.p4_threshold)


async def after_crit(debate: Debate, p: Params, round_: int, scores: dict[str, CritScore]) -> None:
    """Nudge, re-revise and re-score every agent whose P4 is below the threshold; ``scores`` is updated in place."""
    for agent_id in targets({k: s.scores.causal_alignment for k, s in scores.items()}, p):
        a = debate.agent(agent_id)
        fired(debate, {"name": "crit_causal", "round": round_, "agent": agent_id,
                       "reason": f"P4 {scores[agent_id].scores.causal_alignment:.2f} < {p.p4_threshold:g}"},
              "nudge, re-run revise and CRIT")
        for attempt in range(1, p.max_retries + 1):
            debate.revisions[agent_id] = await debate.revise(a, [p.nudge], f"revise:crit_causal{attempt}")
            scores[agent_id] = await debate.crit(a, round_, label=f"crit:retry{attempt}")
            if scores[agent_id].scores.causal_alignment >= p.p4_threshold:
                break
    debate.js_rev = debate.revision_divergence(round_)
