"""Interventions registry: one module per intervention, one entry here.

Each intervention declares a pydantic ``Params`` model (unknown keys rejected), pure trigger functions,
and the hooks it needs (``madbench.debate.interventions.hooks``: ``after_revision``, ``after_revise_round``,
``after_crit``). The protocol calls, at each hook point, every configured intervention that implements
that hook, in config order (``hooks_at``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from pydantic import BaseModel, ValidationError

from madbench.data.errors import InputError, format_validation_error
from madbench.debate.interventions import crit_causal, js_collapse, rca
from madbench.debate.interventions.hooks import HOOKS

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


def max_retries(name: str, params: BaseModel) -> int:
    """How many times intervention ``name`` acts on one occasion at most (every intervention's Params says)."""
    retries = getattr(params, "max_retries", None)
    if not isinstance(retries, int):
        raise TypeError(f"intervention {name}: its Params has no max_retries (each intervention's must)")
    return retries


def configured(interventions: Iterable, where: str = "config") -> list[tuple[str, BaseModel]]:
    """A config's interventions as (name, parsed Params), in config order.

    A config read from a file never lists a name twice (``madbench.debate.config_file.check_names`` rejects that); one
    built in code that does counts it once, at its first place, with its last parameters."""
    params = {iv.name: parse_intervention(iv, where) for iv in interventions}
    return list(params.items())


def hooks_at(point: str, active: list[tuple[str, BaseModel]]) -> list[tuple[Callable, BaseModel]]:
    """(hook, Params) of every intervention in ``active`` that implements hook ``point``, in ``active``'s order."""
    if point not in HOOKS:
        raise ValueError(f"unknown hook point {point!r}: use one of {', '.join(HOOKS)}")
    return [(getattr(INTERVENTIONS[name], point), p) for name, p in active if hasattr(INTERVENTIONS[name], point)]
