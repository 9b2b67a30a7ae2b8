"""The composition root: the one place that builds the providers, the gateway and the scorer a process uses.

The gateway knows nothing of debates: ``rules/…`` models are answered by the table of deterministic answerers
(``madbench.scoring.rule_answers``), which only this layer, above every other, can hand it. Provider batch mode is
chosen here too (a ``BatchCollector`` given), as a provider of the registry built, not a global swapped later.
Every entry point (the runner's actors, ``madbench debate``, ``madbench llm ask``, re-scoring, the estimate and the
preflight, the simulators and benchmarks) builds its gateway here, so that none depends on what was imported first.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel

from madbench.debate.config import DebateConfig
from madbench.debate.grading import Scorer
from madbench.gateway import Budget, Gateway, ResponseCache
from madbench.gateway.hedging import HedgeSettings
from madbench.gateway.limiter import LimiterPool
from madbench.gateway.providers import Providers
from madbench.gateway.providers.batching import BatchCollector, BatchingProvider
from madbench.gateway.providers.rules import RuleAnswer, RulesProvider
from madbench.runner.leakage_audit import is_identify_probe, rule_identify_answer
from madbench.scoring.rule_answers import answer
from madbench.scoring.scorers import scorer_for


def rule_answer(name: str, context: dict) -> BaseModel:
    """``rules/<name>``'s answer: the debate's deterministic answerers, and "unknown" to the leakage audit's
    identification probe (a rule-based model recognises nothing: ``leakage_audit.rule_identify_answer``)."""
    return rule_identify_answer(context) if is_identify_probe(context) else answer(name, context)


def build_providers(collector: BatchCollector | None = None, rule_answer: RuleAnswer = rule_answer) -> Providers:
    """The gateway's declared providers, ``rules/…`` answered by ``rule_answer``, and with ``collector`` every
    litellm-routed model answered through provider batches gathered by it (providers/batching.py)."""
    providers = Providers.declared().with_named("rules", RulesProvider(rule_answer))
    if collector is not None:
        providers = providers.with_default(BatchingProvider(providers.default, collector))
    return providers


def build_gateway(cache: ResponseCache | None = None, budget: Budget | None = None,
                  guard: Callable[[], None] | None = None, limiters: LimiterPool | None = None,
                  collector: BatchCollector | None = None, rule_answer: RuleAnswer = rule_answer, replay: bool = False,
                  hedging: HedgeSettings | None = None) -> Gateway:
    """A gateway over ``build_providers(collector, rule_answer)``; the other arguments as ``Gateway``'s."""
    return Gateway(cache=cache, limiters=limiters, budget=budget, guard=guard,
                   providers=build_providers(collector, rule_answer), replay=replay, hedging=hedging)


def build_scorer(config: DebateConfig) -> Scorer:
    """The scorer each run of ``config`` is handed (its CRIT and RCA judges, LLM or rule-based)."""
    return scorer_for(config)
