"""Protocol registry: a protocol turns a RunContext into a final allocation. One module, one entry.

Each module provides ``run(ctx) -> Outcome`` and ``Options`` (a pydantic model of its knobs, given in a
debate config's ``options``; unknown knobs are rejected).
"""

from __future__ import annotations

from pydantic import BaseModel, ValidationError

from madbench.data.errors import InputError, format_validation_error
from madbench.debate.protocols import adversarial, desks, paper, self_consistency, tradingagents

_MODULES = {"paper": paper, "adversarial": adversarial, "desks": desks, "tradingagents": tradingagents,
            "self_consistency": self_consistency}
PROTOCOLS = {name: m.run for name, m in _MODULES.items()}


def protocol_options(cfg, where: str = "config") -> BaseModel:
    try:
        return _MODULES[cfg.protocol].Options.model_validate(cfg.options)
    except ValidationError as exc:
        raise InputError(where, "options: " + format_validation_error(exc), f"see the {cfg.protocol} protocol's options") from None
