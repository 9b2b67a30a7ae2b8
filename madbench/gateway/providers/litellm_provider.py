"""Every hosted or OpenAI-compatible model, through litellm.

litellm's and the OpenAI SDK's own retries are switched off so that every 429
reaches our limiter and every retry is recorded by the gateway.
"""

from __future__ import annotations

import asyncio
import difflib
import email.utils
import os
import re
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import Any

from ..errors import FatalProviderError, NoAnswer, Overloaded, RateLimited, Refused, TransientError, Truncated
from ..models import ModelSpec
from ..request import LLMRequest
from ..secrets import api_key_from_env, redact, remember, remember_env
from .base import RawResponse, SendOnly, racing
from .llama_schema import llama_cpp_schema

_litellm = None


def import_litellm() -> Any:
    """Import litellm once, with its cost map read from the package (no network at import)."""
    global _litellm
    if _litellm is None:
        os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
        os.environ.setdefault("LITELLM_LOG", "ERROR")
        import litellm
        litellm.telemetry = False
        litellm.suppress_debug_info = True
        _litellm = litellm
    return _litellm


def response_format(schema: dict[str, Any] | None, mode: str) -> dict[str, Any] | None:
    if schema is None or mode == "prompt_only":
        return None
    if mode == "json_object_schema":  # llama.cpp's form: grammar-constrained JSON
        return {"type": "json_object", "schema": llama_cpp_schema(schema)}
    return {"type": "json_schema", "json_schema": {"name": schema.get("title", "answer"), "schema": schema, "strict": False}}


def merged_messages(request: LLMRequest) -> list[dict[str, str]]:
    """Fold system text into the first user turn, for models without a chat template."""
    system = "\n\n".join(m.content for m in request.messages if m.role == "system")
    out = [m.model_dump() for m in request.messages if m.role != "system"]
    if system:
        if out and out[0]["role"] == "user":
            out[0] = {"role": "user", "content": f"{system}\n\n{out[0]['content']}"}
        else:
            out.insert(0, {"role": "user", "content": system})
    return out


#: litellm providers that cache a prompt prefix only up to an explicit ``cache_control`` breakpoint (Anthropic's
#: models, wherever they are served); OpenAI, DeepSeek and xAI cache prefixes by themselves. Gemini's explicit
#: context caching is a separate, billed-per-hour object, so its models get no breakpoint (its implicit cache works
#: without one).
BREAKPOINT_PROVIDERS = ("anthropic",)
CLAUDE_HOSTS = ("bedrock", "bedrock_converse", "vertex_ai", "azure_ai", "openrouter", "databricks")


def needs_cache_breakpoint(model: str, api_base: str | None = None) -> bool:
    litellm = import_litellm()
    try:
        name, provider, _, _ = litellm.get_llm_provider(model, api_base=api_base)
    except litellm.BadRequestError:
        return False  # not routable: preflight reports it, and the call fails with litellm's own error
    return provider in BREAKPOINT_PROVIDERS or (provider in CLAUDE_HOSTS and "claude" in name.lower())


