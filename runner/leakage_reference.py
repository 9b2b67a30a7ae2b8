"""A leakage batch's memoryless reference arm (``leakage_audit.reference``).

Each config of a declared pair runs again, as ``<name>+reference``, with every role and phase on the reference model
(a rule-based one: it reads the memo's numbers and remembers nothing). Its named − blind difference is what blinding
costs a model without memory; ``madbench stats`` subtracts it from the model's (``eval.stats.leakage_did``).

A reference arm differs from its config only in ``models``, and the reference pair from its model pair only in the
pair's own factor: both checked on the resolved configs, as they run, like every declared pair (``runner.pairs``).
A pair whose arms already answer through rule-based models only is its own reference and gets none.
"""

from __future__ import annotations

from madbench.data.errors import InputError
from madbench.debate.config import DebateConfig
from madbench.eval.stats.leakage_did import reference_name
from madbench.gateway import ModelRouting
from madbench.runner.pairs import pair_problems


def memoryless(config: DebateConfig) -> bool:
    """Every model ``config`` routes to, fallbacks included, is rule-based."""
    return all(spec.model.startswith("rules/") for spec in config.models.named_specs())


def reference_arms(spec, configs: list[DebateConfig], where: str) -> list[DebateConfig]:
    """The reference arms a batch ``spec`` (a ``BatchSpec``) adds to ``configs``: none without
    ``leakage_audit.reference``; an ``InputError`` when an arm would differ from its config beyond ``models``, or
    the reference pair beyond the declared factor."""
    model = spec.leakage_audit.reference if spec.leakage_audit is not None else None
    if model is None:
        return []
    by_name = {c.name: c for c in configs}
    arms: dict[str, DebateConfig] = {}
    problems = []
    for pair in spec.pairs:
        sides = [by_name.get(pair.control), by_name.get(pair.treatment)]
        if None in sides or all(memoryless(c) for c in sides if c is not None):
            continue  # an unknown name is check_pairs' to report; a memoryless pair is its own reference
        for c in sides:
            if c is None or c.name in arms:
                continue
            arm = c.model_copy(update={"name": reference_name(c.name), "models": ModelRouting.single(model)})
            problems += [f"{arm.name} vs {c.name}: {p}" for p in pair_problems(c, arm, ["models"])]
            arms[c.name] = arm
        control, treatment = arms[pair.control], arms[pair.treatment]
        problems += [f"{control.name} vs {treatment.name}: {p}" for p in pair_problems(control, treatment, pair.factor)]
    if problems:
        raise InputError(where, "leakage_audit.reference: the reference arms differ beyond their factor: "
                         + "; ".join(problems), "give the paired configs the same settings but their declared factor")
    return list(arms.values())
