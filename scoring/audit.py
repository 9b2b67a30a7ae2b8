"""The deterministic reasoning audit: mechanical failure counts, no LLM (PAPER_NOTES §3).

Run over every proposal and revision. The counts sit beside the LLM scorer's
own counts so a batch reports how often the two agree.

A basic-tier argument makes no structured claims (paper App. B.16: an allocation with a free-text
justification). Its audit reads the free text instead, as the paper's CRIT rubric reads a claim's text when
it has no ``evidence_ids`` (App. B.15): bracketed IDs in the text are its citations, a holding above 10% that
the justification never names is orphaned, and a critique counts as answered when the revision notes name
its sender. That it has no claims at all is counted too (``claimless``): its evidence supports no claim that
can be checked, which the rule-based scorer charges to evidential support.
"""

from __future__ import annotations

import re

from pydantic import BaseModel

from madbench.debate.schemas import Argument, BasicProposal, BasicRevision, CritiqueItemAny, weights_of

ORPHAN_WEIGHT = 0.10
#: An evidence ID written in brackets inside free text, e.g. [AAPL-RET60] or [L1-10Y].
INLINE_ID = re.compile(r"\[([A-Za-z0-9][A-Za-z0-9_.]*-[A-Za-z0-9_]+)\]")


class AuditCounts(BaseModel):
    claims: int
    #: Claims that cite no ID present in the memo.
    claims_without_valid_evidence: int
    #: Cited IDs (over all claims; in a claim-less argument, the distinct IDs its text cites) that are not in the memo.
    unknown_evidence_ids: int
    #: Received critiques with no critique_response for their (from_agent, target_claim); in a claim-less
    #: revision, critiques whose sender its revision notes do not name.
    unanswered_critiques: int
    #: Positions above 10% with no supporting claim that exists (claim-less: that the justification never names).
    orphaned_positions: int
    #: supporting_claims entries that name a claim ID the answer does not contain.
    dangling_supporting_claims: int
    #: Claims whose impacts_positions all carry zero weight (reasoning–allocation disconnect).
    disconnected_claims: int
    #: 1 when the argument makes no structured claims (the basic tier): no evidence is tied to a claim.
    claimless: int = 0
    #: 1 when a claim-less argument's free text cites no memo ID at all.
    uncited_rationale: int = 0

    @property
    def total(self) -> int:
        return sum(v for k, v in self.model_dump().items() if k != "claims")


def free_text(turn: BasicProposal) -> list[str]:
    """A claim-less argument's text, in order: its justification, risks and (in a revision) revision notes."""
    return [turn.thesis, *turn.risks_or_falsifiers, *([turn.revision_notes] if isinstance(turn, BasicRevision) else [])]


def names(text: str, word: str) -> bool:
    """Whether ``text`` names ``word`` (a ticker, an agent id) as a whole word."""
    return re.search(rf"(?<![A-Za-z0-9]){re.escape(word)}(?![A-Za-z0-9])", text) is not None


def audit_turn(turn: Argument, memo_ids: set[str],
               received: list[tuple[str, CritiqueItemAny]] | None = None) -> AuditCounts:
    if isinstance(turn, BasicProposal):
        return _audit_claimless(turn, memo_ids, received or [])
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


def _audit_claimless(turn: BasicProposal, memo_ids: set[str], received: list[tuple[str, CritiqueItemAny]]) -> AuditCounts:
    cited = set(INLINE_ID.findall(" ".join(free_text(turn))))
    notes = turn.revision_notes if isinstance(turn, BasicRevision) else ""
    orphaned = sum(1 for t, w in weights_of(turn.allocation).items() if w > ORPHAN_WEIGHT and not names(turn.thesis, t))
    return AuditCounts(claims=0, claims_without_valid_evidence=0, unknown_evidence_ids=len(cited - memo_ids),
                       unanswered_critiques=sum(1 for agent, _ in received if not names(notes, agent)),
                       orphaned_positions=orphaned, dangling_supporting_claims=0, disconnected_claims=0,
                       claimless=1, uncited_rationale=int(not cited & memo_ids))
