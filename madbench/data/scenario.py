"""Scenarios: an invest quarter, a ticker universe and allocation constraints.

Scenario files are YAML with a top-level ``scenarios:`` list. The paper's own
file (``fully_invested`` / ``max_tickers``) loads as-is; its keys are aliases
of ours (``allow_cash`` is ``not fully_invested``; ``max_tickers`` caps the
number of holdings).
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from madbench.data.atomic import atomic_write_text
from madbench.data.errors import InputError, format_validation_error
from madbench.data.market.calendar import Quarter
from madbench.data.market.pack import Pack
from madbench.data.names import Name
from madbench.data.templates import read_yaml

WEIGHT_TOL = 1e-6


class Constraints(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    max_weight: float = Field(1.0, gt=0, le=1, description="largest weight of any one ticker")
    min_holdings: int = Field(1, ge=1, description="fewest tickers with weight > 0")
    allow_cash: bool = Field(False, description="a cash slot may stay uninvested")
    fully_invested: bool | None = Field(None, description="the paper's spelling of `not allow_cash`")
    max_tickers: int | None = Field(None, ge=1, description="most tickers with weight > 0")

    @model_validator(mode="after")
    def _align_cash_flags(self) -> Constraints:
        if self.fully_invested is not None:
            if "allow_cash" in self.model_fields_set and self.allow_cash == self.fully_invested:
                raise ValueError("allow_cash and fully_invested contradict each other; give only one")
            self.allow_cash = not self.fully_invested
        self.fully_invested = not self.allow_cash
        return self

    def problems(self, n_tickers: int) -> list[str]:
        """Reasons these constraints cannot be met on ``n_tickers`` tickers."""
        out = []
        cap = min(n_tickers, self.max_tickers or n_tickers)
        if self.min_holdings > n_tickers:
            out.append(f"min_holdings={self.min_holdings} exceeds the {n_tickers} tickers")
        if self.max_tickers is not None and self.min_holdings > self.max_tickers:
            out.append(f"min_holdings={self.min_holdings} exceeds max_tickers={self.max_tickers}")
        if not self.allow_cash and self.max_weight * cap < 1 - WEIGHT_TOL:
            out.append(
                f"fully invested needs max_weight x holdings >= 1, but {self.max_weight} x {cap} = {self.max_weight * cap:.3g}"
            )
        return out


class Scenario(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: Name
    invest_quarter: str
    tickers: list[str] = Field(min_length=1)
    sectors: dict[str, str] | None = None
    constraints: Constraints = Field(default_factory=Constraints)
    description: str | None = None

    @field_validator("invest_quarter")
    @classmethod
    def _quarter(cls, v: str) -> str:
        try:
            return str(Quarter.parse(v))
        except InputError as exc:
            raise ValueError(exc.problem + " (write YYYYQn)") from None

    @field_validator("tickers")
    @classmethod
    def _unique(cls, v: list[str]) -> list[str]:
        seen, dups = set(), []
        for t in v:
            if t in seen:
                dups.append(t)
            seen.add(t)
        if dups:
            raise ValueError(f"duplicate tickers {sorted(set(dups))}")
        return v

    @model_validator(mode="after")
    def _feasible(self) -> Scenario:
        problems = self.constraints.problems(len(self.tickers))
        if problems:
            raise ValueError("infeasible constraints: " + "; ".join(problems))
        return self

    @property
    def quarter(self) -> Quarter:
        return Quarter.parse(self.invest_quarter)


class ScenarioFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    scenarios: list[Scenario] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_ids(self) -> ScenarioFile:
        ids = [s.id for s in self.scenarios]
        dups = sorted({i for i in ids if ids.count(i) > 1})
        if dups:
            raise ValueError(f"duplicate scenario ids {dups}")
        return self


def load_scenarios(path: str | Path) -> list[Scenario]:
    path = Path(path)
    data = read_yaml(path)
    if not isinstance(data, dict) or "scenarios" not in data:
        raise InputError(path, "expected a mapping with a top-level `scenarios:` list", "see configs/scenarios/ for the format")
    try:
        return ScenarioFile.model_validate(data).scenarios
    except ValidationError as exc:
        raise InputError(path, format_validation_error(exc), "correct the named field") from None


def find_scenario(scenarios: list[Scenario], scenario_id: str, path: str | Path) -> tuple[int, Scenario]:
    for i, s in enumerate(scenarios):
        if s.id == scenario_id:
            return i, s
    sample = ", ".join(s.id for s in scenarios[:5])
    raise InputError(path, f"no scenario with id {scenario_id!r}", f"use one of the file's ids, e.g. {sample}")


def check_against_pack(scenario: Scenario, pack: Pack, where: str) -> None:
    """The pack has every ticker and covers the quarter; raise naming what is not."""
    missing = pack.missing_tickers(scenario.tickers)
    if missing:
        raise InputError(
            f"{where}.tickers",
            f"tickers not in the pack {pack.root}: {', '.join(missing)}",
            "drop them from the scenario or use a pack that has them (madbench data fetch)",
        )
    pack.calendar.as_of(scenario.quarter, where=f"{where}.invest_quarter")


def dump_scenarios(scenarios: list[Scenario], path: str | Path, header: str = "") -> Path:
    body = {"scenarios": [s.model_dump(exclude_none=True, exclude={"constraints": {"fully_invested"}}) for s in scenarios]}
    text = (header if header.endswith("\n") or not header else header + "\n") + yaml.safe_dump(body, sort_keys=False)
    return atomic_write_text(path, text)
