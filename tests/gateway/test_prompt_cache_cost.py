"""Prompt caching in the gateway: cached and cache-write tokens are read from the provider's usage, recorded per
attempt and per account, and priced at the model's own rates from litellm's cost map; Anthropic's models get a
``cache_control`` breakpoint at the end of the shared system message, OpenAI's (which cache by themselves) none.

Over real HTTP: the simulated OpenAI-compatible provider (its prefix cache) and a stub of Anthropic's Messages API.
"""

import asyncio

import pytest

from madbench.gateway import Gateway, LLMRequest, Message, ModelSpec, Totals
from madbench.gateway.providers.litellm_provider import (
    LiteLLMProvider,
    cache_usage,
    needs_cache_breakpoint,
    token_cost,
    with_cache_breakpoint,
)
from madbench.sim.http_stub import JSONHandler, StubServer
from madbench.sim.provider import SimProvider

M = 1e-6  # list prices are quoted in USD per million tokens


@pytest.mark.parametrize(("model", "batch", "expected"), [
    # gpt-5-mini: $0.25 input, $0.025 cached input, $2 output; batch: half of each
    ("openai/gpt-5-mini", False, 2_000 * 0.25 * M + 8_000 * 0.025 * M + 1_000 * 2.0 * M),
    ("openai/gpt-5-mini", True, 2_000 * 0.125 * M + 8_000 * 0.0125 * M + 1_000 * 1.0 * M),
    # gpt-4o-mini: $0.15 input, $0.075 cached input, $0.60 output
    ("openai/gpt-4o-mini", False, 2_000 * 0.15 * M + 8_000 * 0.075 * M + 1_000 * 0.6 * M),
])
def test_cached_input_is_priced_at_the_list_price_of_cached_tokens(model, batch, expected):
    # 10,000 prompt tokens of which 8,000 were read from the cache, and 1,000 completion tokens
    assert token_cost(model, 10_000, 1_000, cached_tokens=8_000, batch=batch) == pytest.approx(expected, rel=1e-9)
    uncached = token_cost(model, 10_000, 1_000, batch=batch)
    assert uncached > expected


def test_provider_cost_takes_the_cache_split_and_anthropic_writes_cost_more():
    p = LiteLLMProvider()
    # claude-sonnet-4-5: $3 input, $3.75 cache write, $0.30 cache read, $15 output
    got = p.cost("anthropic/claude-sonnet-4-5", 10_000, 1_000, cached_tokens=8_000, cache_write_tokens=1_000)
    assert got == pytest.approx(1_000 * 3 * M + 1_000 * 3.75 * M + 8_000 * 0.30 * M + 1_000 * 15 * M, rel=1e-9)
    assert p.cost("openai/gpt-5-mini", 10_000, 1_000) == pytest.approx(10_000 * 0.25 * M + 1_000 * 2 * M, rel=1e-9)
    assert p.cost("openai/not-a-priced-model", 10, 10, cached_tokens=5) is None  # unknown, never a made-up 0


def test_usage_is_read_from_either_provider_shape():
    assert cache_usage({"prompt_tokens": 10, "prompt_tokens_details": {"cached_tokens": 4}}) == (4, None)
    assert cache_usage({"prompt_tokens": 10, "cache_read_input_tokens": 3, "cache_creation_input_tokens": 5}) == (3, 5)
    assert cache_usage({"prompt_tokens": 10}) == (None, None) and cache_usage(None) == (None, None)


def test_breakpoints_only_for_models_that_need_them():
    assert needs_cache_breakpoint("anthropic/claude-sonnet-4-5")
    assert needs_cache_breakpoint("openrouter/anthropic/claude-3.5-sonnet")
    assert not needs_cache_breakpoint("openai/gpt-5-mini") and not needs_cache_breakpoint("openai/x", "http://127.0.0.1:1/v1")
    msgs = [{"role": "system", "content": "shared"}, {"role": "user", "content": "mine"}]
    marked = with_cache_breakpoint(msgs)
    assert marked[0]["content"] == [{"type": "text", "text": "shared", "cache_control": {"type": "ephemeral"}}]
    assert marked[1] == msgs[1]
    assert with_cache_breakpoint(msgs[1:]) == msgs[1:]  # no leading system message (a merged prompt): nothing marked