def with_cache_breakpoint(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mark the end of the leading system message as a cache breakpoint (Anthropic's ``cache_control``, which litellm
    passes on content blocks): it is the shared prefix of every turn of a run (debate.profiles), so later turns read
    it from the cache. Nothing is marked when no system message leads or nothing follows it (a merged prompt)."""
    if len(messages) < 2 or messages[0]["role"] != "system" or not isinstance(messages[0]["content"], str):
        return messages
    head = {"role": "system", "content": [{"type": "text", "text": messages[0]["content"],
                                           "cache_control": {"type": "ephemeral"}}]}
    return [head, *messages[1:]]


def _field(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def cache_usage(usage: Any) -> tuple[int | None, int | None]:
    """(cached, cache-write) prompt tokens from a response's usage, a litellm object or a plain dict (a batch result
    line): OpenAI's ``prompt_tokens_details.cached_tokens``, Anthropic's ``cache_read_input_tokens`` and
    ``cache_creation_input_tokens`` (litellm copies the read count into the details too). None: not reported."""
    if usage is None:
        return None, None
    details = _field(usage, "prompt_tokens_details")
    cached = _field(details, "cached_tokens") if details is not None else None
    if cached is None:
        cached = _field(usage, "cache_read_input_tokens")
    written = _field(usage, "cache_creation_input_tokens")
    if written is None and details is not None:
        written = _field(details, "cache_creation_tokens")
    return (int(cached) if cached is not None else None), (int(written) if written is not None else None)


def token_cost(model: str, prompt_tokens: int, completion_tokens: int, cached_tokens: int | None = None,
               cache_write_tokens: int | None = None, batch: bool = False) -> float | None:
    """US dollars at ``model``'s list prices in litellm's offline cost map, None when it has none. ``prompt_tokens``
    includes the cached and cache-write tokens (as providers and litellm count them); those are priced at the cache
    read and write rates. ``batch``: at the map's batch prices (``input_cost_per_token_batches`` …), or half the
    synchronous price where it has none (litellm's own rule, what OpenAI, Anthropic, Vertex and Bedrock charge)."""
    litellm = import_litellm()
    if not has_price(model):
        return None
    if batch:
        from litellm.cost_calculator import batch_cost_calculator
        from litellm.types.utils import PromptTokensDetailsWrapper, Usage
        details = PromptTokensDetailsWrapper(cached_tokens=cached_tokens or 0, cache_creation_tokens=cache_write_tokens or 0)
        usage = Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                      total_tokens=prompt_tokens + completion_tokens, prompt_tokens_details=details)
        p, c = batch_cost_calculator(usage, model)
    else:
        p, c = litellm.cost_per_token(model=model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                                      cache_read_input_tokens=cached_tokens or 0,
                                      cache_creation_input_tokens=cache_write_tokens or 0)
    return float(p + c)


def parse_retry_after(value: str) -> float | None:
    """Retry-After is seconds or an HTTP date (RFC 9110 §10.2.3); None when it is neither."""
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


#: Providers for which litellm sends a top-level keyword argument as a top-level body field, but ``extra_body`` as a
#: nested field named ``extra_body`` (which the API would reject); for the others ``extra_body`` is merged into the body
#: (OpenAI and OpenAI-compatible servers through the SDK, Gemini through litellm's own merge).
_CONTEXT_AS_KWARG = ("anthropic",)


