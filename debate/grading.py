"""The grades a debate receives from its scorer, and the ``Scorer`` protocol the scoring package implements.

A CRIT grade scores one agent turn on four pillars (PAPER_NOTES §3); ρ_i is their mean after caps. The debate
reads ρ (the PID controller) and the causal-alignment pillar (the CRIT-causal intervention); an RCA verdict tells
whether a revision follows from what the agent was told (the consistency retries). These models are defined here,
below the scoring package, so that the debate, its traces and every reader share one definition while the
debate never imports ``scoring``: the runner hands each run a scorer.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

PILLARS = ("logical_validity", "evidential_support", "alternative_consideration", "causal_alignment")


class CritDiagnostics(BaseModel):
    model_config = ConfigDict(extra="forbid")
    contradictions: int = Field(ge=0)
    unsupported_claims: int = Field(ge=0)
    ignored_critiques: int = Field(ge=0)
    causal_overreach: int = Field(ge=0)
    orphaned_positions: int = Field(ge=0)
    premature_certainty: bool
    conclusion_drift: bool


class PillarScores(BaseModel):
    model_config = ConfigDict(extra="forbid")
    logical_validity: float = Field(ge=0, le=1)
    evidential_support: float = Field(ge=0, le=1)
    alternative_consideration: float = Field(ge=0, le=1)
    causal_alignment: float = Field(ge=0, le=1)


class PillarExplanations(BaseModel):
    model_config = ConfigDict(extra="forbid")
    logical_validity: str
    evidential_support: str
    alternative_consideration: str
    causal_alignment: str


class CritScore(BaseModel):
    """A scored agent turn after caps: what the trace and tables store."""

    agent_id: str
    role: str
    round: int
    scorer: str
    is_llm: bool
    scores: PillarScores
    raw_scores: PillarScores
    clips: list[str]
    diagnostics: CritDiagnostics
    rho: float
    rubric: str = "uniform"
    explanations: PillarExplanations | None = None  # the scorer's reasons; None only in traces written before they were kept


class RCAVerdict(BaseModel):
    model_config = ConfigDict(extra="forbid")
    verdict: Literal["consistent", "inconsistent", "sycophantic", "stubborn"]
    reason: str = Field(min_length=1)
    feedback: str

    @property
    def ok(self) -> bool:
        return self.verdict == "consistent"


class Scorer(Protocol):
    async def crit(self, ctx: Any, agent: Any, round_: int, argument: Any,
                   received: list[tuple[str, Any]], label: str = "crit", before: Any = None) -> CritScore:
        """Grade ``argument`` (with the critiques it received and ``before``, what it revised, when it is a
        revision) and write the grade to the run's trace."""

    async def rca(self, ctx: Any, agent: Any, phase: str, round_: int, before: Any, after: Any,
                  received: list[tuple[str, Any]]) -> RCAVerdict:
        """Check that ``after`` follows from ``before`` and the critiques, and write the verdict to the trace."""
