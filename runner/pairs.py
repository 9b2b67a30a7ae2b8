"""A batch's declared pairs, checked on what the arms run: a treatment may differ from its control in the declared
factor and in nothing else (``check_pairs``, called when a batch loads).

Each arm is reduced to its resolved plan (``madbench.debate.resolved_plan``): every phase's model and temperature,
roles, aggregation, rounds, interventions and settings. The check builds the *counterfactual control*: the control
with the treatment's values at the declared factor's paths (dotted config paths, ``*`` wildcards). If the factor
were all that differs, that config runs exactly as the treatment does; every fact where the two still differ is a
confound. Two more differences are confounds unless declared, because the factor's own paths can carry them in:

* the models that write a portfolio (propose, revise, judge): a factor that adds a judge must not also move the
  decision to another model than the control's (declare ``models`` to compare models);
* a role substitution: arms whose role lists do not nest (one macro agent against value, risk and technical)
  change the roles with the count (declare ``roles`` to compare role sets).

A declared factor no field of the two arms differs in is refused too: it would describe a comparison the batch
does not make.
"""

from __future__ import annotations

import difflib
import fnmatch
from collections import Counter
from typing import Any

from pydantic import ValidationError

from madbench.data.errors import InputError, format_validation_error
from madbench.debate.config import DebateConfig
from madbench.debate.resolved_plan import allocating_models, flatten, resolved_plan

#: Factors that name no config path: what they allow is checked on the resolved plans.
PLAN_FACTORS = {"roles": "the arms' role lists may differ without nesting"}
#: Fields that say what a config is called, not what it runs.
NAMING = ("name", "description")


def covered(path: str, pattern: str) -> bool:
    """``path`` lies at or under the dotted ``pattern`` (``*`` matches one or more path parts)."""
    return fnmatch.fnmatchcase(path, pattern) or fnmatch.fnmatchcase(path, pattern + ".*")


def config_paths(cfg: DebateConfig) -> dict[str, Any]:
    return flatten(cfg.model_dump(mode="json", exclude=set(NAMING)) | {"models": cfg.models.identity()})


def unflatten(flat: dict[str, Any]) -> Any:
    """The inverse of ``flatten``: dotted paths back to nested dicts, all-digit keys back to lists."""
    root: dict[str, Any] = {}
    for path, value in flat.items():
        parts = path.split(".") if path else []
        node = root
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        if parts:
            node[parts[-1]] = value
    return _lists(root)


