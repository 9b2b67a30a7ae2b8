"""The deterministic answer to every structured task: ``rules/<name>`` models, the simulated provider.

Debate turns are answered by the rule-based analysts (``debate.rules``), staged protocols' tasks by their
stage answerer, CRIT and RCA by the rule-based scorers. This table lives here, above both the debate and
the scoring, because it answers for both; the runner hands it to the gateway.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel

from debate.rules import ANALYSTS, respond
from debate.rules.staged_answers import answer as answer_stage
from debate.task import AgentTask
from scoring import rca_judge, rules_scorer

HANDLERS: dict[str, Callable[[dict], BaseModel]] = {
    **{name: (lambda ctx, n=name: respond(n, AgentTask.model_validate(ctx))) for name in [*ANALYSTS, "judge"]},
    "crit": lambda ctx: rules_scorer.score(rules_scorer.CritTask.model_validate(ctx)),
    "rca": lambda ctx: rca_judge.rules_verdict(rca_judge.RCATask.model_validate(ctx)),
    "stage": answer_stage,
}


def answer(name: str, context: dict) -> BaseModel:
    """Answer ``context`` as ``rules/<name>``; a staged protocol's task goes to the stage answerer, whatever the role."""
    if "stage" in context:
        name = "stage"
    if name not in HANDLERS:
        raise KeyError(f"known: {', '.join('rules/' + n for n in HANDLERS)}")
    return HANDLERS[name](context)


def handler_for_context(context: dict) -> str:
    """Which rule-based model answers a structured task, from the task's own fields."""
    if "stage" in context:
        return "stage"
    if "argument" in context:
        return "crit"
    if "after" in context:
        return "rca"
    return "judge" if context.get("phase") == "judge" else context["role"]


def answer_for_context(context: dict) -> str:
    """The JSON answer to a task whose model is not named (the simulated provider's case)."""
    return answer(handler_for_context(context), context).model_dump_json()
