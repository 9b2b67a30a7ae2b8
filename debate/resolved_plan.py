"""What one run of a config actually runs, as flat facts: every phase the protocol's call plan reaches with its model,
temperature, answer budget, answering roles and calls, plus every other setting of the config.

A paired comparison (``madbench.runner.pairs``) compares these facts, not the config files: two configs can differ
in a field no call reads (a routing tier no phase uses), and two can look alike field by field yet run their judge
on different models (a routing profile). Models are compared as configured (``ModelRouting.configured``), so a
rule-based routing (``rules/auto``) is one model however it answers per role.
"""

from __future__ import annotations

from typing import Any

from madbench.debate.config import DebateConfig
from madbench.debate.protocols import protocol_of, protocol_plan
from madbench.debate.protocols.plan import plan_calls
from madbench.gateway.phases import ALLOCATING_PHASES, SCORING_PHASES

#: Config fields the phase facts already state as they run (models per phase, temperatures, budgets) or that name
#: rather than configure (name, description): left out of the ``setting …`` facts.
RUN_AS_PHASES = ("name", "description", "models", "temperature", "crit_temperature", "max_tokens")


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted paths to leaves (list items by index); an empty list or dict is a leaf of its own."""
    if isinstance(value, dict) and value:
        return {k: v for key, item in value.items() for k, v in flatten(item, f"{prefix}{key}.").items()}
    if isinstance(value, list) and value:
        return {k: v for i, item in enumerate(value) for k, v in flatten(item, f"{prefix}{i}.").items()}
    return {prefix.rstrip("."): value}


def phase_temperature(cfg: DebateConfig, phase: str) -> float:
    """The scorer's temperature for CRIT and RCA's consistency judge; every other phase runs at ``temperature``."""
    return cfg.crit_temperature if phase in SCORING_PHASES else cfg.temperature


def resolved_plan(cfg: DebateConfig, desks: tuple[str, ...] = ()) -> dict[str, Any]:
    """The facts of one run of ``cfg``: ``phase P model|temperature|max_tokens|roles|calls|fires on`` for each phase
    ``P`` the plan reaches, ``roles`` (the answering agents' roles, in order), ``protocol``, ``rounds``,
    ``aggregation``, and ``setting X`` for every other config field ``X`` (dotted, as in the file)."""
    plan = protocol_plan(cfg, desks)
    phases: dict[str, dict[str, Any]] = {}
    for call, n, when in plan_calls(plan):
        p = phases.setdefault(call.phase, {"models": set(), "roles": set(), "calls": 0, "fires on": set()})
        p["models"].add(cfg.models.configured(call.role, call.phase).model)
        p["roles"].add(call.role)
        p["calls"] += n
        if when:
            p["fires on"].add(when)
    facts: dict[str, Any] = {"protocol": cfg.protocol, "rounds": plan.rounds, "aggregation": aggregation(cfg),
                             "roles": ", ".join(a.role for a in cfg.agents) or "(the protocol's own)"}
    for name, p in sorted(phases.items()):
        facts[f"phase {name} model"] = ", ".join(sorted(p["models"]))
        facts[f"phase {name} temperature"] = phase_temperature(cfg, name)
        facts[f"phase {name} max_tokens"] = getattr(cfg.max_tokens, name, None)
        facts[f"phase {name} roles"] = ", ".join(sorted(p["roles"]))
        facts[f"phase {name} calls"] = p["calls"]
        facts[f"phase {name} fires on"] = ", ".join(sorted(p["fires on"]))
    settings = cfg.model_dump(mode="json", exclude=set(RUN_AS_PHASES))
    facts |= {f"setting {k}": v for k, v in flatten(settings).items()}
    return facts


def aggregation(cfg: DebateConfig) -> str:
    """How the run's allocations become one, as its protocol says: the config's aggregation, or e.g. a sampling
    protocol's ``combine``."""
    return protocol_of(cfg).aggregation(cfg)


def allocating_models(cfg: DebateConfig, desks: tuple[str, ...] = ()) -> dict[str, str]:
    """Phase → the models (as configured) of the calls that write a portfolio: propose, revise and judge in the
    paper's protocols; every call of a staged protocol (each stage can move the book)."""
    plan = protocol_plan(cfg, desks)
    out: dict[str, set[str]] = {}
    for call, _, _ in plan_calls(plan):
        if plan.prompts == "stages" or call.kind in ALLOCATING_PHASES:
            out.setdefault(call.phase, set()).add(cfg.models.configured(call.role, call.phase).model)
    return {p: ", ".join(sorted(m)) for p, m in sorted(out.items())}
