"""Protocol registry: a protocol turns a RunContext into a final allocation. One module, one entry.

Each module provides ``run(ctx) -> Outcome``, ``plan(cfg, desks) -> Plan`` (the calls a run makes, as data:
``madbench.debate.protocols.plan``) and ``Options`` (a pydantic model of its knobs, given in a debate config's
``options``; unknown knobs are rejected).
"""

from __future__ import annotations

from pydantic import BaseModel, ValidationError

from madbench.data.errors import InputError, format_validation_error
from madbench.debate.protocols import adversarial, desks, paper, self_consistency, tradingagents
from madbench.debate.protocols.plan import Plan

_MODULES = {"paper": paper, "adversarial": adversarial, "desks": desks, "tradingagents": tradingagents,
            "self_consistency": self_consistency}
PROTOCOLS = {name: m.run for name, m in _MODULES.items()}


def protocol_plan(cfg, desks: tuple[str, ...] = ()) -> Plan:
    """The calls one run of ``cfg`` makes; ``desks``: the memo slices that hold evidence (a desk without any answers
    without a call)."""
    return _MODULES[cfg.protocol].plan(cfg, desks)


def protocol_options(cfg, where: str = "config") -> BaseModel:
    try:
        return _MODULES[cfg.protocol].Options.model_validate(cfg.options)
    except ValidationError as exc:
        raise InputError(where, "options: " + format_validation_error(exc), f"see the {cfg.protocol} protocol's options") from None
