"""The rule-based CRIT scorer (``rules/crit``, non-LLM): pillar scores from the deterministic audit.

Each pillar starts at 0.90 (the scorer cannot see argument quality beyond
mechanics) and takes the cap its mechanical failure count implies. Causal
overreach is approximated mechanically: a claim typed ``causal`` whose
evidence is only price-derived statistics.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from debate.grading import CritDiagnostics, PillarExplanations, PillarScores
from debate.schemas import Proposal, ReceivedCritique, Revision
from madbench_data.memo import PRICE_FEATURE_KEYS
from scoring.audit import audit_turn
from scoring.crit import CritAnswer, cap_for, pillar_counts

BASE = 0.90


class CritTask(BaseModel):
    """What the scorer grades: one agent's revision in one round, with what it had to answer."""

    model_config = ConfigDict(extra="forbid")
    agent_id: str
    role: str
    round: int
    memo_ids: list[str]
    argument: Revision | Proposal
    critiques: list[ReceivedCritique] = Field(default_factory=list)


def overreach(task: CritTask) -> int:
    def price_only(ids):
        fields = [i.strip("[]").split("-", 1)[1] if "-" in i else i for i in ids]
        return bool(fields) and all(f in PRICE_FEATURE_KEYS for f in fields)
    return sum(1 for c in task.argument.claims if c.reasoning_type == "causal" and price_only(c.evidence_ids))


def score(task: CritTask) -> CritAnswer:
    a = audit_turn(task.argument, set(task.memo_ids), [(r.from_agent, r.item) for r in task.critiques])
    d = CritDiagnostics(
        contradictions=a.dangling_supporting_claims + a.disconnected_claims,
        unsupported_claims=a.claims_without_valid_evidence + a.unknown_evidence_ids,
        ignored_critiques=a.unanswered_critiques, causal_overreach=overreach(task),
        orphaned_positions=a.orphaned_positions, premature_certainty=False, conclusion_drift=False)
    counts = pillar_counts(d)
    scores = PillarScores(**{p: min(BASE, cap_for(n)) for p, n in counts.items()})
    why = PillarExplanations(**{p: f"rule-based (non-LLM): {n} mechanical failure(s)" for p, n in counts.items()})
    return CritAnswer(diagnostics=d, scores=scores, explanations=why)
