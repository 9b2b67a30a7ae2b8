"""A double of OpenAI's Chat Completions API (``POST /v1/chat/completions``), as documented at platform.openai.com,
reasoning models (gpt-5, o1, o3, o4) included.

* Auth: ``Authorization: Bearer <key>`` (401 without one, or with a wrong one).
* Request: ``model`` and ``messages`` required; an argument the API does not define is a 400 ("Unrecognized request
  argument supplied"). Reasoning models refuse ``max_tokens`` (``max_completion_tokens`` instead), any
  ``temperature`` or ``top_p`` but 1, penalties and logprobs, each with OpenAI's 400 naming the parameter.
* Response: ``chat.completion`` with ``finish_reason`` ``stop`` | ``length``, a refusal as ``message.refusal``
  with ``content: null``, and ``usage`` whose ``completion_tokens`` include the reasoning tokens
  (``completion_tokens_details.reasoning_tokens``): billed, counted against ``max_completion_tokens``, never
  returned. An answer whose reasoning leaves no room ends ``length`` with empty content, as gpt-5 does.
* Faults: ``rate_limited`` is 429 ``rate_limit_exceeded`` with ``retry-after`` and ``x-ratelimit-*``;
  ``overloaded`` is 503 ``server_error``; ``server_error`` is 500; ``truncated`` ends ``length``; ``refusal``
  sets ``message.refusal``.
"""

from __future__ import annotations

import time
from typing import Any

from madbench.sim.api_double import ApiDouble, Billed, Request, WireError, cut, tokens

FIELDS = frozenset({"model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "n", "stream",
                    "stream_options", "stop", "presence_penalty", "frequency_penalty", "logit_bias", "logprobs",
                    "top_logprobs", "user", "seed", "tools", "tool_choice", "parallel_tool_calls", "response_format",
                    "reasoning_effort", "verbosity", "service_tier", "store", "metadata", "prediction", "modalities",
                    "audio", "prompt_cache_key", "safety_identifier", "web_search_options"})
REASONING_PREFIXES = ("gpt-5", "o1", "o3", "o4")
#: What a reasoning model refuses outright (and the value it alone accepts for the rest).
REFUSED = ("max_tokens", "presence_penalty", "frequency_penalty", "logprobs", "top_logprobs", "logit_bias")
ONLY_ONE = ("temperature", "top_p")


def error(message: str, kind: str = "invalid_request_error", param: str | None = None,
          code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def is_reasoning(model: str) -> bool:
    return model.startswith(REASONING_PREFIXES)


class OpenAIDouble(ApiDouble):
    api = "openai"
    prefix = "/v1"

    def invalid(self, message: str) -> WireError:
        return WireError(400, error(message))

    def authorize(self, req: Request) -> None:
        auth = req.headers.get("authorization", "")
        if not auth.startswith("Bearer ") or not auth[7:].strip():
            raise WireError(401, error("You didn't provide an API key. You need to provide your API key in an "
                                       "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."))
        if self.key is not None and auth[7:] != self.key:
            raise WireError(401, error("Incorrect API key provided.", code="invalid_api_key"))

    def check(self, req: Request) -> str:
        if req.path != "/v1/chat/completions":
            raise WireError(404, error(f"Invalid URL (POST {req.path})"))
        body = req.body
        extra = sorted(set(body) - FIELDS)
        if extra:
            raise self.invalid(f"Unrecognized request argument supplied: {extra[0]}")
        if not body.get("model") or not body.get("messages"):
            raise self.invalid("you must provide a model parameter and a non-empty messages list")
        if body.get("stream"):
            raise self.invalid("stream: this double answers whole completions only")
        model = body["model"]
        if is_reasoning(model):
            for name in REFUSED:
                if name in body:
                    hint = " Use 'max_completion_tokens' instead." if name == "max_tokens" else ""
                    raise WireError(400, error(f"Unsupported parameter: '{name}' is not supported with this model.{hint}",
                                               param=name, code="unsupported_parameter"))
            for name in ONLY_ONE:
                if body.get(name, 1) != 1:
                    raise WireError(400, error(f"Unsupported value: '{name}' does not support {body[name]} with this "
                                               "model. Only the default (1) value is supported.", param=name,
                                               code="unsupported_value"))
        return model

    def respond(self, req: Request, model: str, text: str, fault: str | None) -> tuple[dict[str, Any], Billed]:
        budget = req.body.get("max_completion_tokens", req.body.get("max_tokens"))
        reasoning = self.hidden_tokens if is_reasoning(model) else 0
        reasoning = reasoning if budget is None else min(reasoning, budget)  # reasoning spends the budget first
        finish, message = "stop", {"role": "assistant", "content": text, "refusal": None}
        if fault == "refusal":
            message.update(content=None, refusal="I'm sorry, but I can't assist with that request.")
        elif fault == "truncated" or (budget is not None and reasoning + tokens(text) > budget):
            room = budget - reasoning if budget is not None and reasoning + tokens(text) > budget else tokens(text) // 2
            finish, message["content"] = "length", cut(text, room)
        shown = message["content"] or message["refusal"] or ""
        out = (tokens(shown) if shown else 0) + reasoning
        prompt = self.prompt_tokens(req)
        payload = {"id": f"chatcmpl-{time.time_ns():x}", "object": "chat.completion", "created": int(time.time()),
                   "model": model, "system_fingerprint": "fp_madbench",
                   "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
                   "usage": {"prompt_tokens": prompt, "completion_tokens": out, "total_tokens": prompt + out,
                             "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
                             "completion_tokens_details": {"reasoning_tokens": reasoning, "audio_tokens": 0,
                                                           "accepted_prediction_tokens": 0,
                                                           "rejected_prediction_tokens": 0}}}
        return payload, Billed(model, prompt, out, reasoning, finish, req.context is not None)

    def fault_error(self, fault: str, model: str) -> WireError:
        if fault == "rate_limited":
            return WireError(429, error(f"Rate limit reached for {model} on requests per min (RPM): Limit {self.rpm}, "
                                        f"Used {self.rpm}, Requested 1. Please try again in {self.retry_after_s:g}s.",
                                        kind="requests", code="rate_limit_exceeded"),
                             {"retry-after": f"{self.retry_after_s:g}", **self.rate_headers(),
                              "x-ratelimit-remaining-requests": "0"})
        if fault == "overloaded":
            return WireError(503, error("The server is overloaded or not ready yet.", kind="server_error"))
        return WireError(500, error("The server had an error while processing your request. Sorry about that!",
                                    kind="server_error"))

    def rate_headers(self) -> dict[str, str]:
        return {"x-ratelimit-limit-requests": str(self.rpm),
                "x-ratelimit-remaining-requests": str(self.remaining_requests()),
                "x-ratelimit-reset-requests": "60s", "x-ratelimit-limit-tokens": str(self.tpm),
                "x-ratelimit-remaining-tokens": str(self.tpm), "x-ratelimit-reset-tokens": "0s"}

    @staticmethod
    def ids() -> dict[str, str]:
        return {"x-request-id": f"req_{time.time_ns():x}"}
