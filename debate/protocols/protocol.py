"""What a protocol is, to the rest of madbench: a class that declares its call plan, runs a debate, and says what it
needs. Preflight, the estimator, the pair check, equal-compute matching, run ids and validation read only this
interface (and the plan it returns), never a protocol's name.

A protocol is named in a debate config by its registered name (``madbench.debate.protocols.registry``), by an
import path into the researcher's own code (``protocol: my_lab.jury:Jury``), or by an installed package's entry point
in the ``madbench.protocols`` group.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import ClassVar

from pydantic import BaseModel, ConfigDict

from madbench.debate.config import DebateConfig
from madbench.debate.context import RunContext
from madbench.debate.outcome import Outcome
from madbench.debate.protocols.plan import Plan, PromptSource, plan_calls
from madbench.debate.task import StageTask

#: A rule-based answer to one stage (the offline ``rules/…`` models'): the stage's task in, its answer schema out.
RuleAnswer = Callable[[StageTask], BaseModel]


class NoOptions(BaseModel):
    """A protocol without knobs of its own: ``options`` must be empty."""
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class Protocol:
    """A debate protocol. Subclass it, set what it declares, and implement ``plan`` and ``run``.

    ``plan`` must list every call ``run`` makes (its role, phase and kind, in the order and concurrency it makes
    them): the estimator prices a run from it, the pair check compares its phases' models, and preflight checks
    every model it routes to.
    """

    #: Its knobs, given in a debate config's ``options`` (unknown keys rejected).
    Options: ClassVar[type[BaseModel]] = NoOptions
    #: Where its prompts come from: the role profiles (``configs/roles``, the agents' phases) or its own stages.
    prompts: ClassVar[PromptSource] = "stages"
    #: Its stage prompts (``version`` and ``stages: {name: {system, template, variables}}``), when it has stages.
    stage_prompts: ClassVar[Path | None] = None
    #: Stage → the rule-based answer of that stage, so a ``rules/…`` model runs it offline.
    rule_answers: ClassVar[Mapping[str, RuleAnswer]] = {}
    #: It debates the config's ``agents`` (a config without any is refused when it is read).
    needs_agents: ClassVar[bool] = False
    #: It runs the paper's rounds and the config's interventions at their hook points: a pilot's intervention
    #: firing rates and early stops are measured on its runs.
    runs_interventions: ClassVar[bool] = False
    #: Its runs draw up to another config's spend in the same batch or a pilot (``options.match_*``): the batch
    #: resolves its options when it loads, and runs it after the runs it matches.
    matches_spend: ClassVar[bool] = False
    #: Run metrics (registered names or import paths) its runs report in runs.parquet, besides the config's own.
    metrics: ClassVar[tuple[str, ...]] = ()

    def plan(self, cfg: DebateConfig, desks: tuple[str, ...] = ()) -> Plan:
        """The calls one run of ``cfg`` makes; ``desks``: the memo slices that hold evidence."""
        raise NotImplementedError(f"{type(self).__name__}.plan")

    async def run(self, ctx: RunContext) -> Outcome:
        """One run: the final allocation and what the run records."""
        raise NotImplementedError(f"{type(self).__name__}.run")

    def options(self, cfg: DebateConfig) -> BaseModel:
        return self.Options.model_validate(cfg.options)

    def aggregation(self, cfg: DebateConfig) -> str:
        """How a run's allocations become one (a fact the pair check compares)."""
        return cfg.aggregation

    def matched_to(self, cfg: DebateConfig) -> str | None:
        """The config of this batch whose runs a run of ``cfg`` waits for and matches (``matches_spend``), or None."""
        return None

    def config_problems(self, cfg: DebateConfig) -> list[str]:
        """What in ``cfg`` this protocol cannot run, checked when the config is read."""
        return [f"agents: the {cfg.protocol} protocol needs at least one agent"] if self.needs_agents and not cfg.agents else []

    def answer_schemas(self, cfg: DebateConfig) -> dict[str, type[BaseModel]]:
        """Kind → the schema its answer is validated against, for every stage call of the plan."""
        return {call.kind: call.schema for call, _, _ in plan_calls(self.plan(cfg)) if call.schema is not None}

    def prompt_file(self) -> Path | None:
        """Its stage prompt file (``stage_prompts``)."""
        return self.stage_prompts

    def prompt_hashes(self, name: str) -> dict[str, str]:
        """The hashes of its own prompt texts that a run's id includes (``name``: as the config names it). Editing
        its stage prompts changes its runs' ids."""
        path = self.prompt_file()
        return {f"protocol/{name}": hashlib.sha256(path.read_bytes()).hexdigest() if path is not None and path.is_file() else ""}

    def routed(self, cfg: DebateConfig) -> set[tuple[str, str]]:
        """(role, phase) of every call a run may route: from the plan, every call it can make."""
        return {(call.role, call.phase) for call, _, _ in plan_calls(self.plan(cfg))}
