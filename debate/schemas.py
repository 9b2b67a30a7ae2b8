"""What every debate turn must return (PAPER_NOTES §2), as pydantic models, per prompt tier.

The causal and enriched tiers argue in structured claims (paper §3.1.1: numbered claims with evidence,
positions that cite claims, critiques that target claims, point-by-point responses). The basic tier returns
what the paper's basic prompt asks for (App. B.16): an allocation, a free-text justification citing memo IDs
in brackets, what would change its mind, and a confidence; no claims. ``schema_for(phase, tier)`` picks the
model. A critique of an agent without claims targets its allocation as a whole (``ALLOCATION_TARGET``), as the
paper's CRIT prompt allows (App. B.15: "Critiques may target specific claims or the portfolio allocation").

Their JSON schemas are sent to the provider for constrained decoding; the
domain rules that a schema cannot express (universe membership, weight sum,
evidence IDs that exist in this memo) live in ``madbench.debate.validation``.
Allocations are lists of {ticker, weight} rather than maps: grammar-constrained
decoders handle enum-valued fields far better than free-form keys.
"""

from __future__ import annotations

import copy
import functools
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

ReasoningType = Literal["causal", "observational", "risk_assessment", "pattern"]
ClaimType = Literal["thesis", "risk", "catalyst", "valuation", "macro", "technical", "sentiment", "contrarian"]
Disposition = Literal["accept", "partially_accept", "rebut"]
Tier = Literal["basic", "causal", "enriched"]

#: The critique target that names an agent's allocation (and its rationale) as a whole, not one of its claims.
ALLOCATION_TARGET = "allocation"
#: A critique's target: a claim id (C1, C2, …) or the whole allocation.
TARGET_PATTERN = rf"^(C[0-9]+|{ALLOCATION_TARGET})$"

_strict = ConfigDict(extra="forbid")


class Holding(BaseModel):
    model_config = _strict
    ticker: str
    #: No upper bound here: the sum and max_weight checks (and the declared normalize policy) own that.
    weight: float = Field(ge=0.0)


class Claim(BaseModel):
    model_config = _strict
    claim_id: str = Field(pattern=r"^C[0-9]+$", description="C1, C2, … unique within the answer")
    claim_text: str = Field(min_length=1)
    claim_type: ClaimType
    reasoning_type: ReasoningType
    evidence_ids: list[str] = Field(description="memo IDs without brackets, e.g. <TICKER>-RET60")
    assumptions: list[str] = Field(default_factory=list)
    falsifiers: list[str] = Field(default_factory=list)
    impacts_positions: list[str] = Field(description="tickers this claim moves")
    confidence: float = Field(ge=0.0, le=1.0)


class PositionRationale(BaseModel):
    model_config = _strict
    ticker: str
    supporting_claims: list[str] = Field(description="claim_ids that justify this weight")


class Proposal(BaseModel):
    """An agent's allocation with its structured argument (propose phase)."""

    model_config = _strict
    thesis: str = Field(min_length=1)
    allocation: list[Holding]
    cash_weight: float = Field(0.0, ge=0.0, le=1.0)
    claims: list[Claim] = Field(min_length=1)
    position_rationale: list[PositionRationale]
    risks_or_falsifiers: list[str] = Field(default_factory=list)


class CritiqueItem(BaseModel):
    model_config = _strict
    target_agent: str
    target_claim: str = Field(pattern=TARGET_PATTERN, description=f"one of its claim ids, or {ALLOCATION_TARGET!r} "
                                                                   "when it lists no claims")
    critique_text: str = Field(min_length=1)
    evidence_ids: list[str]
    portfolio_implication: str
    suggested_adjustment: str
    falsifier: str
    objection_confidence: float = Field(ge=0.0, le=1.0)


class Critique(BaseModel):
    """One agent's critiques of the other agents' claims (critique phase)."""

    model_config = _strict
    from_role: str
    critiques: list[CritiqueItem] = Field(min_length=1)


class ReceivedCritique(BaseModel):
    """A critique as its target receives it: who sent it, and what it says."""

    model_config = _strict
    from_agent: str
    item: CritiqueItem | BasicCritiqueItem


class CritiqueResponse(BaseModel):
    model_config = _strict
    from_agent: str
    #: A claim id: only agents with claims answer claim by claim (a claim-less basic agent answers in its notes).
    target_claim: str = Field(pattern=r"^C[0-9]+$")
    disposition: Disposition
    justification: str = Field(min_length=1)


class Revision(Proposal):
    """A revised allocation that answers every critique received (revise phase)."""

    critique_responses: list[CritiqueResponse]
    revision_notes: str


