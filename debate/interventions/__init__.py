"""Interventions registry: one module per intervention, one entry here.

Each intervention declares a pydantic ``Params`` model (unknown keys rejected)
and pure trigger functions; the protocol calls them at its hook points.
"""

from __future__ import annotations

from pydantic import BaseModel, ValidationError

from debate.interventions import crit_causal, js_collapse, rca
from madbench_data.errors import InputError, format_validation_error

INTERVENTIONS = {
    "js_collapse": js_collapse,
    "crit_causal": crit_causal,
    "rca": rca,
}


def parse_intervention(cfg, where: str) -> BaseModel:
    module = INTERVENTIONS[cfg.name]
    try:
        return module.Params.model_validate(cfg.model_dump(exclude={"name"}))
    except ValidationError as exc:
        raise InputError(where, format_validation_error(exc), f"see debate/interventions/{cfg.name}.py for its parameters") from None
