"""A10 CRIT-causal: an agent whose causal-alignment pillar (P4) falls below a threshold is nudged,
revises again, and is re-scored."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_NUDGE = ("Your causal claims outrun their evidence. For each claim, either name the mechanism and what would "
                 "have to hold for it, or relabel it as observational or pattern. Do not claim causes from price statistics.")


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")
    p4_threshold: float = Field(0.8, ge=0, le=1)
    nudge: str = DEFAULT_NUDGE
    max_retries: int = Field(1, ge=1)


def targets(p4_by_agent: dict[str, float], p: Params) -> list[str]:
    return sorted(a for a, p4 in p4_by_agent.items() if p4 < p.p4_threshold)