def _lists(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    items = {k: _lists(v) for k, v in node.items()}
    if items and all(k.isdigit() for k in items):
        return [items[k] for k in sorted(items, key=int)]
    return items


def counterfactual(control: DebateConfig, treatment: DebateConfig, factor: list[str]) -> DebateConfig:
    """``control`` with ``treatment``'s values at every path under ``factor``: the treatment, if the factor were all
    that differs."""
    # The routing goes whole, from one arm or the other: its keys hold dots (role_phases: "value.critique").
    routing = treatment if any(f == "models" or f.startswith("models.") for f in factor) else control
    c, t = (flatten(x.model_dump(mode="json", exclude={*NAMING, "models"})) for x in (control, treatment))
    mixed = {k: v for k, v in c.items() if not any(covered(k, f) for f in factor)}
    mixed |= {k: v for k, v in t.items() if any(covered(k, f) for f in factor)}
    data = unflatten(mixed) | {"name": treatment.name}
    return DebateConfig.model_validate(data).model_copy(update={"models": routing.models})


def _show(value: Any) -> str:
    return "(none)" if value in (None, "", [], {}) else str(value)


def plan_differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """``KEY: control A, treatment B`` for every fact where two resolved plans differ, in key order."""
    keys = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    return [f"{k} {_show(a.get(k))} vs {_show(b.get(k))}" for k in keys]


def role_substitution(control: DebateConfig, treatment: DebateConfig) -> str | None:
    """Arms whose role lists do not nest (neither holds the other's roles, counted): a change of roles, not of count."""
    a, b = Counter(x.role for x in control.agents), Counter(x.role for x in treatment.agents)
    if not a or not b or not (a - b) or not (b - a):
        return None
    return f"roles {', '.join(a.elements())} vs {', '.join(b.elements())} (neither arm's roles contain the other's)"


def author_change(control: DebateConfig, treatment: DebateConfig) -> str | None:
    """A model that writes a portfolio in one arm and in no allocating phase of the other."""
    a, b = allocating_models(control), allocating_models(treatment)
    models_a = {m for ms in a.values() for m in ms.split(", ")}
    models_b = {m for ms in b.values() for m in ms.split(", ")}
    if models_a == models_b:
        return None
    where = [f"phase {p} model {m}" for side, other in ((b, models_a), (a, models_b)) for p, ms in side.items()
             for m in ms.split(", ") if m not in other]
    return (f"portfolios written by {', '.join(sorted(models_a))} vs {', '.join(sorted(models_b))} "
            f"({'; '.join(sorted(set(where)))})")


def pair_problems(control: DebateConfig, treatment: DebateConfig, factor: list[str]) -> list[str]:
    """Every way ``treatment`` differs from ``control`` beyond ``factor``, and every declared factor they do not differ
    in; empty when the pair is matched."""
    paths = [f for f in factor if f not in PLAN_FACTORS]
    c, t = config_paths(control), config_paths(treatment)
    differing = {k for k in c.keys() | t.keys() if c.get(k, KeyError) != t.get(k, KeyError)}
    problems = []
    try:
        twin = counterfactual(control, treatment, paths)
    except ValidationError as exc:
        return [f"the control with the treatment's {', '.join(paths)} is no valid config ({format_validation_error(exc)})"]
    problems += plan_differences(resolved_plan(twin), resolved_plan(treatment))
    if not any(covered("models", f) or f.startswith("models.") for f in paths):
        problems += [p for p in [author_change(control, treatment)] if p]
    substitution = role_substitution(control, treatment)
    if substitution and "roles" not in factor:
        problems.append(substitution)
    unused = [f for f in paths if not any(covered(d, f) for d in differing)]
    if "roles" in factor and not substitution:
        unused.append("roles")
    problems += [f"declared factor {f!r} does not differ between the arms" for f in unused]
    return problems


def check_pairs(pairs: list, configs: list[DebateConfig], where: str) -> None:
    """An ``InputError`` (one line) naming every declared pair whose arms differ beyond their factor, or that names a
    config the batch does not have."""
    by_name = {c.name: c for c in configs}
    lines = []
    for i, pair in enumerate(pairs):
        missing = [n for n in (pair.control, pair.treatment) if n not in by_name]
        if missing:
            close = sorted({c for n in missing for c in difflib.get_close_matches(n, list(by_name), n=3)})
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            lines.append(f"pairs[{i}]: no config named {', '.join(missing)} (the batch's: {', '.join(by_name)}){hint}")
            continue
        if pair.control == pair.treatment:
            lines.append(f"pairs[{i}]: control and treatment are both {pair.control!r}")
            continue
        problems = pair_problems(by_name[pair.control], by_name[pair.treatment], pair.factor)
        if problems:
            lines.append(f"pair {pair.treatment} vs {pair.control}: arms differ beyond {', '.join(map(repr, pair.factor))}: "
                         + "; ".join(problems))
    if lines:
        fixes = []
        if any(": no config named " in line for line in lines):
            fixes.append("name configs the batch runs (its configs list)")
        if any(" differ beyond " in line or "are both" in line for line in lines):
            fixes.append("make the arms differ only in the declared factor (the same routing, roles and settings), or "
                         "declare what else differs (a config path such as models or agents.*.tier, or roles)")
        raise InputError(where, " | ".join(lines), "; ".join(fixes))
