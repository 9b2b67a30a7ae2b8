"""The RCA consistency judge: does a turn's output follow from its own reasoning?

LLM models answer the prompt in ``configs/scoring/rca.yaml``; ``rules/rca``
(non-LLM) checks mechanically that accepted critiques moved the allocation,
that every critique was answered, and that no held position is orphaned.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from madbench.debate.grading import RCAVerdict
from madbench.debate.schemas import Argument, ReceivedCritique, Revision, weights_of
from madbench.scoring.audit import audit_turn

RCA_VARIABLES = frozenset({"phase", "agent_id", "before", "after", "critiques"})


class RCATask(BaseModel):
    model_config = ConfigDict(extra="forbid")
    phase: str
    agent_id: str
    before: Argument | None
    after: Argument
    critiques: list[ReceivedCritique] = Field(default_factory=list)
    memo_ids: list[str]


def rules_verdict(task: RCATask) -> RCAVerdict:
    after = task.after
    audit = audit_turn(after, set(task.memo_ids), [(c.from_agent, c.item) for c in task.critiques])
    if audit.unanswered_critiques:
        return RCAVerdict(verdict="inconsistent", reason=f"{audit.unanswered_critiques} critique(s) left unanswered",
                          feedback="Answer every critique you received by its target_claim.")
    if audit.orphaned_positions or audit.disconnected_claims:
        return RCAVerdict(verdict="inconsistent",
                          reason=f"{audit.orphaned_positions} orphaned position(s), {audit.disconnected_claims} claim(s) about unheld tickers",
                          feedback="Support every position above 10% with a claim, and hold what your claims argue for.")
    if task.before is not None and isinstance(after, Revision):
        w0, w1 = weights_of(task.before.allocation), weights_of(after.allocation)
        claims = {c.claim_id: c for c in task.before.claims}
        for r in after.critique_responses:
            if r.disposition == "accept" and r.target_claim in claims:
                tickers = claims[r.target_claim].impacts_positions
                if tickers and all(abs(w1.get(t, 0) - w0.get(t, 0)) < 1e-6 for t in tickers):
                    return RCAVerdict(verdict="inconsistent",
                                      reason=f"accepted the critique of {r.target_claim} but left {', '.join(tickers)} unchanged",
                                      feedback=f"Either change {', '.join(tickers)} as the accepted critique implies, or rebut it.")
    return RCAVerdict(verdict="consistent", reason="rule checks passed (non-LLM)", feedback="")
