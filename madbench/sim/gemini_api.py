"""A double of the Gemini API's ``generateContent`` (``POST /v1beta/models/{model}:generateContent``), as documented
at ai.google.dev.

* Auth: ``x-goog-api-key`` or ``?key=`` (403 ``PERMISSION_DENIED`` without one; 400 ``INVALID_ARGUMENT`` for a
  wrong one).
* Request: ``contents`` required; fields and ``generationConfig`` keys outside the API's own (camelCase or
  snake_case, as protobuf JSON reads both) are a 400 ``Unknown name "...": Cannot find field.``. A
  ``responseSchema`` must keep to the OpenAPI subset Gemini accepts (no ``additionalProperties``, ``$ref``,
  ``const``...); ``responseJsonSchema`` takes JSON Schema; either needs ``responseMimeType: application/json``.
* Response: ``candidates[0].content.parts[].text`` with ``finishReason`` ``STOP`` | ``MAX_TOKENS`` | ``SAFETY``,
  and ``usageMetadata`` (``promptTokenCount``, ``candidatesTokenCount``, ``thoughtsTokenCount``: thinking tokens,
  billed as output, never returned).
* Faults: ``rate_limited`` is 429 ``RESOURCE_EXHAUSTED`` with a ``RetryInfo`` ``retryDelay`` (Gemini sends no
  Retry-After header); ``overloaded`` is 503 ``UNAVAILABLE``; ``server_error`` is 500 ``INTERNAL``; ``truncated``
  stops at ``MAX_TOKENS``; ``refusal`` is a safety block (``finishReason: SAFETY``, no content); ``prompt_blocked``
  is ``promptFeedback.blockReason: SAFETY`` with no candidate at all.
"""

from __future__ import annotations

import re
import time
from typing import Any

from madbench.sim.api_double import ApiDouble, Billed, Request, WireError, cut, tokens

PATH = re.compile(r"^/v1beta/models/(?P<model>[A-Za-z0-9._-]+):generateContent$")


def _both(*names: str) -> frozenset[str]:
    """Each camelCase name and its snake_case spelling."""
    return frozenset(names) | {re.sub(r"(?<!^)([A-Z])", r"_\1", n).lower() for n in names}


FIELDS = _both("contents", "systemInstruction", "generationConfig", "safetySettings", "tools", "toolConfig",
               "cachedContent", "labels")
CONFIG_FIELDS = _both("temperature", "topP", "topK", "candidateCount", "maxOutputTokens", "stopSequences",
                      "responseMimeType", "responseSchema", "responseJsonSchema", "presencePenalty", "frequencyPenalty",
                      "seed", "responseLogprobs", "logprobs", "thinkingConfig", "responseModalities", "mediaResolution")
#: The OpenAPI 3.0 subset a ``responseSchema`` may use.
SCHEMA_FIELDS = _both("type", "format", "title", "description", "nullable", "enum", "maxItems", "minItems",
                      "properties", "required", "minProperties", "maxProperties", "minLength", "maxLength", "pattern",
                      "example", "anyOf", "propertyOrdering", "default", "items", "minimum", "maximum")
SAFETY = [{"category": c, "probability": "NEGLIGIBLE"} for c in
          ("HARM_CATEGORY_HATE_SPEECH", "HARM_CATEGORY_HARASSMENT", "HARM_CATEGORY_SEXUALLY_EXPLICIT")]
