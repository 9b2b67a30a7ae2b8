"""Every hosted or OpenAI-compatible model, through litellm.

litellm's and the OpenAI SDK's own retries are switched off so that every 429
reaches our limiter and every retry is recorded by the gateway.
"""

from __future__ import annotations

import email.utils
import os
import time
from typing import Any

from ..errors import FatalProviderError, RateLimited, TransientError
from ..models import ModelSpec
from ..request import LLMRequest
from ..secrets import api_key_from_env, redact, remember, remember_env
from .base import RawResponse
from .llama_schema import llama_cpp_schema

_litellm = None


def import_litellm():
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


def _retry_after(exc: Exception) -> float | None:
    for headers in (getattr(exc, "litellm_response_headers", None), getattr(getattr(exc, "response", None), "headers", None),
                    getattr(exc, "headers", None)):
        if headers:
            value = headers.get("retry-after") or headers.get("Retry-After")
            if value is not None:
                return parse_retry_after(str(value))
    return None


class LiteLLMProvider:
    is_llm = True
    cacheable = True
    rate_limited = True

    def prepare(self, spec: ModelSpec) -> ModelSpec:
        return spec.model_copy(update={
            "weight_policy": spec.weight_policy or "strict",
            "structured_output": spec.structured_output or "json_schema",
            "merge_system": bool(spec.merge_system),
        })

    def warm(self) -> None:
        import_litellm()

    def preflight(self, spec: ModelSpec, temperature: float | None, max_tokens: int | None) -> list[str]:
        litellm = import_litellm()
        problems = []
        if spec.api_key_env is not None:
            if not remember_env(spec.api_key_env):  # remembered: the driver scrubs it from what it records too
                problems.append(f"{spec.model}: environment variable {spec.api_key_env} (its api_key_env) is not set")
        elif not spec.api_base:  # a self-hosted endpoint takes no key; a hosted one reads the provider's variable
            missing = litellm.validate_environment(model=spec.model).get("missing_keys") or []
            if missing:
                problems.append(f"{spec.model}: no API key: export {' or '.join(missing)} (or name another variable "
                                "with api_key_env in the model spec)")
        try:
            model, provider, _, _ = litellm.get_llm_provider(spec.model)
            litellm.utils.get_optional_params(model=model, custom_llm_provider=provider, temperature=temperature,
                                              max_tokens=max_tokens)
        except litellm.UnsupportedParamsError as exc:
            problems.append(f"{spec.model}: {str(exc).split(' To drop')[0].replace('litellm.UnsupportedParamsError: ', '')}")
        except litellm.BadRequestError as exc:  # litellm cannot tell the provider: every call would fail the same way
            problems.append(f"{spec.model}: {str(exc).splitlines()[0][:300]}")
        return problems

    def endpoint_identity(self, spec: ModelSpec) -> str | None:
        return spec.api_base

    def cost(self, model: str, prompt_tokens: int | None, completion_tokens: int | None) -> float | None:
        """From litellm's offline cost map; None (unknown, not 0) when the model is not in it."""
        if prompt_tokens is None or completion_tokens is None:
            return None
        litellm = import_litellm()
        try:
            p, c = litellm.cost_per_token(model=model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)
        except litellm.exceptions.ModelNotMappedError:
            return None
        return float(p + c)

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
            kwargs["extra_body"] = {"madbench_context": request.context}
        try:
            resp = await litellm.acompletion(**kwargs)
        except litellm.RateLimitError as exc:
            raise RateLimited(redact(f"429 rate limited: {exc}")[:500], _retry_after(exc)) from None
        except litellm.Timeout:
            raise TransientError(f"timeout after {spec.retry.timeout_s:g} s") from None
        except (litellm.InternalServerError, litellm.APIConnectionError) as exc:
            if "Missing credentials" in str(exc) or "api_key client option must be set" in str(exc):
                # litellm reports a missing key as a 500; retrying cannot help.
                raise FatalProviderError(f"no API key for {spec.model}: set api_key_env in the model spec and export "
                                         "that variable (keys are read from the environment only)") from None
            raise TransientError(redact(f"{getattr(exc, 'status_code', '')} {type(exc).__name__}: {exc}").strip()[:500]) from None
        except (litellm.ServiceUnavailableError, litellm.BadGatewayError) as exc:
            raise TransientError(redact(f"{getattr(exc, 'status_code', '')} {type(exc).__name__}: {exc}").strip()[:500]) from None
        except (litellm.AuthenticationError, litellm.PermissionDeniedError, litellm.NotFoundError,
                litellm.BadRequestError) as exc:
            raise FatalProviderError(redact(f"{type(exc).__name__}: {exc}")[:500]) from None
        except litellm.APIError as exc:
            status = getattr(exc, "status_code", 0) or 0
            cls = TransientError if status >= 500 or status == 0 else FatalProviderError
            raise cls(redact(f"{status} {type(exc).__name__}: {exc}")[:500]) from None
        choice = resp.choices[0]
        content = choice.message.content
        if content is None:
            raise TransientError(f"empty message (finish_reason={choice.finish_reason})")
        usage = getattr(resp, "usage", None)
        return RawResponse(
            content=content,
            model_used=spec.model,
            prompt_tokens=getattr(usage, "prompt_tokens", None),
            completion_tokens=getattr(usage, "completion_tokens", None),
            finish_reason=choice.finish_reason,
            extra={"provider_model": getattr(resp, "model", None)},
        )


