"""Provider batch mode: calls answered through a provider's batch API (half price) instead of one by one.

``BatchingProvider`` wraps the litellm provider. Its ``complete`` does not call the model: it hands the request,
in the provider's batch-line form (``batch_line``), to a ``BatchCollector`` and waits until the collector has
submitted it in a provider batch with the requests other runs are waiting on, and the batch has finished. The
gateway around it is unchanged, so the cache is checked before anything reaches a batch, a validation failure
is asked again (in the next batch) with its feedback, and an error line is retried like any provider error.

Where the collector lives is the caller's choice (``madbench.runner.provider_batches`` keeps one per batch of runs, in a
Ray actor, and journals every provider batch in the results directory); it knows each waiting call's party
(``current_party``: the run it belongs to), so it can tell when every run is blocked on a model call.

``BatchAPI`` is the one place that talks to the provider's files and batches endpoints, through litellm
(``acreate_file``, ``acreate_batch``, ``aretrieve_batch``, ``alist_batches``, ``afile_content``); the SDK's own
retries are off, so that a create that timed out is never sent twice unseen.

Prices: litellm's cost map gives ``input_cost_per_token_batches`` and ``output_cost_per_token_batches`` for many
models; for the others a batch call is priced at half the synchronous price (what OpenAI, Anthropic, Vertex and
Bedrock charge). ``batch_pricing`` says which was used.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from contextvars import ContextVar
from types import SimpleNamespace
from typing import Any, Protocol

from ..errors import FatalProviderError, RateLimited, TransientError
from ..models import ModelSpec
from ..request import LLMRequest
from ..secrets import api_key_from_env, redact
from .base import Provider, RawResponse
from .litellm_provider import (
    cache_usage,
    import_litellm,
    merged_messages,
    needs_cache_breakpoint,
    read_dropped_outcome,
    response_format,
    token_cost,
    unanswered,
    with_cache_breakpoint,
)

#: The party (run) a call belongs to: set by whoever runs a debate in batch mode, read by the collector.
current_party: ContextVar[str | None] = ContextVar("madbench_batch_party", default=None)

#: litellm providers whose batch input is OpenAI's (a chat-completion body per line).
BATCH_PROVIDERS = ("openai", "azure")
ENDPOINT = "/v1/chat/completions"
#: Batch states after which nothing more happens.
TERMINAL_STATES = ("completed", "expired", "failed", "cancelled")


class BatchCollector(Protocol):
    def waiting_for_peer(self, party: str | None) -> AbstractAsyncContextManager[object]:
        """While a call of ``party`` waits for an identical request of another party (see ``ask``)."""

    async def ask(self, party: str | None, group: dict[str, Any], custom_id: str, body: dict[str, Any]) -> dict[str, Any]:
        """Submit ``body`` (one chat completion) in a provider batch of ``group`` (``batch_group``) and return its
        result line as the provider wrote it (``{"custom_id", "response": {"status_code", "body"}, "error"}``),
        or ``{"error": {"kind": "transient" | "fatal", "message": ...}}`` when no line came back."""


def batch_group(spec: ModelSpec) -> dict[str, Any]:
    """Requests that may share one provider batch: one provider account, endpoint and model (OpenAI's rule)."""
    litellm = import_litellm()
    model, provider, _, _ = litellm.get_llm_provider(spec.model, api_base=spec.api_base)
    return {"provider": provider, "model": model, "api_base": spec.api_base, "api_key_env": spec.api_key_env}


def batch_body(request: LLMRequest, spec: ModelSpec, group: dict[str, Any]) -> dict[str, Any]:
    """The chat-completion body litellm would send for ``request``, with the parameters mapped for the model (e.g.
    ``max_completion_tokens`` for gpt-5) and ``madbench_context`` for the simulated provider."""
    litellm = import_litellm()
    extra = {"madbench_context": request.context} if spec.send_context and request.context is not None else None
    params = litellm.utils.get_optional_params(
        model=group["model"], custom_llm_provider=group["provider"], temperature=request.temperature,
        top_p=request.top_p, max_tokens=request.max_tokens, seed=request.seed, tools=request.tools,
        response_format=response_format(request.response_schema, spec.structured_output or "json_schema"),
        extra_body=extra)
    params.pop("stream", None)  # batches never stream
    messages = merged_messages(request) if spec.merge_system else [m.model_dump() for m in request.messages]
    if needs_cache_breakpoint(spec.model, spec.api_base):  # as a synchronous call marks it
        messages = with_cache_breakpoint(messages)
    body = {"model": group["model"], "messages": messages}
    body.update({k: v for k, v in params.items() if k != "extra_body" and v is not None})
    body.update(params.get("extra_body") or {})  # as the OpenAI SDK merges extra_body into the JSON
    return body


def batch_pricing(model: str) -> dict[str, Any]:
    """Per-token batch prices of ``model``: {"input", "output", "source"}; prices None when litellm has no price. The
    gateway charges ``token_cost(..., batch=True)``, which prices the same way (and the prompt cache's share)."""
    litellm = import_litellm()
    try:
        info = litellm.get_model_info(model)
    except litellm.exceptions.ModelNotMappedError:
        return {"input": None, "output": None, "source": "unknown: not in litellm's cost map"}
    if info.get("input_cost_per_token_batches") is not None and info.get("output_cost_per_token_batches") is not None:
        return {"input": info["input_cost_per_token_batches"], "output": info["output_cost_per_token_batches"],
                "source": "litellm batch prices (input_cost_per_token_batches, output_cost_per_token_batches)"}
    if info.get("input_cost_per_token") is None or info.get("output_cost_per_token") is None:
        return {"input": None, "output": None, "source": "unknown: no price in litellm's cost map"}
    return {"input": info["input_cost_per_token"] / 2, "output": info["output_cost_per_token"] / 2,
            "source": "50% of the synchronous price (litellm has no batch price for this model)"}


def _ns(value: Any) -> Any:
    """A JSON value with attribute access, as the litellm response objects that ``unanswered`` reads."""
    if isinstance(value, dict):
        return SimpleNamespace(**{k: _ns(v) for k, v in value.items()})
    return [_ns(v) for v in value] if isinstance(value, list) else value


def raw_response(line: dict[str, Any], spec: ModelSpec, cost: Callable[..., float | None]) -> RawResponse:
    """A batch result line as the provider's answer, or the error it stands for, classified as a synchronous call's
    (a refusal and a truncation too, with what they billed: ``cost`` prices them)."""
    if "response" not in line:
        err = line.get("error") or {}
        cls = FatalProviderError if err.get("kind") == "fatal" else TransientError
        raise cls(redact(f"provider batch: {err.get('message', 'no result line')}")[:500])
    resp = line.get("response") or {}
    status, body = resp.get("status_code"), resp.get("body") or {}
    if line.get("error") or status != 200:
        message = redact(json.dumps(line.get("error") or body.get("error") or body)[:400])
        if status == 429:
            raise RateLimited(f"429 in a provider batch: {message}", None)
        if isinstance(status, int) and 400 <= status < 500:
            raise FatalProviderError(f"{status} in a provider batch: {message}")
        raise TransientError(f"{status or 'no status'} in a provider batch: {message}")
    try:
        choice = _ns(body["choices"][0])
        content = choice.message.content
    except (KeyError, IndexError, TypeError, AttributeError):
        raise TransientError(f"malformed batch result: {redact(json.dumps(body))[:300]}") from None
    usage = body.get("usage") or {}
    failed = unanswered(choice, _ns(usage), spec, cost)
    if failed is not None:
        raise failed
    if content is None:
        raise TransientError(f"empty message (finish_reason={choice.finish_reason})")
    cached, written = cache_usage(usage)
    return RawResponse(content=content, model_used=spec.model, prompt_tokens=usage.get("prompt_tokens"),
                       completion_tokens=usage.get("completion_tokens"), cached_tokens=cached, cache_write_tokens=written,
                       finish_reason=choice.finish_reason, model_served=body.get("model"),
                       extra={"provider_model": body.get("model"), "provider_batch": line.get("madbench_batch")})


class BatchingProvider:
    """The litellm provider, answered through provider batches (see the module's docstring)."""

    is_llm = True
    cacheable = True
    #: Batches have their own (much larger) quota, and a limiter would let only a few calls wait at once.
    rate_limited = False
    hedgeable = False
    #: Its calls are billed at batch prices (``spec_cost`` prices a declared price so too).
    bills_batches = True

    def __init__(self, inner: Provider, collector: BatchCollector):
        self.inner, self.collector = inner, collector

    def prepare(self, spec: ModelSpec) -> ModelSpec:
        return self.inner.prepare(spec)

    def warm(self) -> None:
        self.inner.warm()

    def waiting_for_peer(self) -> AbstractAsyncContextManager[object]:
        """The run waits for an identical request another run asked (single flight), so it is blocked on a model
        call: the collector must count it so, or it waits ``idle_s`` for this run at every phase (two configs of a
        matched pair ask much the same), and the watchdog must leave it be while the provider batch runs."""
        return self.collector.waiting_for_peer(current_party.get())

    def preflight(self, spec: ModelSpec, temperature: float | None, max_tokens: int | None) -> list[str]:
        return self.inner.preflight(spec, temperature, max_tokens)  # the driver checks batch support (batch_problems)

    def start(self, spec: ModelSpec) -> None:
        self.inner.start(spec)

    def endpoint_identity(self, spec: ModelSpec) -> str | None:
        return self.inner.endpoint_identity(spec)  # the same cache keys as synchronous calls: the same answers

    def cost(self, model: str, prompt_tokens: int | None, completion_tokens: int | None, cached_tokens: int | None = None,
             cache_write_tokens: int | None = None, batch: bool = True) -> float | None:
        """At batch prices (``batch_pricing`` says which; every call here is in a provider batch, so by default), the
        prompt cache's share at its batch rate; ``batch=False``: what the same call costs synchronously. None when
        unknown."""
        if prompt_tokens is None or completion_tokens is None:
            return None
        return token_cost(model, prompt_tokens, completion_tokens, cached_tokens, cache_write_tokens, batch=batch)

    async def complete(self, request: LLMRequest, spec: ModelSpec) -> RawResponse:
        group = batch_group(spec)
        custom_id = request.model_copy(update={"api_base": self.endpoint_identity(spec)}).cache_key()
        line = await self.collector.ask(current_party.get(), group, custom_id, batch_body(request, spec, group))
        return raw_response(line, spec, self.cost)


class NotKnown(FatalProviderError):
    """The provider does not know the batch or file asked for (404): it was lost on its side (or never made)."""


class BatchAPI:
    """A provider's files and batches endpoints for one ``batch_group``, through litellm. Every method raises
    ``TransientError`` (worth trying again) or ``FatalProviderError``."""

    def __init__(self, group: dict[str, Any], timeout_s: float = 120.0):
        self.group = group
        self.timeout_s = timeout_s

    def _kwargs(self) -> dict[str, Any]:
        g = self.group
        kw: dict[str, Any] = {"custom_llm_provider": g["provider"], "timeout": self.timeout_s, "max_retries": 0}
        key = api_key_from_env(g["api_key_env"])
        if g["api_base"]:
            kw["api_base"] = g["api_base"]
            key = key or "no-key"  # a self-hosted endpoint takes none, but the client will not send without one
        if key is not None:
            kw["api_key"] = key
        return kw

    async def upload(self, lines: list[dict[str, Any]], name: str) -> str:
        data = "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines).encode()
        litellm = import_litellm()
        file_id: str = (await self._call(litellm.acreate_file(file=(name, data), purpose="batch", **self._kwargs()))).id
        return file_id

    async def create(self, input_file_id: str, metadata: dict[str, str]) -> dict[str, Any]:
        litellm = import_litellm()
        return _plain(await self._call(litellm.acreate_batch(completion_window="24h", endpoint=ENDPOINT,
                                                             input_file_id=input_file_id, metadata=metadata,
                                                             **self._kwargs())))

    async def retrieve(self, batch_id: str) -> dict[str, Any]:
        litellm = import_litellm()
        return _plain(await self._call(litellm.aretrieve_batch(batch_id=batch_id, **self._kwargs())))

    async def find(self, input_file_id: str, pages: int = 10) -> dict[str, Any] | None:
        """The batch created from ``input_file_id``, if any (newest first, up to ``pages`` pages of 100)."""
        litellm = import_litellm()
        after = None
        for _ in range(pages):
            page = await self._call(litellm.alist_batches(after=after, limit=100, **self._kwargs()))
            for b in page.data:
                if b.input_file_id == input_file_id:
                    return _plain(b)
            if not page.has_more or not page.data:
                return None
            after = page.data[-1].id
        return None

    async def content(self, file_id: str) -> bytes:
        litellm = import_litellm()
        body: bytes = (await self._call(litellm.afile_content(file_id=file_id, **self._kwargs()))).content
        return body

    async def _call(self, awaitable: Awaitable[Any]) -> Any:
        litellm = import_litellm()
        call = asyncio.ensure_future(awaitable)
        try:
            return await asyncio.shield(call)
        except asyncio.CancelledError:
            # litellm builds the request in a worker thread and awaits it afterwards: cancelled in between (the
            # collector stopping), the coroutine it built would be dropped unawaited. Let it finish, answer dropped.
            call.add_done_callback(read_dropped_outcome)
            await asyncio.wait([call])
            raise
        except (litellm.RateLimitError, litellm.Timeout, litellm.InternalServerError, litellm.APIConnectionError,
                litellm.ServiceUnavailableError, litellm.BadGatewayError) as exc:
            raise TransientError(redact(f"{type(exc).__name__}: {exc}")[:500]) from None
        except litellm.NotFoundError as exc:
            raise NotKnown(redact(f"{type(exc).__name__}: {exc}")[:500]) from None
        except (litellm.AuthenticationError, litellm.PermissionDeniedError, litellm.BadRequestError) as exc:
            raise FatalProviderError(redact(f"{type(exc).__name__}: {exc}")[:500]) from None
        except litellm.APIError as exc:
            status = getattr(exc, "status_code", 0) or 0
            cls = TransientError if status >= 500 or status == 0 else FatalProviderError
            raise cls(redact(f"{status} {type(exc).__name__}: {exc}")[:500]) from None
        except Exception as exc:
            # litellm's batch and file calls pass the OpenAI client's own errors through unmapped (a 404 arrives as
            # openai.NotFoundError): classified by their status here, never left to kill the caller's task.
            import openai
            if isinstance(exc, openai.APIConnectionError):  # a timeout included
                raise TransientError(redact(f"{type(exc).__name__}: {exc}")[:500]) from None
            status = getattr(exc, "status_code", None)
            if not isinstance(exc, openai.APIStatusError) or status is None:
                raise
            reason = redact(f"{status} {type(exc).__name__}: {exc}")[:500]
            if status == 404:
                raise NotKnown(reason) from None
            raise (TransientError if status >= 500 or status == 429 else FatalProviderError)(reason) from None


def _plain(batch: Any) -> dict[str, Any]:
    """A litellm batch object as plain JSON (what the journal keeps)."""
    data = batch.model_dump(mode="json") if hasattr(batch, "model_dump") else dict(batch)
    keep = ("id", "status", "input_file_id", "output_file_id", "error_file_id", "request_counts", "errors", "metadata",
            "created_at", "completed_at", "expired_at", "failed_at", "cancelled_at")
    return {k: data.get(k) for k in keep}


def parse_lines(data: bytes) -> dict[str, dict[str, Any]]:
    """A batch output or error file: custom_id → its line."""
    out = {}
    for raw in data.decode().splitlines():
        if raw.strip():
            line = json.loads(raw)
            out[line["custom_id"]] = line
    return out
