"""Answer schemas of the staged protocols (adversarial, desks, tradingagents)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from madbench.debate.schemas import Holding

Signal = Literal["strong_buy", "buy", "neutral", "sell", "strong_sell"]
Confidence = Literal["high", "medium", "low"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- shared

class TickerSignal(_Strict):
    ticker: str
    signal: Signal
    confidence: Confidence


class DeskReport(_Strict):
    """One analyst desk's reading of its own slice of the memo."""
    signals: list[TickerSignal]
    key_points: list[str] = Field(max_length=6)
    evidence_ids: list[str]
    summary: str


class Point(_Strict):
    text: str
    evidence_ids: list[str]


class Argument(_Strict):
    """A bull or bear researcher's turn."""
    points: list[Point] = Field(min_length=1, max_length=6)
    rebuttal: str
    favoured_tickers: list[str]


class Allocated(_Strict):
    allocation: list[Holding]
    cash_weight: float = Field(ge=0, le=1)


# -- adversarial committee

class Fact(_Strict):
    fact_id: str = Field(pattern=r"^F[0-9]+$")
    text: str
    evidence_ids: list[str] = Field(min_length=1)


class FactBase(_Strict):
    facts: list[Fact] = Field(min_length=1, max_length=12)
    open_questions: list[str] = Field(max_length=5)


class ThesisClaim(_Strict):
    claim_id: str = Field(pattern=r"^B[0-9]+$")
    text: str
    evidence_ids: list[str] = Field(min_length=1)
    strength: float = Field(ge=0, le=1)


class Thesis(Allocated):
    claims: list[ThesisClaim] = Field(min_length=1, max_length=6)
    summary: str


class Attack(_Strict):
    target_claim: str
    counterargument: str
    evidence_ids: list[str] = Field(min_length=1)
    would_change: list[str] = Field(max_length=5)


class Rebuttal(Allocated):
    response: str
    evidence_ids: list[str]
    concessions: list[str] = Field(max_length=5)


class RiskScore(_Strict):
    score: int = Field(ge=1, le=5)  # 1 low risk … 5 high risk
    note: str


class RiskScorecard(_Strict):
    valuation: RiskScore
    liquidity: RiskScore
    macro_exposure: RiskScore
    regulatory: RiskScore
    execution: RiskScore
    evidence_ids: list[str]


class CIOVerdict(Allocated):
    decision: Literal["approve", "reduce", "reject"]
    stop_loss_pct: float = Field(gt=0, le=50)
    confidence: float = Field(ge=0, le=1)
    rationale: str


# -- independent desks

class DebateMap(_Strict):
    agreements: list[str] = Field(max_length=6)
    disagreements: list[str] = Field(max_length=6)
    unresolved: list[str] = Field(max_length=6)


class InvalidationCondition(_Strict):
    condition: str
    metric_id: str
    threshold: float


class Ruling(_Strict):
    ruling: Literal["bull", "bear", "neither"]
    strongest_counterexample: str
    invalidation_conditions: list[InvalidationCondition] = Field(min_length=1, max_length=5)
    evidence_gaps: list[str] = Field(max_length=5)
    disputes: list[str] = Field(max_length=5)


class TickerView(_Strict):
    ticker: str
    signal: Signal
    conviction: float = Field(ge=-1, le=1)


class Synthesis(_Strict):
    views: list[TickerView]
    explanation: str
    departs_from_ruling: bool


# -- tradingagents

class TradePlan(Allocated):
    rationale: str
    evidence_ids: list[str]


class WeightCap(_Strict):
    ticker: str
    max_weight: float = Field(ge=0, le=1)


class RiskView(_Strict):
    stance: Literal["aggressive", "neutral", "conservative"]
    caps: list[WeightCap] = Field(max_length=10)
    comment: str


class PMDecision(Allocated):
    decision: Literal["approve", "reject"]
    rationale: str
