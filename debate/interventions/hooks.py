"""The hook interface between the paper protocol and its interventions.

An intervention module implements any of these hooks (plain module-level ``async def``s); the protocol
calls, at each hook point, every configured intervention that implements it, in config order, with that
intervention's parsed ``Params`` as ``p``:

* ``after_revision(debate, p, request, output) -> output`` — after every revise turn (the round's first
  revisions and every re-revision an intervention asks for); may ask again and return the new output.
* ``after_revise_round(debate, p, round_) -> None`` — after the round's revisions, before CRIT; may
  replace ``madbench.debate.revisions`` and ``madbench.debate.js_rev``.
* ``after_crit(debate, p, round_, scores) -> None`` — after CRIT on the revisions, before the controller;
  may update ``scores`` (agent id → CritScore) in place, ``madbench.debate.revisions`` and ``madbench.debate.js_rev``.

``Debate`` is what a hook may use of the running debate; ``fired`` records an intervention that fired.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from madbench.debate.config import AgentConfig
from madbench.debate.context import RunContext
from madbench.debate.events import Intervention
from madbench.debate.grading import CritScore
from madbench.debate.schemas import CritiqueItem
from madbench.debate.task import AgentTask
from madbench.debate.validation import Validated

#: The hook points, in the order a round reaches them.
HOOKS = ("after_revision", "after_revise_round", "after_crit")


@dataclass(frozen=True)
class RevisionRequest:
    """One revise turn as asked, so an ``after_revision`` hook can ask it again with one more nudge."""
    agent: AgentConfig
    round: int
    task: AgentTask
    variables: dict[str, Any]
    label: str
    extra_check: Callable[[Validated], None] | None = None

    def with_nudge(self, nudge: str, label: str) -> RevisionRequest:
        """The same turn with ``nudge`` after the request's own nudges, under ``label``."""
        nudges = [*self.task.nudges, nudge]
        return replace(self, task=self.task.model_copy(update={"nudges": nudges}),
                       variables={**self.variables, "nudges": nudges}, label=label)


class Debate(Protocol):
    """The running paper debate as a hook sees it (``madbench.debate.protocols.paper.PaperDebate``)."""
    ctx: RunContext
    agents: list[AgentConfig]
    #: The agents' outputs at the start of the round (their revision inputs), by agent id.
    current: dict[str, Validated]
    #: This round's revisions, by agent id.
    revisions: dict[str, Validated]
    #: This round's critiques received, by target agent id: (from agent, item).
    received: dict[str, list[tuple[str, CritiqueItem]]]
    #: JS divergence of ``current`` (the round's JS_prop) and of ``revisions`` (JS_rev).
    js_in: float
    js_rev: float
    #: Records of the interventions that fired (the outcome's ``interventions``).
    interventions: list[dict]

    @property
    def beta(self) -> float: ...

    def agent(self, agent_id: str) -> AgentConfig: ...

    async def revise(self, agent: AgentConfig, nudges: list[str], label: str,
                     extra_check: Callable[[Validated], None] | None = None,
                     limits: dict | None = None) -> Validated: ...

    async def ask_revision(self, request: RevisionRequest) -> Validated: ...

    def revision_divergence(self, round_: int) -> float: ...

    async def crit(self, agent: AgentConfig, round_: int, label: str = "crit") -> CritScore:
        """CRIT on ``agent``'s revision in ``revisions``, beside what it revised (``current``) and the critiques it received."""
        ...


def fired(debate: Debate, record: dict[str, Any], action: str, **trace_only: Any) -> None:
    """An intervention fired: trace ``record`` with its action (and ``trace_only`` fields); keep ``record`` for the outcome."""
    debate.ctx.trace.write(Intervention(**record, action=action, **trace_only))
    debate.interventions.append(record)
