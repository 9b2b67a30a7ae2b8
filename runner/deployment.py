"""Where the models a command calls are reached, resolved one way for every command: a routing profile (``--routing
NAME``, configs/routing/) and deployment overrides per tier (``--set TIER.FIELD=VALUE``: api_base, api_key_env,
limits.<field>), as `madbench run` applies them to every config (``launch.with_routing``) and as the commands that
call one model apply them to it (``one_model``: `rescore`, `probe recall`, `leakage audit`, `llm ask`).

A one-model command's ``--model`` (``--scorer``) is a tier of ``--routing``'s profile (``--routing paper-openai
--model strong``) or the model of one (its tier's deployment then), or, without ``--routing``, a model string in a
tier of its own, ``model``. The shorthand flags (``--api-base``, ``--api-key-env``, ``--rpm``, ...) are ``--set``
settings of that tier, checked as ``--set``'s are; a field given both ways is refused."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import ValidationError

from madbench.data.errors import InputError, format_validation_error
from madbench.data.templates import parse_yaml
from madbench.gateway.models import ModelRouting, ModelSpec, as_spec
from madbench.gateway.routing_profiles import Deployment, load_routing_profile, with_deployment

#: The tier of a one-model command's model given as a model string without a routing profile.
OWN_TIER = "model"

#: Each shorthand flag → the deployment setting (``TIER.FIELD`` without the tier) it stands for.
SHORTHANDS = {"--api-base": "api_base", "--api-key-env": "api_key_env", "--rpm": "limits.rpm", "--tpm": "limits.tpm",
              "--max-concurrency": "limits.max_concurrency"}


def set_twice(items: list[str]) -> list[str]:
    """The ``TIER.FIELD`` keys of ``items`` given more than once, alone or within another (the last would win
    silently, and the run record would not say which one was meant)."""
    keys = [item.partition("=")[0].strip() for item in items]
    return sorted({k for k in keys if keys.count(k) > 1 or any(o.startswith(f"{k}.") for o in keys)})


def parse_settings(items: list[str]) -> dict[str, dict[str, Any]]:
    """``--set TIER.FIELD[.FIELD]=VALUE`` items as {tier: {field: value}}; each value read as YAML (200 is a number)."""
    twice = set_twice(items)
    if twice:
        raise InputError("--set", f"{', '.join(twice)} is set more than once (alone or within another setting)",
                         "give each TIER.FIELD once")
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        key, sep, value = item.partition("=")
        path = key.split(".")
        if not sep or len(path) < 2 or not all(path):
            raise InputError("--set", f"{item!r} is not TIER.FIELD=VALUE",
                             "write e.g. --set agents.limits.rpm=200 or --set strong.api_base=http://localhost:8000/v1")
        node = out.setdefault(path[0], {})
        for part in path[1:-1]:
            node = node.setdefault(part, {})
        try:
            node[path[-1]] = parse_yaml(value)
        except yaml.YAMLError:
            raise InputError("--set", f"{item!r}: the value is not YAML", "quote it or fix its syntax") from None
    return out


@dataclass(frozen=True)
class Resolved:
    """One model a command calls: its spec with every deployment setting applied, its tier, and the option that
    gave its api_base (named when the endpoint does not answer)."""
    spec: ModelSpec
    tier: str
    api_base_from: str


def _tier_of(model: str, routing: ModelRouting | None, profile: str | None, flag: str) -> tuple[str, ModelRouting]:
    """(the tier ``model`` names in ``routing``, the routing): a tier's name, else the tier whose model it is; without
    a routing, a routing of one tier, ``OWN_TIER``."""
    if routing is None:
        return OWN_TIER, ModelRouting(tiers={OWN_TIER: ModelSpec(model=model)}, default=OWN_TIER)
    if model in routing.tiers:
        return model, routing
    tier = next((name for name, spec in routing.tiers.items() if as_spec(spec).model == model), None)
    if tier is None:
        raise InputError(flag, f"{model!r} is neither a tier of routing profile {profile!r} ({', '.join(routing.tiers)}) "
                         "nor the model of one", f"name one of its tiers (e.g. {flag} {next(iter(routing.tiers))}), or "
                         "leave --routing out")
    return tier, routing


def one_model(models: list[str], profile: str | None, settings: list[str], shorthands: dict[str, Any],
              flag: str = "--model") -> list[Resolved]:
    """Each of ``models`` (model strings, or tiers of routing profile ``profile``) with its deployment: the
    profile's, then ``--set`` ``settings`` and the ``shorthands`` given (flag → value, None: not given) over it. A
    setting for a tier none of ``models`` is in, or one field given both by ``--set`` and by a shorthand, is an
    InputError; so is a value the field refuses, naming the option that gave it (never echoing the value)."""
    routing = load_routing_profile(profile, "--routing").routing() if profile else None
    chosen = [_tier_of(m, routing, profile, flag) for m in models]
    tiers = {tier for tier, _ in chosen}
    given = parse_settings(settings)
    for name in given:
        if name not in tiers:
            raise InputError("--set", f"tier {name!r} is not one this command calls (its: {', '.join(sorted(tiers))})",
                             f"set a field of {' or '.join(sorted(tiers))}, e.g. --set {sorted(tiers)[0]}.limits.rpm=100")
    # each field: the flag that gave it, and its value
    fields: dict[str, dict[str, tuple[str, Any]]] = {t: {} for t in tiers}
    for tier, values in given.items():
        for key, value in _flat(values):
            fields[tier][key] = ("--set", value)
    for short, value in shorthands.items():
        if value is None:
            continue
        for tier in tiers:
            key = SHORTHANDS[short]
            if key in fields[tier]:
                raise InputError(short, f"sets {tier}.{key}, which --set sets too", f"give it once: {short} or --set")
            fields[tier][key] = (short, value)
    deployments = {tier: _deployment(values) for tier, values in fields.items()}
    out = []
    for tier, routing_of in chosen:
        spec = as_spec(with_deployment(routing_of, {tier: deployments[tier]}, "--set").tiers[tier])
        source = fields[tier].get("api_base", (None,))[0] or ("--routing" if profile else flag)
        out.append(Resolved(spec, tier, source))
    return out


def _flat(values: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """{limits: {rpm: 5}} as [("limits.rpm", 5)]."""
    out: list[tuple[str, Any]] = []
    for key, value in values.items():
        if isinstance(value, dict) and value:
            out += _flat(value, f"{prefix}{key}.")
        else:
            out.append((f"{prefix}{key}", value))
    return out


def _deployment(fields: dict[str, tuple[str, Any]]) -> Deployment:
    """One tier's settings as a ``Deployment``, each field checked alone so that a refusal names its option."""
    nested: dict[str, Any] = {}
    for key, (source, value) in fields.items():
        one: dict[str, Any] = {}
        node = one
        *parents, last = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
        try:
            Deployment.model_validate(one)
        except ValidationError as exc:
            raise InputError(source, format_validation_error(exc), f"correct {source}") from None
        node = nested
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return Deployment.model_validate(nested)


def config_routing(own: ModelRouting, model: str | None, profile: str | None, settings: list[str]) -> ModelRouting:
    """The routing one config runs on from the command line (`madbench debate`), as `madbench run` gives each of a
    batch's configs: ``--model`` or ``--routing``'s profile in place of its own, then the ``--set`` settings over its
    tiers (a tier it does not have is an InputError)."""
    if model and profile:
        raise InputError("--routing", "--model and --routing both replace the config's routing", "give one of them")
    routing = ModelRouting.single(model) if model else own
    if profile:
        routing = load_routing_profile(profile, "--routing").routing()
    given = parse_settings(settings)
    for name in given:
        if name not in routing.tiers:
            raise InputError("--set", f"tier {name!r} is not one of this routing's ({', '.join(routing.tiers)})",
                             "set a field of one of its tiers")
    flat = {tier: {key: ("--set", value) for key, value in _flat(values)} for tier, values in given.items()}
    return with_deployment(routing, {tier: _deployment(values) for tier, values in flat.items()}, "--set")
