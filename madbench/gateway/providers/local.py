"""``local/<name>``: the embedded offline model, reached through litellm like any OpenAI-compatible server.

The server starts on the first uncached call (a fully cached replay never
starts it), and its endpoint is kept out of the cache key: the port changes
on every start, the model file does not.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager, nullcontext
from pathlib import Path

from ..errors import TransientError
from ..local_model import LocalServer, ServerState, check_name, ensure_model_file
from ..models import ModelSpec
from ..request import LLMRequest
from .base import RawResponse
from .litellm_provider import LiteLLMProvider


class LocalModelProvider:
    is_llm = True
    cacheable = True
    rate_limited = True
    hedgeable = False

    def __init__(self) -> None:
        self._inner = LiteLLMProvider()
        self._servers: dict[str, ServerState] = {}

    def prepare(self, spec: ModelSpec) -> ModelSpec:
        check_name(spec.model.split("/", 1)[1])
        limits = spec.limits
        if "max_concurrency" not in limits.model_fields_set:
            limits = limits.model_copy(update={"max_concurrency": 1})  # one llama.cpp context: serial by nature
        retry = spec.retry
        if "timeout_s" not in retry.model_fields_set:
            retry = retry.model_copy(update={"timeout_s": 900.0})  # 6–10 tokens/s: long answers take minutes
        return spec.model_copy(update={
            "limits": limits,
            "retry": retry,
            # A base model: weights rarely sum to 1, so renormalising is the declared default.
            "weight_policy": spec.weight_policy or "normalize",
            # llama.cpp rejects json_schema; it takes json_object plus a schema (grammar-constrained).
            "structured_output": spec.structured_output or "json_object_schema",
            # A small model is steered by a grammar naming each turn's own targets; it has no prompt cache to keep.
            "schema_scope": spec.schema_scope or "turn",
            # The GGUF file has no chat template: a system message would be dropped silently.
            "merge_system": True if spec.merge_system is None else spec.merge_system,
        })

    def warm(self) -> None:
        self._inner.warm()

    def waiting_for_peer(self) -> AbstractAsyncContextManager[object]:
        return nullcontext()  # each call is answered on its own

    def preflight(self, spec: ModelSpec, temperature: float | None, max_tokens: int | None) -> list[str]:
        return []  # no key, and every parameter is accepted

    def start(self, spec: ModelSpec) -> None:
        """The shared server of this machine (started now, or found running): the runner actors find it by its state
        file. With an api_base the server is someone else's."""
        if spec.api_base is None:
            name = spec.model.split("/", 1)[1]
            self._servers[name] = LocalServer(name).ensure()

    def endpoint_identity(self, spec: ModelSpec) -> str | None:
        return spec.api_base or f"local://{Path(ensure_model_file(spec.model.split('/', 1)[1])).name}"

    def cost(self, model: str, prompt_tokens: int | None, completion_tokens: int | None, cached_tokens: int | None = None,
             cache_write_tokens: int | None = None, batch: bool = False) -> float:
        return 0.0  # runs on this machine; nothing is billed

    async def complete(self, request: LLMRequest, spec: ModelSpec) -> RawResponse:
        name = spec.model.split("/", 1)[1]
        api_base = spec.api_base
        if api_base is None:
            if name not in self._servers:
                self._servers[name] = LocalServer(name).ensure()
            api_base = self._servers[name].api_base
        routed = spec.model_copy(update={"model": f"openai/{name}", "api_base": api_base})
        try:
            # The local server checks no key; the OpenAI client insists on one, so pass a placeholder.
            raw = await self._inner.complete(request, routed, api_key="local-server-needs-no-key")
        except TransientError:
            self._servers.pop(name, None)  # the server may have died: look it up (or restart it) next attempt
            raise
        raw.model_used = spec.model
        return raw