BLOCKED = [*SAFETY, {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": True}]


def error(code: int, status: str, message: str, details: list[dict] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": status, **({"details": details} if details else {})}}


def unknown_name(name: str, where: str) -> WireError:
    return WireError(400, error(400, "INVALID_ARGUMENT", f'Invalid JSON payload received. Unknown name "{name}" at '
                                                         f"'{where}': Cannot find field."))


def schema_problem(schema: Any, where: str) -> WireError | None:
    """The first keyword of ``schema`` outside the subset ``responseSchema`` accepts, as the API reports it."""
    if not isinstance(schema, dict):
        return None
    for key, value in schema.items():
        if key not in SCHEMA_FIELDS:
            return unknown_name(key, where)
        nested = (value.items() if key == "properties" else [("items", value)] if key == "items"
                  else [(f"anyOf[{i}]", v) for i, v in enumerate(value)] if key in ("anyOf", "any_of") else [])
        for name, sub in nested:
            problem = schema_problem(sub, f"{where}.{name}")
            if problem is not None:
                return problem
    return None


def _get(table: dict[str, Any], camel: str) -> Any:
    snake = re.sub(r"(?<!^)([A-Z])", r"_\1", camel).lower()
    return table.get(camel, table.get(snake))


class GeminiDouble(ApiDouble):
    api = "gemini"
    prefix = "/v1beta"  # litellm posts to {api_base}/models/{model}:generateContent
    extra_faults = ("prompt_blocked",)

    def invalid(self, message: str) -> WireError:
        return WireError(400, error(400, "INVALID_ARGUMENT", message))

    def authorize(self, req: Request) -> None:
        key = req.headers.get("x-goog-api-key") or req.query.get("key")
        if not key:
            raise WireError(403, error(403, "PERMISSION_DENIED", "Method doesn't allow unregistered callers (callers "
                                       "without established identity). Please use API Key or other form of API "
                                       "consumer identity to call this API."))
        if self.key is not None and key != self.key:
            raise WireError(400, error(400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.",
                                       [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID",
                                         "domain": "googleapis.com"}]))

    def check(self, req: Request) -> str:
        match = PATH.match(req.path)
        if match is None:
            raise WireError(404, error(404, "NOT_FOUND", f"{req.path} is not a generateContent path"))
        for name in req.body:
            if name not in FIELDS:
                raise unknown_name(name, "")
        if not req.body.get("contents"):
            raise self.invalid("* GenerateContentRequest.contents: contents is not specified")
        config = _get(req.body, "generationConfig") or {}
        for name in config:
            if name not in CONFIG_FIELDS:
                raise unknown_name(name, "generation_config")
        if not 0 <= (_get(config, "temperature") or 0) <= 2:
            raise self.invalid("* GenerateContentRequest.generation_config.temperature: must be in [0.0, 2.0]")
        schema, json_schema = _get(config, "responseSchema"), _get(config, "responseJsonSchema")
        if schema is not None and json_schema is not None:
            raise self.invalid("response_schema and response_json_schema cannot both be set")
        if (schema or json_schema) is not None and _get(config, "responseMimeType") != "application/json":
            raise self.invalid("* GenerateContentRequest.generation_config.response_mime_type: a response schema "
                               "needs response_mime_type application/json")
        problem = schema_problem(schema, "generation_config.response_schema")
        if problem is not None:
            raise problem
        return match["model"]

    def respond(self, req: Request, model: str, text: str, fault: str | None) -> tuple[dict[str, Any], Billed]:
        prompt = self.prompt_tokens(req)
        usage: dict[str, Any] = {"promptTokenCount": prompt, "totalTokenCount": prompt,
                                 "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}]}
        head = {"modelVersion": model, "responseId": f"{time.time_ns():x}"}
        if fault == "prompt_blocked":
            return ({"promptFeedback": {"blockReason": "SAFETY", "safetyRatings": BLOCKED}, "usageMetadata": usage, **head},
                    Billed(model, prompt, 0, 0, "blockReason SAFETY", req.context is not None))
        if fault == "refusal":
            return ({"candidates": [{"finishReason": "SAFETY", "index": 0, "safetyRatings": BLOCKED}],
                     "usageMetadata": usage, **head}, Billed(model, prompt, 0, 0, "SAFETY", req.context is not None))
        budget = _get(_get(req.body, "generationConfig") or {}, "maxOutputTokens")
        thoughts = self.hidden_tokens if budget is None else min(self.hidden_tokens, budget)  # thinking spends it first
        finish = "STOP"
        if fault == "truncated" or (budget is not None and thoughts + tokens(text) > budget):
            room = budget - thoughts if budget is not None and thoughts + tokens(text) > budget else tokens(text) // 2
            finish, text = "MAX_TOKENS", cut(text, room)
        shown = tokens(text) if text else 0
        usage.update(candidatesTokenCount=shown, totalTokenCount=prompt + shown + thoughts,
                     **({"thoughtsTokenCount": thoughts} if thoughts else {}))
        candidate = {"content": {"parts": [{"text": text}] if text else [], "role": "model"}, "finishReason": finish,
                     "index": 0, "safetyRatings": SAFETY}
        return ({"candidates": [candidate], "usageMetadata": usage, **head},
                Billed(model, prompt, shown + thoughts, thoughts, finish, req.context is not None))

    def fault_error(self, fault: str, model: str) -> WireError:
        if fault == "rate_limited":
            return WireError(429, error(429, "RESOURCE_EXHAUSTED", f"You exceeded your current quota, please check your "
                                        f"plan and billing details. Please retry in {self.retry_after_s:g}s.", [
                {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [
                    {"quotaMetric": "generativelanguage.googleapis.com/generate_content_requests",
                     "quotaId": "GenerateRequestsPerMinutePerProjectPerModel", "quotaValue": str(self.rpm)}]},
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": f"{self.retry_after_s:g}s"}]))
        if fault == "overloaded":
            return WireError(503, error(503, "UNAVAILABLE", "The model is overloaded. Please try again later."))
        return WireError(500, error(500, "INTERNAL", "An internal error has occurred. Please retry or report in "
                                                     "https://developers.generativeai.google/guide/troubleshooting"))

    @staticmethod
    def ids() -> dict[str, str]:
        return {"x-goog-request-id": f"{time.time_ns():x}"}
