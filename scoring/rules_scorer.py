"""The rule-based CRIT scorer (``rules/crit``, non-LLM): pillar scores from the deterministic audit.

Each pillar starts at 0.90 (the scorer cannot see argument quality beyond
mechanics) and takes the cap its mechanical failure count implies. Causal
overreach is approximated mechanically: a claim typed ``causal`` whose
evidence is only price-derived statistics.

A claim-less (basic-tier) argument is graded on its free text (``madbench.scoring.audit``): that it makes no claims
is one unsupported-claim failure (P2: none of its evidence supports a claim that can be checked, the pillar
the paper's structured prompts raised most, App. B.14), a text citing no memo ID a second; a holding above
10% its justification never names is orphaned (P1); a critique its notes do not answer by name is ignored
(P3). With no typed claims, causal overreach cannot be detected mechanically (P4 keeps its base score).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from madbench.data.memo import PRICE_FEATURE_KEYS, EvidenceItem
from madbench.debate.grading import CritDiagnostics, PillarExplanations, PillarScores
from madbench.debate.schemas import Argument, BasicProposal, ReceivedCritique
from madbench.scoring.audit import INLINE_ID, audit_turn, free_text
from madbench.scoring.crit import CritAnswer, cap_for, pillar_counts

BASE = 0.90


class CitedEvidence(BaseModel):
    """A memo item the graded argument cites, with the value the CRIT judge checks its claims against."""

    model_config = ConfigDict(extra="forbid")
    id: str
    label: str
    value: float | str | None
    unit: str
    as_of: str | None = None


class CritTask(BaseModel):
    """What the scorer grades: one agent's revision in one round, with what it had to answer.

    The paper's CRIT judge sees the original proposal, the critiques and the revised argument, with the full
    text of the evidence cited (paper App. B.15); ``before`` and ``evidence`` carry the first and the last.
    Both are optional so that crit tasks stored by earlier traces still validate and re-score.
    """

    model_config = ConfigDict(extra="forbid")
    agent_id: str
    role: str
    round: int
    memo_ids: list[str]
    argument: Argument
    critiques: list[ReceivedCritique] = Field(default_factory=list)
    #: What the graded revision revised: the agent's proposal in round 1, its previous revision after. None when
    #: a proposal is graded on its own, and in traces written before it was kept.
    before: Argument | None = None
    #: The memo items the argument cites, with their values (empty in traces written before they were kept).
    evidence: list[CitedEvidence] = Field(default_factory=list)

    #: The fields a trace's ``crit`` event stores as its ``task`` (the rest come from the event and the memo event).
    STORED: ClassVar[frozenset[str]] = frozenset({"argument", "critiques", "before", "evidence"})

    def stored(self) -> dict[str, Any]:
        """The part of the task a ``crit`` event stores, so ``madbench rescore`` can grade it again."""
        return self.model_dump(mode="json", include=set(self.STORED))

    @classmethod
    def from_stored(cls, agent_id: str, role: str, round_: int, memo_ids: list[str], stored: dict[str, Any]) -> CritTask:
        """The task a ``crit`` event stored (any trace version: older ones lack ``before`` and ``evidence``)."""
        return cls(agent_id=agent_id, role=role, round=round_, memo_ids=memo_ids, **stored)


def cited_ids(argument: Argument) -> list[str]:
    """The evidence IDs an argument cites, first citation first: each claim's ``evidence_ids`` (brackets dropped),
    then any bracketed ID in its text; in a claim-less argument, the bracketed IDs in its free text."""
    if isinstance(argument, BasicProposal):
        return list(dict.fromkeys(INLINE_ID.findall(" ".join(free_text(argument)))))
    ids: dict[str, None] = {}
    for c in argument.claims:
        for i in [*(e.strip("[]") for e in c.evidence_ids), *INLINE_ID.findall(c.claim_text)]:
            ids.setdefault(i, None)
    return list(ids)


def cited_evidence(argument: Argument, items: Iterable[EvidenceItem]) -> list[CitedEvidence]:
    """The memo items ``argument`` cites, with their values (cited IDs that are not in the memo have none)."""
    by_id = {it.id: it for it in items}
    return [CitedEvidence(id=i, label=by_id[i].label, value=by_id[i].value, unit=by_id[i].unit, as_of=by_id[i].as_of)
            for i in cited_ids(argument) if i in by_id]


def overreach(task: CritTask) -> int:
    def price_only(ids):
        fields = [i.strip("[]").split("-", 1)[1] if "-" in i else i for i in ids]
        return bool(fields) and all(f in PRICE_FEATURE_KEYS for f in fields)
    return sum(1 for c in task.argument.claims if c.reasoning_type == "causal" and price_only(c.evidence_ids))


def score(task: CritTask) -> CritAnswer:
    a = audit_turn(task.argument, set(task.memo_ids), [(r.from_agent, r.item) for r in task.critiques])
    d = CritDiagnostics(
        contradictions=a.dangling_supporting_claims + a.disconnected_claims,
        unsupported_claims=a.claims_without_valid_evidence + a.unknown_evidence_ids + a.claimless + a.uncited_rationale,
        ignored_critiques=a.unanswered_critiques, causal_overreach=overreach(task),
        orphaned_positions=a.orphaned_positions, premature_certainty=False, conclusion_drift=False)
    counts = pillar_counts(d)
    scores = PillarScores(**{p: min(BASE, cap_for(n)) for p, n in counts.items()})
    why = {p: f"rule-based (non-LLM): {n} mechanical failure(s)" for p, n in counts.items()}
    if a.claimless:
        why["evidential_support"] += " (the argument makes no structured claims: its evidence supports none)"
        why["causal_alignment"] += " (no typed claims: causal overreach is not detectable mechanically)"
    return CritAnswer(diagnostics=d, scores=scores, explanations=PillarExplanations(**why))
