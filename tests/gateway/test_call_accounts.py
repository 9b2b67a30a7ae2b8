"""Each call is credited to the account it is asked for (a run's), whatever else shares the gateway."""

import asyncio
import json

import pytest

from madbench.gateway import (
    Budget,
    Gateway,
    GatewayFailure,
    LLMRequest,
    Message,
    ModelSpec,
    OutputInvalid,
    ResponseCache,
    RetryPolicy,
    Totals,
)
from madbench.gateway.accounting import Attempt
from tests.fault_server import FaultServer

PRICED = "openai/gpt-4o-mini"  # in litellm's offline cost map: every answer has a known, non-zero cost
RETRY = RetryPolicy(timeout_s=5, max_validation_retries=2, backoff_base_s=0.05, backoff_max_s=0.2)


def spec_for(server) -> ModelSpec:
    return ModelSpec(model=PRICED, api_base=server.url, retry=RETRY)  # a self-hosted endpoint: no key


def ask(text: str) -> LLMRequest:
    return LLMRequest(model=PRICED, messages=[Message(role="user", content=text)])


def as_json(content, spec):
    return json.loads(content)


def reject(content, spec):
    raise OutputInvalid("never good enough")  # every answer is paid for, none accepted


def test_overlapping_callers_each_see_only_their_own_calls():
    accounts = [Totals() for _ in range(3)]
    plan = [(i % 3, i % 7 == 3) for i in range(36)]  # (whose call, does it fail)
    with FaultServer(latency_s=0.01) as server:
        spec = spec_for(server)
        gw = Gateway(budget=Budget(None))

        async def one(i, k, fails):
            try:
                return await gw.complete(ask(f"question {i}"), spec, reject if fails else as_json, account=accounts[k])
            except GatewayFailure as exc:
                return exc

        async def main():
            return await asyncio.gather(*(one(i, k, fails) for i, (k, fails) in enumerate(plan)))

        results = asyncio.run(main())
    assert sum(isinstance(r, GatewayFailure) for r in results) == 5
    for k, account in enumerate(accounts):
        mine = [r for r, (who, _) in zip(results, plan, strict=True) if who == k]
        ok = [r for r in mine if not isinstance(r, GatewayFailure)]
        failed = [r for r in mine if isinstance(r, GatewayFailure)]
        assert (account.calls, account.failed, account.cached) == (len(ok), len(failed), 0)
        assert account.prompt_tokens == sum(c.prompt_tokens for c in ok) > 0
        assert account.completion_tokens == sum(c.completion_tokens for c in ok) > 0
        assert account.cost_usd == pytest.approx(sum(c.cost_usd for c in ok)) and account.cost_usd > 0
        assert account.http_attempts == len(ok) + 3 * len(failed)  # a failed call: 1 answer + 2 feedback retries
    summed = {f: sum(getattr(a, f) for a in accounts) for f in Totals.model_fields}
    assert gw.totals.model_dump() == pytest.approx(summed)
    # The budget counts what was paid: the rejected answers of the failed calls too.
    paid_for_failures = sum(Attempt(**a).cost_usd or 0 for r in results if isinstance(r, GatewayFailure) for a in r.attempts)
    assert paid_for_failures > 0
    assert gw.budget.spent_usd == pytest.approx(gw.totals.cost_usd + paid_for_failures)


def test_a_cached_answer_is_credited_as_cached_with_its_tokens_and_no_cost(tmp_path):
    first, second, unnamed = Totals(), Totals(), Totals()
    with FaultServer() as server, ResponseCache(tmp_path / "cache") as cache:
        gw = Gateway(cache=cache)
        paid = asyncio.run(gw.complete(ask("q"), spec_for(server), as_json, account=first))
        replay = asyncio.run(gw.complete(ask("q"), spec_for(server), as_json, account=second))
        asyncio.run(gw.complete(ask("another"), spec_for(server), as_json))  # no account: the gateway's totals only
        assert server.requests == 2
    assert replay.cached and (first.calls, first.cached, second.calls, second.cached) == (1, 0, 1, 1)
    assert second.prompt_tokens == first.prompt_tokens == paid.prompt_tokens > 0
    assert first.cost_usd == paid.cost_usd > 0 and second.cost_usd == 0.0
    assert gw.totals.calls == 3 and gw.totals.cached == 1 and unnamed.calls == 0
    assert gw.budget.spent_usd == pytest.approx(gw.totals.cost_usd)


def test_the_gateways_own_totals_as_account_are_not_counted_twice():
    with FaultServer() as server:
        gw = Gateway()
        asyncio.run(gw.complete(ask("q"), spec_for(server), as_json, account=gw.totals))
    assert gw.totals.calls == 1
