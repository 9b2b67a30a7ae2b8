"""Routing profiles (``configs/routing/<name>.yaml``): which model answers which role and phase, and where it is
reached, named once and shared by the debate configs that say ``routing: <name>``.

A config's own ``models:`` entries go over its profile's, table by table (a tier, role, phase or role.phase given
replaces the profile's entry of that name; ``default`` replaces the profile's). A batch or the command line may then
override the deployment settings of a tier (``DEPLOYMENT_FIELDS``: api_base, key variable, limits; and ``hedge``), which a run's
identity does not see (``ModelRouting.identity``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from madbench.data.errors import InputError, format_validation_error
from madbench.data.paths import CONFIGS_DIR
from madbench.data.templates import load_yaml_model
from madbench.gateway.models import ModelRouting, ModelSpec, RateLimits, as_spec, check_api_base, check_api_key_env

ROUTING_DIR = CONFIGS_DIR / "routing"
#: The tables of a routing that a config's ``models:`` merges into its profile's entry by entry.
TABLES = ("tiers", "roles", "phases", "role_phases")


class RoutingProfile(ModelRouting):
    """One file of ``configs/routing/``: a routing and what it is for."""

    description: str = ""

    def routing(self) -> ModelRouting:
        return ModelRouting.model_validate(self.model_dump(exclude={"description"}))


def profile_names() -> list[str]:
    return sorted(p.stem for p in ROUTING_DIR.glob("*.yaml"))


def load_routing_profile(name: str, where: str) -> RoutingProfile:
    """The profile ``name``; an ``InputError`` at ``where`` (a file and its field) naming the known ones when there is
    none."""
    if not isinstance(name, str) or not name or "/" in name or "\\" in name:
        raise InputError(where, f"{name!r} is not a routing profile's name",
                         f"name one of the profiles in {ROUTING_DIR}: {', '.join(profile_names())}")
    path = ROUTING_DIR / f"{name}.yaml"
    if not path.is_file():
        raise InputError(where, f"unknown routing profile {name!r} (no {ROUTING_DIR}/{name}.yaml)",
                         f"use one of: {', '.join(profile_names())}, or add configs/routing/{name}.yaml")
    return load_yaml_model(path, RoutingProfile)


def with_profile(data: dict[str, Any], where: str) -> dict[str, Any]:
    """A config's fields with ``routing: NAME`` replaced by ``models``: the profile's routing with the config's own
    ``models:`` entries over it. Fields without ``routing`` are returned as they are."""
    if "routing" not in data:
        return data
    data = dict(data)
    base = load_routing_profile(data.pop("routing"), f"{where}: routing").routing().model_dump(mode="json")
    own = data.get("models") or {}
    if not isinstance(own, dict):
        raise InputError(where, f"models: expected a mapping of routing entries over the profile's, got {own!r}",
                         "write e.g. models: {phases: {judge: strong}}, or leave it out")
    merged = base | {k: v for k, v in own.items() if k not in TABLES}
    for table in TABLES:
        entries = own.get(table) or {}
        if not isinstance(entries, dict):
            raise InputError(where, f"models.{table}: expected a mapping, got {entries!r}", f"write {table}: {{NAME: ...}}")
        merged[table] = base[table] | entries
    return data | {"models": merged}


class Deployment(BaseModel):
    """Deployment settings of one tier, each replacing the tier's own when given (limits field by field)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    api_base: str | None = None
    api_key_env: str | None = None
    limits: RateLimits | None = None
    #: Hedge the tier's slow requests (``ModelSpec.hedge``): true or false; left out, the tier's own setting.
    hedge: bool | None = None

    @field_validator("api_base")
    @classmethod
    def _http_endpoint(cls, value: str | None) -> str | None:
        return check_api_base(value)  # also for a tier no config has, which never becomes a ModelSpec

    @field_validator("api_key_env")
    @classmethod
    def _no_key_material(cls, value: str | None) -> str | None:
        return check_api_key_env(value)

    def changes(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_unset=True, exclude={"limits"})


def with_deployment(routing: ModelRouting, tiers: dict[str, Deployment], where: str) -> ModelRouting:
    """``routing`` with the deployment settings of each of its tiers named in ``tiers`` overridden (a batch of several
    configs names the tiers of all of them: the caller checks that each is someone's)."""
    mine = {name: over for name, over in tiers.items() if name in routing.tiers}
    if not mine:
        return routing
    new = dict(routing.tiers)
    for name, over in mine.items():
        spec = as_spec(routing.tiers[name])
        limits = spec.limits.model_dump() | (over.limits.model_dump(exclude_unset=True) if over.limits else {})
        try:
            new[name] = ModelSpec.model_validate(spec.model_dump() | over.changes() | {"limits": limits})
        except ValidationError as exc:
            raise InputError(where, format_validation_error(exc, f"routing.tiers.{name}"), "fix the override") from None
    return routing.model_copy(update={"tiers": new})
