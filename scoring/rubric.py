"""Rubrics: pillar labels, definitions and weights, uniform or per role.

The four answer slots stay fixed (P1–P4); a rubric may redefine what a slot
grades for a role (its label and description go into the scorer's prompt) and
how much it weighs in ρ_i = Σ_k w_k P_k / Σ_k w_k. The uniform rubric (all
weights 1) gives the paper's ρ_i = mean of the four pillars.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from madbench.data.errors import InputError, format_validation_error
from madbench.data.paths import CONFIGS_DIR
from madbench.data.templates import read_yaml
from madbench.debate.grading import PILLARS, PillarScores

RUBRICS_DIR = CONFIGS_DIR / "rubrics"


class PillarDef(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    label: str
    description: str
    weight: float = Field(1.0, ge=0)


class PillarOverride(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    label: str | None = None
    description: str | None = None
    weight: float | None = Field(None, ge=0)


class Rubric(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    name: str
    pillars: dict[str, PillarDef]
    roles: dict[str, dict[str, PillarOverride]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _slots(self):
        if set(self.pillars) != set(PILLARS):
            raise ValueError(f"pillars must be exactly {', '.join(PILLARS)}")
        for role, table in self.roles.items():
            unknown = sorted(set(table) - set(PILLARS))
            if unknown:
                raise ValueError(f"roles.{role}: unknown pillar(s) {', '.join(unknown)}; use {', '.join(PILLARS)}")
        # ρ divides by the weights' sum (``rho``): all zero would be 0/0 in every scored run
        if not sum(d.weight for d in self.pillars.values()) > 0:
            raise ValueError("pillars: every weight is 0, so ρ (the weighted mean) is undefined; give at least one "
                             "pillar a positive weight")
        for role in self.roles:
            if not sum(d.weight for d in self.for_role(role).values()) > 0:
                raise ValueError(f"roles.{role}: every weight is 0 for this role, so its ρ is undefined; give at least "
                                 "one pillar a positive weight")
        return self

    def for_role(self, role: str) -> dict[str, PillarDef]:
        out = {}
        for p in PILLARS:
            base = self.pillars[p]
            o = self.roles.get(role, {}).get(p)
            out[p] = base if o is None else PillarDef(label=o.label or base.label, description=o.description or base.description,
                                                      weight=base.weight if o.weight is None else o.weight)
        return out

    def rho(self, role: str, scores: PillarScores) -> float:
        """ρ_i = Σ_k w_k·P_k / Σ_k w_k over this role's pillar weights."""
        defs = self.for_role(role)
        total = sum(d.weight for d in defs.values())
        return sum(defs[p].weight * getattr(scores, p) for p in PILLARS) / total

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.model_dump(), sort_keys=True).encode()).hexdigest()


def load_rubric(path_or_name: str | Path | None = None) -> Rubric:
    p = Path(path_or_name) if path_or_name and Path(path_or_name).suffix else RUBRICS_DIR / f"{path_or_name or 'uniform'}.yaml"
    if not p.is_file():
        known = ", ".join(sorted(x.stem for x in RUBRICS_DIR.glob("*.yaml")))
        raise InputError(p, "rubric not found", f"give a rubric file or one of: {known}")
    try:
        return Rubric.model_validate(read_yaml(p))
    except ValidationError as exc:
        raise InputError(p, format_validation_error(exc), "fix the listed fields") from None
