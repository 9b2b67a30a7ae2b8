"""Which protocol a config names: a shipped one by its name, the researcher's own by import path
(``protocol: jury:Jury``, looked for beside the config file), or an installed package's by its entry point in the
``madbench.protocols`` group. Shipped protocols are import paths too, so every protocol is found the same way.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from pydantic import BaseModel, ValidationError

from madbench.data.errors import InputError, format_validation_error
from madbench.data.plugins import resolve
from madbench.debate.config import DebateConfig
from madbench.debate.protocols.plan import Plan
from madbench.debate.protocols.protocol import Protocol

ENTRY_POINTS = "madbench.protocols"
#: The shipped protocols, by the name a config gives.
BUILTIN: dict[str, str] = {
    "paper": "madbench.debate.protocols.paper:Paper",
    "adversarial": "madbench.debate.protocols.adversarial:Adversarial",
    "desks": "madbench.debate.protocols.desks:Desks",
    "tradingagents": "madbench.debate.protocols.tradingagents:TradingAgents",
    "self_consistency": "madbench.debate.protocols.self_consistency:SelfConsistency",
}


def load_protocol(name: str, where: str = "config", search: Path | None = None) -> Protocol:
    """The protocol ``name`` names (``search``: the folder of the file naming it, where an import path's module may
    live). An ``InputError`` naming ``where`` and ``protocol`` when there is none."""
    obj = resolve(name, BUILTIN, ENTRY_POINTS, where, "protocol", search)
    if not (isinstance(obj, type) and issubclass(obj, Protocol)):
        raise InputError(where, f"protocol: {name!r} is {obj!r}, not a Protocol subclass",
                         "name a class that subclasses madbench.debate.protocols.protocol.Protocol")
    return obj()


@cache
def protocol_named(name: str) -> Protocol:
    """The protocol ``name`` names, looked up once per process (a run asks for it at every stage)."""
    return load_protocol(name, f"protocol {name}")


def protocol_of(cfg: DebateConfig) -> Protocol:
    """The protocol of a config already read (its name resolved when it was: ``config_file.check_names``); looked up
    once per name in a process (the estimator asks for every scenario)."""
    return protocol_named(cfg.protocol)


def protocol_plan(cfg: DebateConfig, desks: tuple[str, ...] = ()) -> Plan:
    """The calls one run of ``cfg`` makes; ``desks``: the memo slices that hold evidence (a desk without any answers
    without a call)."""
    return protocol_of(cfg).plan(cfg, desks)


def protocol_options(cfg: DebateConfig, where: str = "config") -> BaseModel:
    protocol = protocol_of(cfg)
    try:
        return protocol.options(cfg)
    except ValidationError as exc:
        raise InputError(where, "options: " + format_validation_error(exc), f"see the {cfg.protocol} protocol's options") from None