def context_field(spec: ModelSpec, context: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments that put a debate turn's structured task at the top level of the request body as
    ``madbench_context``, where madbench's simulator and protocol doubles (madbench/sim) read it."""
    if spec.provider in _CONTEXT_AS_KWARG:
        return {"madbench_context": context}
    return {"extra_body": {"madbench_context": context}}


#: Gemini sends no Retry-After header: its 429 (RESOURCE_EXHAUSTED) says when in the body's google.rpc.RetryInfo.
_RETRY_DELAY = re.compile(r'"retryDelay"\s*:\s*"(\d+(?:\.\d+)?)s"')


def _retry_after(exc: Exception) -> float | None:
    for headers in (getattr(exc, "litellm_response_headers", None), getattr(getattr(exc, "response", None), "headers", None),
                    getattr(exc, "headers", None)):
        if headers:
            value = headers.get("retry-after") or headers.get("Retry-After")
            if value is not None:
                return parse_retry_after(str(value))
    match = _RETRY_DELAY.search(str(exc))
    return float(match[1]) if match else None


def _transient(exc: Exception, spec: ModelSpec) -> TransientError:
    """A 5xx or a dropped connection; one that says when to come back (Anthropic's 529 ``overloaded_error`` sends
    ``retry-after``) is retried after that wait, capped at the model's ``retry_after_cap_s``."""
    reason = redact(f"{getattr(exc, 'status_code', '')} {type(exc).__name__}: {exc}").strip()[:500]
    if "overloaded_error" in str(exc):  # litellm reports Anthropic's 529 as a 500 wrapped in its own prefixes: name it
        reason = "529 overloaded"
    wait = _retry_after(exc)
    return TransientError(reason) if wait is None else Overloaded(reason, min(wait, spec.limits.retry_after_cap_s))


def read_dropped_outcome(call: asyncio.Future[Any]) -> None:
    """A dropped call's outcome, read so that its error is not reported as never retrieved (its caller was
    cancelled and wants nothing from it)."""
    if not call.cancelled():
        call.exception()


async def sent(litellm: Any, kwargs: dict[str, Any], spec: ModelSpec) -> Any:
    """``litellm.acompletion(**kwargs)``, its errors classified once (``errors``: rate limited, transient, fatal)."""
    call = asyncio.ensure_future(litellm.acompletion(**kwargs))
    try:
        return await asyncio.shield(call)
    except asyncio.CancelledError:
        race = racing.get()
        if race is not None and race.lost:
            # A hedged request whose copy answered first: closed now (httpx closes the connection of a request
            # cancelled mid-flight), not waited for. Cancelled before litellm sent it, it was never sent.
            call.cancel()
            call.add_done_callback(read_dropped_outcome)
            await asyncio.wait([call])
            raise
        # litellm builds the request in a worker thread and awaits it afterwards: cancelled in between, the coroutine
        # it built is dropped unawaited. So a cancelled call (a failed run stops its sibling turns) is let finish
        # within its own timeout, and its answer dropped; the caller settles it at its reserved maximum.
        call.add_done_callback(read_dropped_outcome)
        await asyncio.wait([call])
        raise
    except litellm.RateLimitError as exc:
        raise RateLimited(redact(f"429 rate limited: {exc}")[:500], _retry_after(exc)) from None
    except litellm.Timeout:
        raise NoAnswer(f"timeout after {spec.retry.timeout_s:g} s") from None
    except (litellm.InternalServerError, litellm.APIConnectionError) as exc:
        if "Missing credentials" in str(exc) or "api_key client option must be set" in str(exc):
            # litellm reports a missing key as a 500; retrying cannot help.
            raise FatalProviderError(f"no API key for {spec.model}: set api_key_env in the model spec and export "
                                     "that variable (keys are read from the environment only)") from None
        if isinstance(exc, litellm.APIConnectionError):
            raise NoAnswer(redact(f"{type(exc).__name__}: {exc}")[:500]) from None
        raise _transient(exc, spec) from None
    except (litellm.ServiceUnavailableError, litellm.BadGatewayError) as exc:
        raise _transient(exc, spec) from None
    except (litellm.AuthenticationError, litellm.PermissionDeniedError, litellm.NotFoundError,
            litellm.BadRequestError) as exc:
        raise FatalProviderError(redact(f"{type(exc).__name__}: {exc}")[:500]) from None
    except litellm.APIError as exc:
        status = getattr(exc, "status_code", 0) or 0
        if status >= 500 or status == 0:
            raise _transient(exc, spec) from None
        raise FatalProviderError(redact(f"{status} {type(exc).__name__}: {exc}")[:500]) from None


def unanswered(choice: Any, usage: Any, spec: ModelSpec, cost: Callable[..., float | None]) -> Refused | Truncated | None:
    """A refusal (OpenAI's ``message.refusal``; ``content_filter``, litellm's name for Anthropic's ``refusal`` and
    Gemini's ``SAFETY`` and other blocks) or a truncation (``length``: OpenAI's, Anthropic's ``max_tokens``, Gemini's
    ``MAX_TOKENS``), with what it billed; None for an answer. Neither is ever handed to validation as an answer."""
    refusal = getattr(choice.message, "refusal", None)
    if not refusal and choice.finish_reason not in ("content_filter", "length"):
        return None
    prompt, completion = getattr(usage, "prompt_tokens", None), getattr(usage, "completion_tokens", None)
    cached, written = cache_usage(usage)
    billed = {"prompt_tokens": prompt, "completion_tokens": completion,
              "cost_usd": cost(spec.model, prompt, completion, cached, written)}
    if refusal or choice.finish_reason == "content_filter":
        said = f": {refusal}" if refusal else ""
        return Refused(f"{spec.model} refused to answer (finish_reason {choice.finish_reason}){said}"[:500], billed)
    details = getattr(usage, "completion_tokens_details", None)
    hidden = getattr(details, "reasoning_tokens", None) or 0
    of_which = f", {hidden} of them reasoning" if hidden else ""
    return Truncated(f"{spec.model}: answer cut off at its token budget (finish_reason length after {completion} "
                     f"completion tokens{of_which}); raise this phase's max_tokens in the config", billed)


#: litellm providers that serve a model on the user's own machine: a $0 price in the map is the real one.
LOCAL_PROVIDERS = frozenset({"ollama", "ollama_chat", "lm_studio", "llamafile", "hosted_vllm", "vllm", "local"})


def listed(model: str) -> bool:
    """Whether litellm's cost map has an entry of its own for ``model``: for a name it does not list,
    ``get_model_info`` answers a stand-in with the provider's defaults and every price 0."""
    info = model_info(model)
    return info is not None and info.get("key") in import_litellm().model_cost


def has_price(model: str) -> bool:
    """Whether litellm's cost map prices ``model``: it lists it, with a price other than 0 unless its provider runs on
    the user's machine (a hosted model listed at $0 is an entry without a price, not a free model)."""
    if not listed(model):
        return False
    info = model_info(model) or {}
    prices = [info.get("input_cost_per_token"), info.get("output_cost_per_token")]
    if any(p is None for p in prices):
        return False
    return any(prices) or info.get("litellm_provider") in LOCAL_PROVIDERS


def known_models() -> list[str]:
    """Every chat model litellm's cost map lists, as ``provider/name`` (the form a config writes)."""
    out = set()
    for key, info in import_litellm().model_cost.items():
        provider = info.get("litellm_provider")
        if not provider or info.get("mode") not in (None, "chat", "responses"):
            continue
        out.add(key if key.startswith(provider + "/") else f"{provider}/{key}")
    return sorted(out)


def nearest_models(model: str, n: int = 3) -> list[str]:
    """The ``n`` names in ``known_models`` closest to ``model`` (difflib's ratio), for a name that may be mistyped."""
    return difflib.get_close_matches(model, known_models(), n=n, cutoff=0.6)


def model_info(model: str, api_base: str | None = None) -> dict[str, Any] | None:
    """litellm's model information (context window, output limit, prices, capabilities), None when it has none."""
    litellm = import_litellm()
    try:
        name, provider, _, _ = litellm.get_llm_provider(model, api_base=api_base)
        return dict(litellm.get_model_info(name, custom_llm_provider=provider))
    except (litellm.exceptions.ModelNotMappedError, litellm.BadRequestError):
        return None


#: The temperatures each hosted API accepts, by litellm provider: litellm's model information has no range, and passes
#: an out-of-range value on to be refused by every call. From the providers' API references: Anthropic Messages API
#: ``temperature`` 0.0-1.0 (docs.anthropic.com/en/api/messages), OpenAI Chat Completions 0-2
#: (platform.openai.com/docs/api-reference/chat/create), Gemini ``generationConfig.temperature`` 0.0-2.0
#: (ai.google.dev/api/generate-content#generationconfig). An OpenAI-compatible server (``api_base``) keeps its own.
TEMPERATURE_RANGES = {"anthropic": (0.0, 1.0), "openai": (0.0, 2.0), "gemini": (0.0, 2.0)}


def temperature_problem(spec: ModelSpec, provider: str, temperature: float | None) -> str | None:
    span = TEMPERATURE_RANGES.get(provider)
    if temperature is None or span is None or (provider == "openai" and spec.api_base):
        return None
    low, high = span
    if low <= temperature <= high:
        return None
    return (f"{spec.model}: temperature {temperature:g} is outside the {low:g}..{high:g} its provider ({provider}) "
            "accepts; set temperature (or crit_temperature) in the config within it")


def capability_problems(spec: ModelSpec, model: str, provider: str, temperature: float | None,
                        max_tokens: int | None) -> list[str]:
    """What ``spec``'s model would refuse in every call, from litellm's own knowledge of it: a parameter it does not
    take (``get_supported_openai_params``) or a value it does not (``get_optional_params``: gpt-5's temperature),
    an answer budget above its output limit, a JSON-schema answer from a model without structured output
    (``supports_response_schema``). A model litellm does not know (a self-hosted one) is checked for nothing."""
    litellm = import_litellm()
    problems = []
    supported = litellm.get_supported_openai_params(model=model, custom_llm_provider=provider) or []
    sent = {"temperature": temperature, "max_tokens": max_tokens}
    refused = [name for name, value in sent.items() if value is not None and name not in supported]
    if supported and refused:
        problems.append(f"{spec.model}: does not accept {', '.join(refused)} (litellm.get_supported_openai_params); "
                        "leave it out of the config or choose another model")
    try:
        litellm.utils.get_optional_params(model=model, custom_llm_provider=provider, temperature=temperature,
                                          max_tokens=max_tokens)
    except litellm.UnsupportedParamsError as exc:
        problems.append(f"{spec.model}: {str(exc).split(' To drop')[0].replace('litellm.UnsupportedParamsError: ', '')}")
    out_of_range = temperature_problem(spec, provider, temperature)
    if out_of_range:
        problems.append(out_of_range)
    info = model_info(spec.model, spec.api_base)
    if info is None:
        return problems
    ceiling = info.get("max_output_tokens")
    if max_tokens is not None and ceiling and max_tokens > ceiling:
        problems.append(f"{spec.model}: max_tokens {max_tokens} is above its output limit of {ceiling} tokens "
                        "(litellm model info)")
    if (spec.structured_output or "json_schema") == "json_schema" and not litellm.supports_response_schema(
            model=model, custom_llm_provider=provider):
        problems.append(f"{spec.model}: does not support JSON-schema structured output (litellm.supports_response_schema); "
                        "set structured_output: prompt_only in its model spec (the schema then travels in the prompt)")
    return problems


class LiteLLMProvider:
    is_llm = True
    cacheable = True
    rate_limited = True
    hedgeable = True

    def prepare(self, spec: ModelSpec) -> ModelSpec:
        return spec.model_copy(update={
            "weight_policy": spec.weight_policy or "strict",
            "structured_output": spec.structured_output or "json_schema",
            "schema_scope": spec.schema_scope or "run",  # its schema leads the provider's prompt cache (models.py)
            "merge_system": bool(spec.merge_system),
        })

    def warm(self) -> None:
        import_litellm()

    def waiting_for_peer(self) -> AbstractAsyncContextManager[object]:
        return nullcontext()  # each call is answered on its own

    def preflight(self, spec: ModelSpec, temperature: float | None, max_tokens: int | None) -> list[str]:
        litellm = import_litellm()
        try:  # litellm's own routing decides, as it will for every call (its provider list, not ours)
            model, provider, _, _ = litellm.get_llm_provider(spec.model, api_base=spec.api_base)
        except litellm.BadRequestError:
            head = spec.model.split("/")[0]
            named = f"unknown model provider {head!r}" if "/" in spec.model else "no model provider given"
            return [f"{spec.model}: {named}: litellm cannot route it, so every call would fail; write "
                    "<provider>/<model> with a provider litellm knows (e.g. openai/gpt-4o-mini, anthropic/..., "
                    "openrouter/..., or openai/<name> with api_base for an OpenAI-compatible server), or rules/auto"]
        problems: list[str] = []
        if spec.api_key_env is not None:
            if not remember_env(spec.api_key_env):  # remembered: the driver scrubs it from what it records too
                problems.append(SendOnly(f"{spec.model}: environment variable {spec.api_key_env} (its api_key_env) is "
                                         "not set"))
        elif not spec.api_base:  # a self-hosted endpoint takes no key; a hosted one reads the provider's variable
            missing = litellm.validate_environment(model=spec.model).get("missing_keys") or []
            if missing:
                problems.append(SendOnly(f"{spec.model}: no API key: export {' or '.join(missing)} (or name another "
                                         "variable with api_key_env in the model spec)"))
        if not spec.api_base and provider not in LOCAL_PROVIDERS and not listed(spec.model):
            # litellm's stand-in information for a name it does not list says nothing true about the model
            if spec.price is not None:
                return problems  # declared, with its price, by someone who knows the model: not a typo
            near = nearest_models(spec.model)
            hint = f"nearest known: {', '.join(near)}" if near else "no similar name is known"
            return [SendOnly(f"{spec.model}: unknown model: litellm's model list has no such name ({hint}); correct the "
                             "name, or for a model newer than litellm's list declare its price in its routing profile "
                             "tier (price: {input_usd_per_mtok: …, output_usd_per_mtok: …})"), *problems]
        return problems + capability_problems(spec, model, provider, temperature, max_tokens)

    def context_window(self, spec: ModelSpec) -> int | None:
        """The most input tokens the model takes (``max_input_tokens`` in litellm's model info); None when litellm
        does not know the model (a self-hosted one, say)."""
        info = model_info(spec.model, spec.api_base)
        return (info or {}).get("max_input_tokens") or None

    def count_tokens(self, spec: ModelSpec, text: str) -> int:
        """``litellm.token_counter``: exact for OpenAI's models (tiktoken); for others litellm counts with OpenAI's
        cl100k tokenizer, an estimate (Claude's and Gemini's tokenizers are not available offline)."""
        tokens: int = import_litellm().token_counter(model=spec.model, text=text)
        return tokens

    def endpoint_identity(self, spec: ModelSpec) -> str | None:
        return spec.api_base

    def start(self, spec: ModelSpec) -> None:
        pass  # a hosted API, or a server someone else runs at api_base

    def cost(self, model: str, prompt_tokens: int | None, completion_tokens: int | None, cached_tokens: int | None = None,
             cache_write_tokens: int | None = None, batch: bool = False) -> float | None:
        """From litellm's offline cost map (``token_cost``), with the prompt-cache split priced at its own rates;
        None (unknown, not 0) when the model is not in it."""
        if prompt_tokens is None or completion_tokens is None:
            return None
        return token_cost(model, prompt_tokens, completion_tokens, cached_tokens, cache_write_tokens, batch=batch)

    async def complete(self, request: LLMRequest, spec: ModelSpec, api_key: str | None = None) -> RawResponse:
        litellm = import_litellm()
        kwargs: dict[str, Any] = {
            "model": spec.model,
            "messages": merged_messages(request) if spec.merge_system else [m.model_dump() for m in request.messages],
            "temperature": request.temperature,
            "timeout": spec.retry.timeout_s,
            "num_retries": 0,
            "max_retries": 0,
        }
        for name in ("top_p", "max_tokens", "seed"):
            if getattr(request, name) is not None:
                kwargs[name] = getattr(request, name)
        if needs_cache_breakpoint(spec.model, spec.api_base):
            kwargs["messages"] = with_cache_breakpoint(kwargs["messages"])
        if spec.api_base:
            kwargs["api_base"] = spec.api_base
        key = api_key if api_key is not None else api_key_from_env(spec.api_key_env)
        remember(key)
        if key is not None:
            kwargs["api_key"] = key
        elif spec.api_base:
            # A self-hosted OpenAI-compatible endpoint (vLLM, llama.cpp, madbench's simulator) takes no key, but the
            # client refuses to send without one. An endpoint that does want a key answers 401: fatal, never silent.
            kwargs["api_key"] = "no-key"
        fmt = response_format(request.response_schema, spec.structured_output or "json_schema")
        if fmt is not None:
            kwargs["response_format"] = fmt
        if request.tools:
            kwargs["tools"] = request.tools
        if spec.send_context and request.context is not None:
            kwargs.update(context_field(spec, request.context))
        resp = await sent(litellm, kwargs, spec)
        choice = resp.choices[0]
        content = choice.message.content
        failed = unanswered(choice, getattr(resp, "usage", None), spec, self.cost)
        if failed is not None:
            raise failed
        if content is None:
            raise TransientError(f"empty message (finish_reason={choice.finish_reason})")
        usage = getattr(resp, "usage", None)
        cached, written = cache_usage(usage)
        return RawResponse(
            content=content,
            model_used=spec.model,
            prompt_tokens=getattr(usage, "prompt_tokens", None),
            completion_tokens=getattr(usage, "completion_tokens", None),
            cached_tokens=cached,
            cache_write_tokens=written,
            finish_reason=choice.finish_reason,
            model_served=getattr(resp, "model", None),
            extra={"provider_model": getattr(resp, "model", None)},
        )