def _ask(gw: Gateway, spec: ModelSpec, system: str, user: str):
    return asyncio.run(gw.complete(LLMRequest(model=spec.model, messages=[Message(role="system", content=system),
                                                                          Message(role="user", content=user)]), spec))


def test_the_simulated_provider_serves_a_shared_prefix_from_its_cache_and_the_gateway_prices_it():
    shared = "The memo, identical for every agent. " * 400  # about 3,700 of the server's tokens
    with SimProvider() as sim:
        spec = ModelSpec(model="openai/gpt-4o-mini", api_base=sim.url)  # priced by its name, answered by the simulator
        gw, account = Gateway(), Totals()
        first = _ask(gw, spec, shared, "agent A")
        second = asyncio.run(gw.complete(LLMRequest(model=spec.model, messages=[
            Message(role="system", content=shared), Message(role="user", content="agent B")]), spec, account=account))
        other = _ask(gw, spec, "another prefix " + shared, "agent C")
    assert first.cached_tokens == 0 and other.cached_tokens == 0  # nothing seen before; a prefix differs at its start
    assert second.cached_tokens >= 1024 and second.cached_tokens % 128 == 0
    assert second.cached_tokens > 0.9 * second.prompt_tokens - 128  # the whole shared system message, in 128-token steps
    assert second.attempts[-1].cached_tokens == second.cached_tokens and account.cached_tokens == second.cached_tokens
    assert second.cost_usd == pytest.approx(token_cost("openai/gpt-4o-mini", second.prompt_tokens, second.completion_tokens,
                                                       cached_tokens=second.cached_tokens))
    assert second.cost_usd < token_cost("openai/gpt-4o-mini", second.prompt_tokens, second.completion_tokens)
    assert gw.totals.cached_tokens == second.cached_tokens


class AnthropicStub(JSONHandler):
    """Anthropic's Messages API, as far as one answer goes: records the request, reports cache reads and writes."""

    seen: list[dict] = []

    def do_POST(self):
        AnthropicStub.seen.append({"path": self.path, "body": self.read_json()})
        self.send_json(200, {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                             "content": [{"type": "text", "text": '{"answer": 1}'}], "stop_reason": "end_turn",
                             "stop_sequence": None, "usage": {"input_tokens": 100, "output_tokens": 20,
                                                              "cache_creation_input_tokens": 1000,
                                                              "cache_read_input_tokens": 8000}})


def test_anthropic_gets_a_cache_breakpoint_on_the_wire_and_its_cache_usage_is_priced(monkeypatch):
    monkeypatch.setenv("MADBENCH_TEST_ANTHROPIC_KEY", "sk-ant-test-0000000000")
    AnthropicStub.seen = []
    with StubServer(AnthropicStub) as stub:
        spec = ModelSpec(model="anthropic/claude-sonnet-4-5", api_base=stub.url.rsplit("/v1", 1)[0],
                         api_key_env="MADBENCH_TEST_ANTHROPIC_KEY")
        c = _ask(Gateway(), spec, "shared rules and memo", "this turn")
    (sent,) = AnthropicStub.seen
    assert sent["path"].endswith("/v1/messages")
    assert sent["body"]["system"] == [{"type": "text", "text": "shared rules and memo", "cache_control": {"type": "ephemeral"}}]
    assert "cache_control" not in str(sent["body"]["messages"])  # the turn's own part is not cached
    assert (c.prompt_tokens, c.cached_tokens, c.cache_write_tokens) == (9_100, 8_000, 1_000)
    assert c.cost_usd == pytest.approx(100 * 3 * M + 1_000 * 3.75 * M + 8_000 * 0.30 * M + 20 * 15 * M, rel=1e-9)
