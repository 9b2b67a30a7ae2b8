"""What every debate turn must return (PAPER_NOTES §2), as pydantic models.

Their JSON schemas are sent to the provider for constrained decoding; the
domain rules that a schema cannot express (universe membership, weight sum,
evidence IDs that exist in this memo) live in ``debate.validation``.
Allocations are lists of {ticker, weight} rather than maps: grammar-constrained
decoders handle enum-valued fields far better than free-form keys.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

ReasoningType = Literal["causal", "observational", "risk_assessment", "pattern"]
ClaimType = Literal["thesis", "risk", "catalyst", "valuation", "macro", "technical", "sentiment", "contrarian"]
Disposition = Literal["accept", "partially_accept", "rebut"]

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
    evidence_ids: list[str] = Field(description="memo IDs without brackets, e.g. AAPL-RET60")
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
    target_claim: str = Field(pattern=r"^C[0-9]+$")
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
    item: CritiqueItem


class CritiqueResponse(BaseModel):
    model_config = _strict
    from_agent: str
    target_claim: str = Field(pattern=r"^C[0-9]+$")
    disposition: Disposition
    justification: str = Field(min_length=1)


class Revision(Proposal):
    """A revised allocation that answers every critique received (revise phase)."""

    critique_responses: list[CritiqueResponse]
    revision_notes: str


class JudgeDecision(BaseModel):
    """The judge's synthesis of the final revisions (aggregation)."""

    model_config = _strict
    allocation: list[Holding]
    cash_weight: float = Field(0.0, ge=0.0, le=1.0)
    rationale: str = Field(min_length=1)
    consensus_points: list[str] = Field(default_factory=list)
    dissent_points: list[str] = Field(default_factory=list)
    evidence_ids: list[str] = Field(default_factory=list)


PHASE_SCHEMAS: dict[str, type[BaseModel]] = {
    "propose": Proposal,
    "critique": Critique,
    "revise": Revision,
    "judge": JudgeDecision,
}


def weights_of(holdings: list[Holding]) -> dict[str, float]:
    out: dict[str, float] = {}
    for h in holdings:
        out[h.ticker] = out.get(h.ticker, 0.0) + h.weight
    return out
