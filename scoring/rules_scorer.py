"""The rule-based CRIT scorer (``rules/crit``, non-LLM): pillar scores from the deterministic audit.

Each pillar starts at 0.90 (the scorer cannot see argument quality beyond
mechanics) and takes the cap its mechanical failure count implies. Causal
overreach is approximated mechanically: a claim typed ``causal`` whose
evidence is only price-derived statistics.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from debate.grading import CritDiagnostics, PillarExplanations, PillarScores
from debate.schemas import Proposal, ReceivedCritique, Revision
from madbench_data.memo import PRICE_FEATURE_KEYS, EvidenceItem
from scoring.audit import audit_turn
from scoring.crit import CritAnswer, cap_for, pillar_counts

BASE = 0.90
#: An evidence ID written in brackets inside a claim's text, e.g. [AAPL-RET60] or [L1-10Y].
_INLINE_ID = re.compile(r"\[([A-Za-z0-9][A-Za-z0-9_.]*-[A-Za-z0-9_]+)\]")


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
    argument: Revision | Proposal
    critiques: list[ReceivedCritique] = Field(default_factory=list)
    #: What the graded revision revised: the agent's proposal in round 1, its previous revision after. None when
    #: a proposal is graded on its own, and in traces written before it was kept.
    before: Revision | Proposal | None = None
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


def cited_ids(argument: Proposal | Revision) -> list[str]:
    """The evidence IDs an argument cites, first citation first: each claim's ``evidence_ids`` (brackets dropped),
    then any bracketed ID in its text."""
    ids: dict[str, None] = {}
    for c in argument.claims:
        for i in [*(e.strip("[]") for e in c.evidence_ids), *_INLINE_ID.findall(c.claim_text)]:
            ids.setdefault(i, None)
    return list(ids)


def cited_evidence(argument: Proposal | Revision, items: Iterable[EvidenceItem]) -> list[CitedEvidence]:
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
        unsupported_claims=a.claims_without_valid_evidence + a.unknown_evidence_ids,
        ignored_critiques=a.unanswered_critiques, causal_overreach=overreach(task),
        orphaned_positions=a.orphaned_positions, premature_certainty=False, conclusion_drift=False)
    counts = pillar_counts(d)
    scores = PillarScores(**{p: min(BASE, cap_for(n)) for p, n in counts.items()})
    why = PillarExplanations(**{p: f"rule-based (non-LLM): {n} mechanical failure(s)" for p, n in counts.items()})
    return CritAnswer(diagnostics=d, scores=scores, explanations=why)
