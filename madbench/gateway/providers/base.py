from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..models import ModelSpec
from ..request import LLMRequest


@dataclass
class RawResponse:
    content: str
    model_used: str
    #: The model the provider says answered (the ``model`` of an OpenAI response: often a dated snapshot of the one
    #: asked for); None where the provider reports none.
    model_served: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    #: Of ``prompt_tokens``: read from and written to the provider's prompt cache (None: not reported).
    cached_tokens: int | None = None
    cache_write_tokens: int | None = None
    finish_reason: str | None = None
    #: Provider-specific facts worth keeping in the trace (never credentials).
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Race:
    """A request raced against a copy of itself (a hedge: madbench.gateway.hedging). ``lost`` turns true when the
    other copy's answer won; a provider whose caller is then cancelled closes the request at once (its connection with
    it) instead of waiting for an answer nobody will read."""

    lost: bool = False


#: The race the request being sent is in (None: it is in none), set by the gateway around each copy of a hedged request.
racing: ContextVar[Race | None] = ContextVar("madbench_racing", default=None)


class SendOnly(str):
    """A preflight problem that only sending a call meets (a missing key, a model name litellm does not list): a dry
    run, which sends nothing, reports it as a warning; a run refuses to start."""


class Provider(Protocol):
    #: Label shown in every table: False for the rule-based analysts.
    is_llm: bool
    #: Whether answers go to the disk cache (free deterministic providers skip it).
    cacheable: bool
    #: Whether calls queue at the rate limiter.
    rate_limited: bool
    #: Whether a slow request may be sent a second time (a hosted API; not code in this process, a local model, whose
    #: second request would only share its machine, or a provider batch).
    hedgeable: bool

    def prepare(self, spec: ModelSpec) -> ModelSpec:
        """Fill provider defaults (endpoint, structured-output mode, weight policy)."""

    def warm(self) -> None:
        """Do the slow first-call work (imports, clients) before a rate-limit lease is taken: a lease held through
        seconds of imports sends its request late, bunched with later ones, and a provider that counts arrivals
        over a sliding minute answers the bunch with 429s a minute later."""

    def start(self, spec: ModelSpec) -> None:
        """Start what answers ``spec`` on this machine, saying what it does (the embedded model: its file assembled
        once, its server started); nothing for a provider reached over the network or answered in-process. A driver
        calls it before its runs, so that minutes of set-up are said where the user looks, not inside a Ray actor."""

    def preflight(self, spec: ModelSpec, temperature: float | None, max_tokens: int | None) -> list[str]:
        """What would make every call to ``spec`` fail, found without a call: a missing key, a parameter the model
        refuses. One line per problem; empty when none."""

    def endpoint_identity(self, spec: ModelSpec) -> str | None:
        """What stands for the endpoint in the cache key (a stable name, not an ephemeral port)."""

    def cost(self, model: str, prompt_tokens: int | None, completion_tokens: int | None, cached_tokens: int | None = None,
             cache_write_tokens: int | None = None, batch: bool = False) -> float | None:
        """US dollars for one attempt (``prompt_tokens`` includes the cached and cache-write ones, priced at their own
        rates; ``batch``: at the provider's batch-API prices); None when unknown (never a made-up 0)."""

    def waiting_for_peer(self) -> AbstractAsyncContextManager[object]:
        """Entered while a call waits for an identical request that another caller is sending (the gateway's single
        flight): nothing to do for a provider that answers each call on its own (``contextlib.nullcontext()``)."""

    async def complete(self, request: LLMRequest, spec: ModelSpec) -> RawResponse:
        """One attempt. Raises the classified errors of ``gateway.errors``."""
