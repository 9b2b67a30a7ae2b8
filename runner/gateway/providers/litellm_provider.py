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
from ..secrets import api_key_from_env, redact
from .base import RawResponse

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
        return {"type": "json_object", "schema": one_each_tuples(nonzero_allocations(ticker_tuples(claim_tuples(bounded_numbers_as_enums(schema)))))}
    return {"type": "json_schema", "json_schema": {"name": schema.get("title", "answer"), "schema": schema, "strict": False}}


def bounded_numbers_as_enums(schema: dict[str, Any], steps: int = 20) -> dict[str, Any]:
    """Bounded numbers (minimum and maximum within 2 of each other, e.g. a weight or a confidence) as an enum
    of evenly spaced values, and small bounded integer scales as the enum of their values. llama.cpp's grammar ignores numeric bounds, so a small model can write a
    confidence of 3.5 and fail validation; an enum it cannot leave. Validation is unchanged."""
    import copy

    def walk(node):
        if isinstance(node, dict):
            lo, hi = node.get("minimum", node.get("exclusiveMinimum")), node.get("maximum", node.get("exclusiveMaximum"))
            if node.get("type") == "integer" and node.get("minimum") is not None and node.get("maximum") is not None \
                    and 0 < node["maximum"] - node["minimum"] <= 20:  # a small integer scale, e.g. a 1–5 risk score
                rest = {k: v for k, v in node.items() if k not in ("type", "minimum", "maximum")}
                return rest | {"enum": list(range(int(node["minimum"]), int(node["maximum"]) + 1))}
            if node.get("type") == "number" and lo is not None and hi is not None and 0 < hi - lo <= 2:
                values = [round(lo + (hi - lo) * k / steps, 6) for k in range(steps + 1)]
                values = [v for v in values if ("exclusiveMinimum" not in node or v > lo) and ("exclusiveMaximum" not in node or v < hi)]
                return {k: v for k, v in node.items() if k not in ("type", "minimum", "maximum", "exclusiveMinimum",
                                                                    "exclusiveMaximum")} | {"enum": values}
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node
    return walk(copy.deepcopy(schema))


#: Per-ticker lists: the answer must hold exactly one entry per ticker of the universe.
PER_TICKER_LISTS = ("allocation", "signals", "views", "position_rationale")


def ticker_tuples(schema: dict[str, Any]) -> dict[str, Any]:
    """A per-ticker list whose item type names the universe as a ticker enum becomes a tuple with one entry per
    ticker, in universe order (``prefixItems`` with ``const`` tickers). llama.cpp then cannot repeat or skip a
    ticker, which a small model otherwise does; the validated answer is the same shape as before."""
    import copy
    schema = copy.deepcopy(schema)
    defs = schema.get("$defs", {})

    def tuple_for(prop: dict[str, Any]) -> dict[str, Any] | None:
        ref = (prop.get("items") or {}).get("$ref", "")
        item = defs.get(ref.rsplit("/", 1)[-1]) if ref.startswith("#/$defs/") else None
        tickers = (((item or {}).get("properties") or {}).get("ticker") or {}).get("enum")
        if not tickers:
            return None
        entries = [{**item, "properties": {**item["properties"], "ticker": {"const": t}}} for t in tickers]
        return {"type": "array", "prefixItems": entries, "minItems": len(tickers), "maxItems": len(tickers)}

    for node in [schema, *defs.values()]:
        for name, prop in (node.get("properties") or {}).items():
            if name in PER_TICKER_LISTS and isinstance(prop, dict) and prop.get("type") == "array":
                replaced = tuple_for(prop)
                if replaced is not None:
                    node["properties"][name] = replaced
    return schema


#: Weight grid for allocations written under a grammar (5% steps; the normalize policy rescales).
WEIGHT_GRID = [round(0.05 * k, 2) for k in range(21)]


def nonzero_allocations(schema: dict[str, Any]) -> dict[str, Any]:
    """An allocation tuple (see ``ticker_tuples``) becomes one with weights on a 5% grid and at least one weight
    above 0: the union, over k, of "the first k weights are 0 and weight k is positive". A small model otherwise
    answers an all-zero book again and again, which no policy can repair. Every answer it allows is valid under
    the original schema (an all-cash answer is the one it rules out)."""
    import copy
    schema = copy.deepcopy(schema)
    for node in [schema, *schema.get("$defs", {}).values()]:
        book = (node.get("properties") or {}).get("allocation")
        entries = (book or {}).get("prefixItems") if isinstance(book, dict) else None
        if not entries or not all("weight" in (e.get("properties") or {}) for e in entries):
            continue

        def entry(e, weight):
            return {**e, "properties": {**e["properties"], "weight": weight}}
        zero, positive, any_ = {"const": 0}, {"enum": WEIGHT_GRID[1:]}, {"enum": WEIGHT_GRID}
        node["properties"]["allocation"] = {"anyOf": [
            {"type": "array", "minItems": len(entries), "maxItems": len(entries), "prefixItems": [
                entry(e, zero if i < k else positive if i == k else any_) for i, e in enumerate(entries)]}
            for k in range(len(entries))]}
    return schema


#: Claims a grammar-constrained local model writes per answer, with the fixed ids C1..Ck.
LOCAL_CLAIMS = 2


def claim_tuples(schema: dict[str, Any], k: int = LOCAL_CLAIMS) -> dict[str, Any]:
    """A list of claims becomes a tuple of ``k`` claims with the ids C1..Ck, and every list of claim ids an enum
    of those. A small model otherwise repeats an id (C23 twice) or writes claims until its budget runs out; any
    valid answer under this grammar is valid under the original schema, and validation is unchanged."""
    import copy
    schema = copy.deepcopy(schema)
    defs = schema.get("$defs", {})
    ids = [f"C{i}" for i in range(1, k + 1)]
    for node in [schema, *defs.values()]:
        props = node.get("properties") or {}
        claims = props.get("claims")
        if isinstance(claims, dict) and claims.get("type") == "array":
            ref = (claims.get("items") or {}).get("$ref", "")
            item = defs.get(ref.rsplit("/", 1)[-1]) if ref.startswith("#/$defs/") else None
            if item is not None and "claim_id" in item.get("properties", {}):
                props["claims"] = {"type": "array", "minItems": k, "maxItems": k, "prefixItems": [
                    {**item, "properties": {**item["properties"], "claim_id": {"const": c}}} for c in ids]}
        if isinstance(props.get("supporting_claims"), dict):
            props["supporting_claims"] = {**props["supporting_claims"], "items": {"type": "string", "enum": ids}}
    return schema


#: Lists whose items are alternatives that must each be answered once (a critique per peer, a response per
#: critique received; see ``debate.validation.request_schema``).
ONE_EACH_LISTS = ("critiques", "critique_responses")


def one_each_tuples(schema: dict[str, Any]) -> dict[str, Any]:
    """A one-each list (items ``anyOf`` its alternatives) becomes a tuple with every alternative once, in order."""
    import copy
    schema = copy.deepcopy(schema)
    for node in [schema, *schema.get("$defs", {}).values()]:
        for name, prop in (node.get("properties") or {}).items():
            alternatives = ((prop or {}).get("items") or {}).get("anyOf") if isinstance(prop, dict) else None
            if name in ONE_EACH_LISTS and alternatives:
                node["properties"][name] = {"type": "array", "prefixItems": alternatives,
                                            "minItems": len(alternatives), "maxItems": len(alternatives)}
    return schema


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


