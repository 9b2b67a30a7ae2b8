"""The deterministic reasoning audit: mechanical failure counts, no LLM (PAPER_NOTES §3).

Run over every proposal and revision. The counts sit beside the LLM scorer's
own counts so a batch reports how often the two agree.
"""

from __future__ import annotations

from pydantic import BaseModel

from debate.schemas import CritiqueItem, Proposal, Revision, weights_of

ORPHAN_WEIGHT = 0.10


class AuditCounts(BaseModel):
    claims: int
    #: Claims that cite no ID present in the memo.
    claims_without_valid_evidence: int
    #: Cited IDs (over all claims) that are not in the memo.
    unknown_evidence_ids: int
    #: Received critiques with no critique_response for their (from_agent, target_claim).
    unanswered_critiques: int
    #: Positions above 10% with no supporting claim that exists.
    orphaned_positions: int
    #: supporting_claims entries that name a claim ID the answer does not contain.
    dangling_supporting_claims: int
    #: Claims whose impacts_positions all carry zero weight (reasoning–allocation disconnect).
    disconnected_claims: int

    @property
    def total(self) -> int:
        return sum(v for k, v in self.model_dump().items() if k != "claims")


def audit_turn(turn: Proposal | Revision, memo_ids: set[str],
               received: list[tuple[str, CritiqueItem]] | None = None) -> AuditCounts:
    claim_ids = {c.claim_id for c in turn.claims}
    weights = weights_of(turn.allocation)
    no_evidence = sum(1 for c in turn.claims if not any(i.strip("[]") in memo_ids for i in c.evidence_ids))
    unknown = sum(1 for c in turn.claims for i in c.evidence_ids if i.strip("[]") not in memo_ids)
    supported = {r.ticker for r in turn.position_rationale if any(s in claim_ids for s in r.supporting_claims)}
    orphaned = sum(1 for t, w in weights.items() if w > ORPHAN_WEIGHT and t not in supported)
    dangling = sum(1 for r in turn.position_rationale for s in r.supporting_claims if s not in claim_ids)
    disconnected = sum(1 for c in turn.claims if c.impacts_positions and all(weights.get(t, 0.0) == 0 for t in c.impacts_positions))
    unanswered = 0
    if received:
        answered = {(r.from_agent, r.target_claim) for r in getattr(turn, "critique_responses", [])}
        unanswered = sum(1 for agent, item in received if (agent, item.target_claim) not in answered)
    return AuditCounts(claims=len(turn.claims), claims_without_valid_evidence=no_evidence, unknown_evidence_ids=unknown,
                       unanswered_critiques=unanswered, orphaned_positions=orphaned,
                       dangling_supporting_claims=dangling, disconnected_claims=disconnected)