# -- the basic tier (paper App. B.16): an allocation with a free-text justification, no claims -----------------

class BasicProposal(BaseModel):
    """A basic-tier agent's allocation with its free-text rationale (propose phase). No structured claims."""

    model_config = _strict
    thesis: str = Field(min_length=1, description="a short justification of the allocation that cites memo IDs in "
                                                  "brackets, e.g. [<TICKER>-RET60]")
    allocation: list[Holding]
    cash_weight: float = Field(0.0, ge=0.0, le=1.0)
    risks_or_falsifiers: list[str] = Field(min_length=1, description="what would change your mind")
    confidence: float = Field(ge=0.0, le=1.0)

    @property
    def claims(self) -> list[Claim]:
        """Always empty: a basic-tier argument makes no structured claims (a critique targets its allocation)."""
        return []


class BasicCritiqueItem(BaseModel):
    """A basic-tier critique: free text (evidence cited in brackets inside it) and a suggested change."""

    model_config = _strict
    target_agent: str
    target_claim: str = Field(pattern=TARGET_PATTERN, description=f"one of its claim ids, or {ALLOCATION_TARGET!r} "
                                                                   "when it lists no claims")
    critique_text: str = Field(min_length=1)
    suggested_adjustment: str
    objection_confidence: float = Field(ge=0.0, le=1.0)


class BasicCritique(BaseModel):
    """A basic-tier agent's critiques of the other agents (critique phase)."""

    model_config = _strict
    from_role: str
    critiques: list[BasicCritiqueItem] = Field(min_length=1)


class BasicRevision(BasicProposal):
    """A basic-tier revision: the revised allocation and rationale, and in ``revision_notes`` how each critique
    received was handled (naming the agent that sent it). No claim-by-claim responses."""

    revision_notes: str = Field(min_length=1, description="for each critique received: its sender, whether you "
                                                          "accept or rebut it, and why")


class JudgeDecision(BaseModel):
    """The judge's synthesis of the final revisions (aggregation)."""

    model_config = _strict
    allocation: list[Holding]
    cash_weight: float = Field(0.0, ge=0.0, le=1.0)
    rationale: str = Field(min_length=1)
    consensus_points: list[str] = Field(default_factory=list)
    dissent_points: list[str] = Field(default_factory=list)
    evidence_ids: list[str] = Field(default_factory=list)


#: The claim-structured phases of the causal and enriched tiers.
PHASE_SCHEMAS: dict[str, type[BaseModel]] = {
    "propose": Proposal,
    "critique": Critique,
    "revise": Revision,
    "judge": JudgeDecision,
}
#: What each tier returns per phase. The judge's decision does not depend on its tier.
TIER_SCHEMAS: dict[str, dict[str, type[BaseModel]]] = {
    "basic": {"propose": BasicProposal, "critique": BasicCritique, "revise": BasicRevision, "judge": JudgeDecision},
    "causal": PHASE_SCHEMAS,
    "enriched": PHASE_SCHEMAS,
}

#: Any agent's proposal or revision, whatever its tier (the most specific first).
Argument = Revision | Proposal | BasicRevision | BasicProposal
CritiqueItemAny = CritiqueItem | BasicCritiqueItem


def schema_for(phase: str, tier: str = "causal") -> type[BaseModel]:
    """The output model of ``phase`` for an agent of ``tier``."""
    if tier not in TIER_SCHEMAS:
        raise KeyError(f"unknown tier {tier!r}; known: {', '.join(TIER_SCHEMAS)}")
    return TIER_SCHEMAS[tier][phase]


def json_schema(model: type[BaseModel]) -> dict[str, Any]:
    """``model``'s JSON schema, a fresh copy the caller may edit: pydantic builds it anew on every call (tens of
    milliseconds), and every request of a run sends one."""
    return copy.deepcopy(_json_schema(model))


@functools.cache
def _json_schema(model: type[BaseModel]) -> dict[str, Any]:
    return model.model_json_schema()


def critique_targets(claim_ids: set[str] | list[str]) -> list[str]:
    """What a critique of an agent may target: its claim ids in order, or its allocation when it has no claims."""
    return sorted(claim_ids, key=claim_order) or [ALLOCATION_TARGET]


def claim_order(claim_id: str) -> tuple[int, str]:
    digits = claim_id[1:]
    return (int(digits) if digits.isdigit() else 0, claim_id)


def weights_of(holdings: list[Holding]) -> dict[str, float]:
    out: dict[str, float] = {}
    for h in holdings:
        out[h.ticker] = out.get(h.ticker, 0.0) + h.weight
    return out
