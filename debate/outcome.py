"""What every protocol returns: the final allocation and the figures the run's result records."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Outcome:
    weights: dict[str, float]
    cash: float
    method: str
    rounds_run: int
    rho_bar: float | None
    rho_by_round: list[float] = field(default_factory=list)
    js: dict[str, float] = field(default_factory=dict)
    interventions: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: Protocol-specific results (debate map, ruling, conviction, risk scorecard): extra columns in runs.parquet.
    extras: dict = field(default_factory=dict)
