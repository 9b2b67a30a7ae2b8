"""``rules/<name>``: deterministic answerers behind the gateway's interface (no HTTP, no cost, no cache).

The gateway knows nothing of what they answer: whoever composes the system hands it an answer function
(``RulesProvider(answer)``, named ``rules`` in the registry ``madbench.runner.wiring.build_providers`` builds).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import Any

from pydantic import BaseModel

from ..errors import FatalProviderError
from ..models import ModelSpec
from ..request import LLMRequest
from .base import RawResponse

#: (name after ``rules/``, the request's structured context) → the answer. Raises KeyError for an unknown name.
RuleAnswer = Callable[[str, dict[str, Any]], BaseModel]


class RulesProvider:
    is_llm = False
    cacheable = False  # recomputing is cheaper than a cache read, and always identical
    rate_limited = False
    hedgeable = False

    def __init__(self, answer: RuleAnswer):
        self.answer = answer

    def prepare(self, spec: ModelSpec) -> ModelSpec:
        return spec.model_copy(update={"weight_policy": spec.weight_policy or "strict",
                                       "structured_output": "prompt_only", "merge_system": False,
                                       "schema_scope": "turn"})  # no schema is sent

    def warm(self) -> None:
        pass  # nothing slow, and no limiter

    def waiting_for_peer(self) -> AbstractAsyncContextManager[object]:
        return nullcontext()  # each call is answered on its own

    def preflight(self, spec: ModelSpec, temperature: float | None, max_tokens: int | None) -> list[str]:
        return []  # no key, and every parameter is accepted

    def endpoint_identity(self, spec: ModelSpec) -> str | None:
        return None

    def start(self, spec: ModelSpec) -> None:
        pass  # answered in-process

    def cost(self, model: str, prompt_tokens: int | None, completion_tokens: int | None, cached_tokens: int | None = None,
             cache_write_tokens: int | None = None, batch: bool = False) -> float:
        return 0.0

    async def complete(self, request: LLMRequest, spec: ModelSpec) -> RawResponse:
        if request.context is None:
            raise FatalProviderError(f"{spec.model} answers structured tasks only: the request carries no context")
        try:
            answer = self.answer(spec.model.split("/", 1)[1], request.context)
        except KeyError as exc:
            raise FatalProviderError(f"no rule-based model {spec.model!r}: {exc.args[0]}") from None
        return RawResponse(content=answer.model_dump_json(), model_used=spec.model, model_served=spec.model, prompt_tokens=0, completion_tokens=0)
