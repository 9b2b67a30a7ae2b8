"""The phases of a run, named once: every module that routes, prompts, prices or checks a phase imports them here.

A phase is what a call is routed and budgeted as (``ModelRouting.resolve(role, phase)``, a config's ``max_tokens``).
The agents' phases are the paper's debate turns; the scoring phases are the CRIT and RCA judges'. A staged protocol's
stages are not phases: each is routed as ``STAGE_PHASE`` and named by its own label.
"""

from __future__ import annotations

from typing import Literal, get_args

#: The debating agents' turns (PAPER_NOTES §2): what an ``AgentTask`` asks.
AgentPhase = Literal["propose", "critique", "revise", "judge"]
#: The scorer's judges: CRIT grades an argument, RCA checks a revision.
ScoringPhase = Literal["crit", "rca"]
Phase = Literal[AgentPhase, ScoringPhase]

AGENT_PHASES: tuple[str, ...] = get_args(AgentPhase)
SCORING_PHASES: tuple[str, ...] = get_args(ScoringPhase)
PHASES: tuple[str, ...] = AGENT_PHASES + SCORING_PHASES
#: The agents' phases whose answer is an allocation: the calls that decide a run's portfolio.
ALLOCATING_PHASES: tuple[str, ...] = ("propose", "revise", "judge")
#: The phase every stage of a staged protocol is routed as (staged protocols route models by role).
STAGE_PHASE = "propose"
#: CRIT's phase: the one scoring call a protocol may plan itself (the adversarial committee grades its thesis).
CRIT_PHASE = "crit"
