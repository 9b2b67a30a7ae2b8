"""A double of Anthropic's Messages API (``POST /v1/messages``), as documented at docs.anthropic.com.

* Auth: ``x-api-key`` (401 ``authentication_error`` without it) and ``anthropic-version`` (400 without it).
* Request: ``model``, ``max_tokens`` and ``messages`` required; ``temperature`` within 0..1; any field the API
  does not define is a 400 ``invalid_request_error`` ("Extra inputs are not permitted"). Structured output comes
  either as ``output_format: {type: json_schema, schema}`` (models with native structured output, under the
  ``anthropic-beta: structured-outputs-2025-11-13`` header) or as a forced tool call (``tool_choice: {type: tool,
  name}``; litellm's ``json_tool_call``), answered with a ``tool_use`` block whose ``input`` is the answer.
* Response: a ``message`` with ``content`` blocks, ``stop_reason`` ``end_turn`` | ``tool_use`` | ``max_tokens`` |
  ``refusal``, and ``usage.input_tokens`` / ``usage.output_tokens``; ``anthropic-ratelimit-*`` headers.
* Faults: ``overloaded`` is 529 ``overloaded_error`` with ``retry-after``; ``rate_limited`` is 429
  ``rate_limit_error`` with ``retry-after``; ``server_error`` is 500 ``api_error``; ``truncated`` stops at
  ``max_tokens`` (a forced tool call then carries an empty ``input``); ``refusal`` is ``stop_reason: refusal``.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from madbench.sim.api_double import ApiDouble, Billed, Request, WireError, cut, tokens

FIELDS = frozenset({"model", "messages", "max_tokens", "system", "temperature", "top_p", "top_k", "stop_sequences",
                    "stream", "metadata", "tools", "tool_choice", "thinking", "output_format", "service_tier",
                    "container", "mcp_servers", "context_management"})

#: The beta that ``output_format`` (native structured output) belongs to.
STRUCTURED_BETA = "structured-outputs-2025-11-13"


def error(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}, "request_id": f"req_{time.time_ns():x}"}


def _forced_tool(body: dict[str, Any]) -> str | None:
    choice = body.get("tool_choice") or {}
    return choice.get("name") if choice.get("type") == "tool" else None


class AnthropicDouble(ApiDouble):
    api = "anthropic"
    prefix = ""  # litellm posts to {api_base}/v1/messages

    def invalid(self, message: str) -> WireError:
        return WireError(400, error("invalid_request_error", message))

    def authorize(self, req: Request) -> None:
        key = req.headers.get("x-api-key")
        if not key:
            raise WireError(401, error("authentication_error", "x-api-key header is required"))
        if self.key is not None and key != self.key:
            raise WireError(401, error("authentication_error", "invalid x-api-key"))
        if not req.headers.get("anthropic-version"):
            raise self.invalid("anthropic-version: header is required")

    def check(self, req: Request) -> str:
        if req.path != "/v1/messages":
            raise WireError(404, error("not_found_error", f"Not Found: {req.path}"))
        body = req.body
        extra = sorted(set(body) - FIELDS)
        if extra:
            raise self.invalid(f"{extra[0]}: Extra inputs are not permitted")
        for name in ("model", "max_tokens", "messages"):
            if name not in body:
                raise self.invalid(f"{name}: Field required")
        if not isinstance(body["max_tokens"], int) or body["max_tokens"] < 1:
            raise self.invalid("max_tokens: Input should be a valid integer greater than or equal to 1")
        if not body["messages"] or any(m.get("role") not in ("user", "assistant") for m in body["messages"]):
            raise self.invalid("messages: at least one message, each with role user or assistant, is required")
        if not 0 <= body.get("temperature", 1) <= 1:
            raise self.invalid("temperature: Input should be less than or equal to 1")
        if body.get("stream"):
            raise self.invalid("stream: this double answers whole messages only")
        forced = _forced_tool(body)
        if forced is not None and forced not in {t.get("name") for t in body.get("tools") or []}:
            raise self.invalid(f"tool_choice: tool {forced!r} is not among the tools given")
        fmt = body.get("output_format")
        if fmt is not None and STRUCTURED_BETA not in req.headers.get("anthropic-beta", ""):
            raise self.invalid("output_format: Extra inputs are not permitted (structured outputs need the "
                               f"anthropic-beta: {STRUCTURED_BETA} header)")
        if fmt is not None and (fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict)):
            raise self.invalid("output_format: expected {type: json_schema, schema: {...}}")
        return body["model"]

    def respond(self, req: Request, model: str, text: str, fault: str | None) -> tuple[dict[str, Any], Billed]:
        budget = req.body["max_tokens"]
        tool = _forced_tool(req.body)
        stop = "tool_use" if tool else "end_turn"
        if fault == "truncated" or tokens(text) > budget:  # over budget: cut at it; scripted: cut halfway
            stop, text = "max_tokens", cut(text, budget if tokens(text) > budget else tokens(text) // 2)
        if fault == "refusal":
            stop, text = "refusal", ""
        if tool and stop != "refusal":  # a cut-off tool call carries no usable input
            content = [{"type": "tool_use", "id": f"toolu_{time.time_ns():x}", "name": tool,
                        "input": json.loads(text) if stop == "tool_use" else {}}]
        else:
            content = [{"type": "text", "text": text}] if text else []
        out = tokens(text) if text else 1
        payload = {"id": f"msg_{time.time_ns():x}", "type": "message", "role": "assistant", "model": model,
                   "content": content, "stop_reason": stop, "stop_sequence": None,
                   "usage": {"input_tokens": self.prompt_tokens(req), "output_tokens": out,
                             "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}
        return payload, Billed(model, self.prompt_tokens(req), out, 0, stop, req.context is not None)

    def fault_error(self, fault: str, model: str) -> WireError:
        wait = {"retry-after": f"{self.retry_after_s:g}"}
        if fault == "overloaded":
            return WireError(529, error("overloaded_error", "Overloaded"), wait)
        if fault == "rate_limited":
            return WireError(429, error("rate_limit_error", f"This request would exceed the rate limit for your "
                                        f"organization of {self.rpm} requests per minute."),
                             {**wait, **self.rate_headers(), "anthropic-ratelimit-requests-remaining": "0"})
        return WireError(500, error("api_error", "Internal server error"))

    def rate_headers(self) -> dict[str, str]:
        reset = (datetime.now(UTC) + timedelta(seconds=60)).strftime("%Y-%m-%dT%H:%M:%SZ")
        return {"anthropic-ratelimit-requests-limit": str(self.rpm),
                "anthropic-ratelimit-requests-remaining": str(self.remaining_requests()),
                "anthropic-ratelimit-requests-reset": reset,
                "anthropic-ratelimit-tokens-limit": str(self.tpm),
                "anthropic-ratelimit-tokens-remaining": str(self.tpm),
                "anthropic-ratelimit-tokens-reset": reset}
