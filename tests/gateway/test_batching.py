"""Provider batch mode's gateway side: the lines it sends, the prices it charges, and how result lines read."""

import json

import pytest

from madbench.gateway import LLMRequest, Message, ModelSpec
from madbench.gateway.errors import FatalProviderError, RateLimited, TransientError, Truncated
from madbench.gateway.providers.batching import (
    BatchingProvider,
    batch_body,
    batch_group,
    batch_pricing,
    parse_lines,
    raw_response,
)
from madbench.gateway.providers.litellm_provider import LiteLLMProvider


def test_a_batch_line_is_the_body_litellm_would_send_with_the_models_own_parameter_names():
    spec = ModelSpec(model="openai/gpt-5-mini", send_context=True)
    request = LLMRequest(model=spec.model, messages=[Message(role="user", content="hi")], temperature=1, max_tokens=500,
                         seed=3, response_schema={"title": "T", "type": "object"}, context={"role": "macro"})
    group = batch_group(spec)
    assert group == {"provider": "openai", "model": "gpt-5-mini", "api_base": None, "api_key_env": None}
    body = batch_body(request, spec, group)
    assert body["model"] == "gpt-5-mini" and body["messages"] == [{"role": "user", "content": "hi"}]
    assert body["max_completion_tokens"] == 500 and "max_tokens" not in body  # gpt-5 takes max_completion_tokens
    assert body["seed"] == 3 and body["response_format"]["type"] == "json_schema" and "stream" not in body
    assert body["madbench_context"] == {"role": "macro"}  # as extra_body: only the simulator reads it
    plain = batch_body(request, spec.model_copy(update={"send_context": False}), group)
    assert "madbench_context" not in plain


def test_batch_calls_are_priced_at_litellms_batch_prices_or_half_the_sync_price_and_say_which():
    sync = LiteLLMProvider()
    batching = BatchingProvider(sync, collector=None)
    mini = batch_pricing("openai/gpt-5-mini")
    assert mini["source"].startswith("litellm batch prices")
    assert batching.cost("openai/gpt-5-mini", 10_000, 1_000) == pytest.approx(10_000 * 1.25e-7 + 1_000 * 1e-6)
    assert batching.cost("openai/gpt-5-mini", 10_000, 1_000) == pytest.approx(sync.cost("openai/gpt-5-mini", 10_000, 1_000) / 2)
    old = batch_pricing("gpt-3.5-turbo")  # priced, but litellm has no batch price for it
    assert old["source"].startswith("50% of the synchronous price")
    assert batching.cost("gpt-3.5-turbo", 1_000, 100) == pytest.approx(sync.cost("gpt-3.5-turbo", 1_000, 100) / 2)
    assert batch_pricing("openai/madbench-sim")["source"].startswith("unknown")
    assert batching.cost("openai/madbench-sim", 1_000, 100) is None  # unknown, never a made-up 0
    assert batching.rate_limited is False and batching.cacheable


def _line(status, body, error=None):
    return {"custom_id": "k", "response": {"status_code": status, "body": body}, "error": error}


def test_result_lines_read_as_answers_or_as_the_errors_the_gateway_retries():
    spec = ModelSpec(model="openai/gpt-5-mini")
    cost = BatchingProvider(LiteLLMProvider(), collector=None).cost
    ok = _line(200, {"model": "m", "choices": [{"finish_reason": "stop", "message": {"content": "{}"}}],
                     "usage": {"prompt_tokens": 12, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 8}}})
    raw = raw_response(ok, spec, cost)
    assert (raw.content, raw.prompt_tokens, raw.completion_tokens, raw.cached_tokens) == ("{}", 12, 3, 8)
    cut = _line(200, {"choices": [{"finish_reason": "length", "message": {"content": "{\"wei"}}],
                      "usage": {"prompt_tokens": 12, "completion_tokens": 500}})
    with pytest.raises(Truncated) as exc:  # as a synchronous call's: never validated, billed at batch prices
        raw_response(cut, spec, cost)
    assert exc.value.billed["cost_usd"] == pytest.approx(12 * 1.25e-7 + 500 * 1e-6)
    with pytest.raises(TransientError):
        raw_response(_line(500, {"error": {"message": "boom"}}), spec, cost)
    with pytest.raises(RateLimited):
        raw_response(_line(429, {"error": {"message": "slow down"}}), spec, cost)
    with pytest.raises(FatalProviderError):
        raw_response(_line(400, {"error": {"message": "bad request"}}), spec, cost)
    with pytest.raises(TransientError, match="no result"):
        raw_response({"error": {"kind": "transient", "message": "no result line"}}, spec, cost)
    with pytest.raises(FatalProviderError, match="left unanswered"):
        raw_response({"error": {"kind": "fatal", "message": "left unanswered by 4 provider batches"}}, spec, cost)
    data = (json.dumps(ok | {"custom_id": "a"}) + "\n\n" + json.dumps(ok | {"custom_id": "b"}) + "\n").encode()
    assert sorted(parse_lines(data)) == ["a", "b"]
