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

    def endpoint_identity(self, spec: ModelSpec) -> str | None:
        return None

    def cost(self, model: str, prompt_tokens: int | None, completion_tokens: int | None) -> float:
        return 0.0

    async def complete(self, request: LLMRequest, spec: ModelSpec) -> RawResponse:
        from debate.rules import ANALYSTS, respond
        from debate.task import AgentTask
        name = spec.model.split("/", 1)[1]
        if name != "judge" and name not in ANALYSTS:
            raise FatalProviderError(f"no rule-based analyst {name!r}; use rules/<role> with a role in: judge, {', '.join(ANALYSTS)}")
        if request.context is None:
            raise FatalProviderError(f"{spec.model} answers debate turns only: the request carries no AgentTask context")
        answer = respond(name, AgentTask.model_validate(request.context))
        return RawResponse(content=answer.model_dump_json(), model_used=spec.model, prompt_tokens=0, completion_tokens=0)
