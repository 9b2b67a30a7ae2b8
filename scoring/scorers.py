"""Which scorer grades a config's arguments: the shipped CRIT and RCA judges by name, or a researcher's own by import
path (``scorer: my_lab.judge:build``) or by an installed package's entry point in the ``madbench.scorers`` group.

A scorer is named by its factory, ``(DebateConfig) -> Scorer`` (``madbench.debate.grading.Scorer``: ``crit`` and
``rca``), called once per run; it loads what it needs when called, so a missing rubric or prompt fails when the batch
loads, before any model is called.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from madbench.data.errors import InputError
from madbench.data.plugins import resolve
from madbench.debate.config import DebateConfig
from madbench.debate.grading import Scorer

ENTRY_POINTS = "madbench.scorers"
#: The shipped scorers, by the name a config gives (``DebateConfig.scorer``).
BUILTIN: dict[str, str] = {"crit": "madbench.scoring.debate_scorer:crit_scorer"}

ScorerFactory = Callable[[DebateConfig], Scorer]


def scorer_for(config: DebateConfig) -> Scorer:
    """The scorer ``config`` names, built for it."""
    where = f"config {config.name}"
    factory = resolve(config.scorer, BUILTIN, ENTRY_POINTS, where, "scorer")
    if not callable(factory):
        raise InputError(where, f"scorer: {config.scorer!r} is {factory!r}, not a factory",
                         "name a function or class that takes the DebateConfig and returns a scorer")
    scorer = factory(config)
    missing = [m for m in ("crit", "rca") if not callable(getattr(scorer, m, None))]
    if missing:
        raise InputError(where, f"scorer: {config.scorer} built {scorer!r}, which has no {' or '.join(missing)} method",
                         "return an object with async crit(...) and rca(...) (madbench.debate.grading.Scorer)")
    return cast(Scorer, scorer)  # checked above to have the Scorer methods
