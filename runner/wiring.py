"""The composition root's one piece of global wiring: ``rules/…`` models answer through the gateway.

The gateway knows nothing of debates; the runner, which sits above every layer, registers the table of
deterministic answerers (``madbench.scoring.rule_answers``) as the ``rules`` provider. ``madbench.runner.pipeline`` calls it when
imported, and every runner entry point (the batch runner, its Ray actors, re-scoring, the estimate) imports the
pipeline, so a process that can run or price a debate has it. Registering is idempotent.
"""

from __future__ import annotations

from madbench.gateway.providers import register_provider
from madbench.gateway.providers.rules import RulesProvider
from madbench.scoring.rule_answers import answer


def install_rule_answers() -> None:
    register_provider("rules", RulesProvider(answer))
