"""``rules/<role>``: the deterministic analysts behind the gateway's interface (no HTTP, no cost, no cache)."""

from __future__ import annotations

from ..errors import FatalProviderError
from ..models import ModelSpec
from ..request import LLMRequest
from .base import RawResponse


class RulesProvider:
    is_llm = False
    cacheable = False  # recomputing is cheaper than a cache read, and always identical
    rate_limited = False

    def prepare(self, spec: ModelSpec) -> ModelSpec:
        return spec.model_copy(update={"weight_policy": spec.weight_policy or "strict",
                                       "structured_output": "prompt_only", "merge_system": False})

    def warm(self) -> None:
        pass  # nothing slow, and no limiter

    def endpoint_identity(self, spec: ModelSpec) -> str | None:
        return None

    def cost(self, model: str, prompt_tokens: int | None, completion_tokens: int | None) -> float:
        return 0.0

    async def complete(self, request: LLMRequest, spec: ModelSpec) -> RawResponse:
        name = spec.model.split("/", 1)[1]
        if request.context is not None and "stage" in request.context:
            name = "stage"  # a staged protocol's task: one answerer covers every stage, whatever the role
        handlers = _handlers()
        if name not in handlers:
            raise FatalProviderError(f"no rule-based model {spec.model!r}; known: {', '.join('rules/' + n for n in handlers)}")
        if request.context is None:
            raise FatalProviderError(f"{spec.model} answers structured debate tasks only: the request carries no context")
        answer = handlers[name](request.context)
        return RawResponse(content=answer.model_dump_json(), model_used=spec.model, prompt_tokens=0, completion_tokens=0)


def handler_for_context(context: dict) -> str:
    """Which rule-based model answers a structured task (used by the simulated provider)."""
    if "stage" in context:
        return "stage"
    if "argument" in context:
        return "crit"
    if "after" in context:
        return "rca"
    return "judge" if context.get("phase") == "judge" else context["role"]


def answer_for_context(context: dict) -> str:
    return _handlers()[handler_for_context(context)](context).model_dump_json()


def _handlers():
    """rules/<name> → function(context) → pydantic answer. One entry per non-LLM model."""
    from debate.rules import ANALYSTS, respond
    from debate.task import AgentTask
    from scoring import rules_scorer
    table = {name: (lambda ctx, n=name: respond(n, AgentTask.model_validate(ctx))) for name in [*ANALYSTS, "judge"]}
    from scoring import rca
    table["crit"] = lambda ctx: rules_scorer.score(rules_scorer.CritTask.model_validate(ctx))
    table["rca"] = lambda ctx: rca.rules_verdict(rca.RCATask.model_validate(ctx))
    from debate.rules import stages
    table["stage"] = stages.answer
    return table
