"""A protocol's call plan as data: the calls one run makes, step by step, and which happen only when an
intervention fires.

Each protocol module gives ``plan(cfg, desks) -> Plan`` beside ``run(ctx)``, built from the same stage
definitions, phase names and targets its ``run`` uses, so that what a run is estimated to call
(``madbench.runner.estimate``) comes from the protocol itself. A plan is pure: it reads no prompt, memo or model.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from pydantic import BaseModel

from madbench.gateway.phases import STAGE_PHASE

#: Where a plan's prompts come from: the role profiles (``configs/roles``, the paper's agent phases) or the
#: protocol's stage prompts (``configs/protocols/<protocol>.yaml``).
PromptSource = Literal["profiles", "stages"]


@dataclass(frozen=True)
class Firing:
    """An intervention's chance to act: it fires with the probability named ``rate`` (a field of the estimate's
    ``Rates``), and after each re-run fires again with ``again`` (None: the same rate), up to ``max_retries``."""
    intervention: str
    rate: str
    max_retries: int
    again: str | None = None


@dataclass(frozen=True)
class Check:
    """A call checked after it answers: ``call`` checks it; when the check fails (``firing``) the checked call is
    asked again as ``retry`` and checked again."""
    call: Call
    retry: Call
    firing: Firing


@dataclass(frozen=True)
class Call:
    """``count`` concurrent calls of one kind, answered by one role."""
    kind: str                       # a paper phase or a stage name: its prompt, and its calibration kind
    role: str                       # the routing role (``models.resolve(role, phase)``)
    phase: str                      # the routing phase
    agent: str = ""                 # the answering agent, where the protocol has agents
    count: int = 1
    variant: str = ""               # "proposal": CRIT on a proposal alone; "nudged": a re-revision with one more note
    schema: type[BaseModel] | None = None   # the answer's schema (a stage's)
    sees: tuple[str, ...] = ()      # earlier kinds whose answers its prompt shows, with repeats
    context: tuple[str, ...] = ()   # other context its prompt shows, by name: "book" (a proposed allocation), "reflection"
    desk: str = ""                  # the memo slice a desk is shown
    round: int = 0
    check: Check | None = None


@dataclass(frozen=True)
class Step:
    """Calls asked together: concurrently, or one after another (``sequential``); once a run, or once each debate
    round (``each_round``); always, or only when an intervention fires (``when``)."""
    name: str
    calls: tuple[Call, ...]
    each_round: bool = False
    sequential: bool = False
    when: Firing | None = None


@dataclass(frozen=True)
class Plan:
    protocol: str
    prompts: PromptSource
    rounds: int                     # debate rounds the ``each_round`` steps repeat for
    steps: tuple[Step, ...]

    def calls_by_kind(self, rounds: int | None = None) -> dict[str, int]:
        """Calls per kind when no intervention fires (every check passes), over ``rounds`` debate rounds (default
        the configured ones; fewer when a run stopped early)."""
        rounds = self.rounds if rounds is None else rounds
        out: dict[str, int] = {}
        for step in self.steps:
            if step.when is not None:
                continue
            times = rounds if step.each_round else 1
            for call in step.calls:
                for c in (call, call.check.call) if call.check else (call,):
                    out[c.kind] = out.get(c.kind, 0) + times * call.count
        return {k: n for k, n in out.items() if n}


def stage(kind: str, role: str, schema: type[BaseModel], sees: tuple[str, ...] = (), **more) -> Call:
    """A staged protocol's stage, routed as the one phase staged protocols use (``STAGE_PHASE``)."""
    return Call(kind=kind, role=role, phase=STAGE_PHASE, schema=schema, sees=sees, **more)


def seeing(call: Call, sees: tuple[str, ...], round_: int = 0) -> Call:
    """The same stage shown other earlier answers (its history so far), in round ``round_``."""
    return replace(call, sees=sees, round=round_)


def plan_calls(plan: Plan) -> list[tuple[Call, int, str]]:
    """Every call the plan can make: (call, calls per run when nothing fires, the intervention it waits on or "")."""
    out = []
    for step in plan.steps:
        times = plan.rounds if step.each_round else 1
        when = step.when.intervention if step.when else ""
        for call in step.calls:
            out.append((call, 0 if when else times * call.count, when))
            if call.check:
                out.append((call.check.call, 0 if when else times * call.count, when))
                out.append((call.check.retry, 0, call.check.firing.intervention))
    return out
