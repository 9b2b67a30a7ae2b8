"""Hedged requests through real HTTP (litellm → httpx → the simulated provider, whose scripted latency makes a
straggler on demand): the slow copy is closed, both are counted, one answer is cached."""

import asyncio
import time

import numpy as np
import pytest

from madbench.gateway import Budget, Gateway, LLMRequest, Message, ModelSpec, RateLimits, ResponseCache
from madbench.gateway.hedging import Hedger, HedgeSettings, LatencyWindow, censored_quantile, empirical_quantile
from madbench.gateway.models import spec_identity
from madbench.sim.provider import SimConfig, SimProvider

PRICED = "openai/gpt-4o-mini"  # priced by litellm's cost map; answered by the simulator at its api_base
UNPRICED = "openai/madbench-sim"
#: Hedge after 3 answers, once a request has waited 1.5 s (the simulator answers a warm-up request at once): long
#: enough for the first copy to reach the simulator before its hedge, so that each takes the latency scripted for it.
#: At the median: with 4 answers and the slow request itself still waiting, the Kaplan–Meier estimate knows no
#: quantile above 0.8 (its survival stays at 1/5 or more); no reserve, so the cap is max_share alone.
QUICK = HedgeSettings(min_samples=3, min_delay_s=1.5, max_share=1.0, quantile=0.5, straggler_quantile=0.5, reserve=0.0)


def ask(text: str, model: str = PRICED) -> LLMRequest:
    return LLMRequest(model=model, messages=[Message(role="user", content=text)], max_tokens=200)


def spec_at(sim: SimProvider, model: str = PRICED, **extra) -> ModelSpec:
    return ModelSpec(model=model, api_base=sim.url, limits=RateLimits(max_concurrency=32), **extra)


async def warmed(gw: Gateway, spec: ModelSpec, n: int = 4) -> None:
    for i in range(n):
        await gw.complete(ask(f"warm-up {i}", spec.model), spec)


def wait_for(predicate, timeout_s: float = 120.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.05)
    return predicate()


def test_empirical_quantile_is_numpys_linear_definition():
    rng = np.random.default_rng(3)
    for n in (1, 2, 7, 100):
        x = sorted(rng.lognormal(2.0, 0.5, n).tolist())
        for q in (0.1, 0.5, 0.9, 0.99):
            assert empirical_quantile(x, q) == pytest.approx(float(np.quantile(x, q)))


def test_the_censored_quantile_is_the_inverse_distribution_without_waiting_requests_and_kaplan_meiers_with_them():
    rng = np.random.default_rng(5)
    for n in (1, 3, 20, 101):
        x = sorted(rng.lognormal(2.0, 0.5, n).tolist())
        for q in (0.1, 0.5, 0.9):
            assert censored_quantile(x, [], q) == pytest.approx(float(np.quantile(x, q, method="inverted_cdf")))
    # By hand: answers at 1, 2, 4; requests waiting 3 and 5. At 1: 5 at risk, S = 4/5; at 2: 4 at risk, S = 3/5;
    # at 4 (the age 3 no longer at risk): 2 at risk, S = 3/10.
    assert censored_quantile([1.0, 2.0, 4.0], [5.0, 3.0], 0.4) == 2.0
    assert censored_quantile([1.0, 2.0, 4.0], [5.0, 3.0], 0.7) == 4.0
    assert censored_quantile([1.0, 2.0, 4.0], [5.0, 3.0], 0.71) is None  # S never falls to 0.29: unknown
    assert censored_quantile([], [1.0], 0.5) is None


def test_a_wave_of_requests_still_waiting_keeps_the_first_fast_answers_from_setting_the_delay():
    hedger = Hedger(HedgeSettings(min_samples=20, min_delay_s=0.0))
    for k in range(20):  # the 20 fastest answers of a wave of 140
        hedger.observe("m", 2.0 + k * 0.1)
    assert hedger.delay("m", now=0.0) == pytest.approx(3.7)  # p90 of the answers alone (the 18th of 20)
    for k in range(120):
        hedger.sent("m", k, at=0.0)
    assert hedger.delay("m", now=10.0) is None  # 120 of 140 still waiting, each for 10 s: p90 is past every answer
    for k in range(120):
        hedger.settled("m", k)
    assert hedger.delay("m", now=10.0 + 1.0) == pytest.approx(3.7)  # (after the memo's 0.2 s)


def test_a_latency_window_forgets_its_oldest_answers():
    window = LatencyWindow(3)
    for x in (100.0, 1.0, 2.0, 3.0):
        window.add(x)
    assert len(window) == 3 and window.quantile(0.5) == 2.0 and window.quantile(0.99) < 3.0  # 100 is gone


def test_hedge_settings_never_enter_a_run_identity():
    base = ModelSpec(model=PRICED, api_base="http://127.0.0.1:1/v1")
    assert spec_identity(base.model_copy(update={"hedge": True})) == spec_identity(base)
    assert spec_identity(base.model_copy(update={"hedge": False})) == spec_identity(base) == PRICED


def test_a_slow_first_request_is_hedged_the_hedge_wins_both_are_counted_and_one_answer_is_cached(tmp_path):
    with SimProvider(SimConfig()) as sim, ResponseCache(tmp_path / "cache") as cache:
        budget = Budget(5.0)
        gw = Gateway(cache=cache, budget=budget, hedging=QUICK)
        spec = spec_at(sim)

        async def go():
            await warmed(gw, spec)
            sim.script_latency(60.0)  # the next request straggles; its hedge is answered at once
            return await gw.complete(ask("the slow one"), spec)

        c = asyncio.run(go())
        assert [(a.kind, a.hedge) for a in c.attempts] == [("outraced", None), ("ok", True)]
        assert sim.stats.requests == 4 + 2 and gw.requests == 4 + 2 and gw.hedger.hedges == 1
        # the straggler's connection was closed, not left to run
        assert wait_for(lambda: sim.stats.abandoned == 1)
        outraced, won = c.attempts
        assert outraced.prompt_tokens == won.prompt_tokens and outraced.cost_usd > won.cost_usd > 0
        assert c.cost_usd == pytest.approx(outraced.cost_usd + won.cost_usd)
        # the budget counted both requests (the warm-ups' and this call's), and holds nothing
        assert budget.spent_usd == pytest.approx(gw.totals.cost_usd) and budget.ledger.held == {}
        assert gw.totals.cost_usd >= c.cost_usd
        assert len(cache) == 5  # the warm-ups' answers and this call's one
        again = asyncio.run(gw.complete(ask("the slow one"), spec))
        assert again.cached and again.content == c.content and sim.stats.requests == 6


def test_the_first_answer_wins_when_the_hedge_is_slower(tmp_path):
    with SimProvider(SimConfig()) as sim:
        gw = Gateway(hedging=QUICK)
        spec = spec_at(sim)

        async def go():
            await warmed(gw, spec)
            sim.script_latency(3.0, 60.0)  # the first is slow, its hedge slower still
            return await gw.complete(ask("slow, then slower"), spec)

        c = asyncio.run(go())
        assert [(a.kind, a.hedge) for a in c.attempts] == [("outraced", True), ("ok", None)]
        assert wait_for(lambda: sim.stats.abandoned == 1)


def test_the_cap_bounds_the_hedges_to_a_share_of_the_requests():
    with SimProvider(SimConfig()) as sim:
        # six of ten requests waiting: the median is unknown until they end (Kaplan–Meier), the 0.3 quantile is known
        gw = Gateway(hedging=QUICK.model_copy(update={"max_share": 0.2, "quantile": 0.3, "straggler_quantile": 0.3}))
        spec = spec_at(sim)

        async def go():
            await warmed(gw, spec)
            sim.script_latency(*[4.0] * 6)  # six stragglers at once; their hedges are answered at once
            return await asyncio.gather(*[gw.complete(ask(f"slow {i}"), spec) for i in range(6)])

        calls = asyncio.run(go())
        hedged = [c for c in calls if any(a.hedge for a in c.attempts)]
        assert gw.hedger.requests == 10 and len(hedged) == gw.hedger.hedges == 2  # 0.2 × 10 requests
        assert sim.stats.requests == 10 + 2


@pytest.mark.parametrize(("straggler_quantile", "second_hedged"), [(0.6, True), (0.9, False)])
def test_the_reserve_hedges_a_straggler_once_the_quantiles_share_of_the_cap_is_spent(straggler_quantile, second_hedged):
    """max_share 0.4, half of it reserved: at the quantile, hedges stop at 0.2 of the requests (the first slow request
    takes it); the second slow one is hedged from the reserve once past the straggler quantile, which 5 answers and
    one request waiting can tell at 0.6 but not at 0.9 (Kaplan–Meier's survival stays at 1/6 or more)."""
    settings = QUICK.model_copy(update={"quantile": 0.3, "straggler_quantile": straggler_quantile, "max_share": 0.4,
                                        "reserve": 0.5})
    with SimProvider(SimConfig()) as sim:
        gw = Gateway(hedging=settings)
        spec = spec_at(sim)

        async def go():
            await warmed(gw, spec)
            sim.script_latency(4.0)  # slow; its hedge is answered at once
            first = await gw.complete(ask("slow"), spec)
            sim.script_latency(6.0)
            second = await gw.complete(ask("slower, once the quantile's share is spent"), spec)
            return first, second

        first, second = asyncio.run(go())
        assert any(a.hedge for a in first.attempts)
        assert any(a.hedge for a in second.attempts) is second_hedged
        assert gw.hedger.hedges == 1 + second_hedged


@pytest.mark.parametrize(("hedge", "hedged"), [(None, False), (True, True)])
def test_a_model_without_a_price_is_hedged_only_when_its_spec_says_so(hedge, hedged):
    with SimProvider(SimConfig()) as sim:
        gw = Gateway(hedging=QUICK)
        spec = spec_at(sim, UNPRICED, hedge=hedge)

        async def go():
            await warmed(gw, spec)
            sim.script_latency(4.0)
            return await gw.complete(ask("slow", UNPRICED), spec)

        c = asyncio.run(go())
        assert any(a.hedge for a in c.attempts) is hedged
        assert sim.stats.requests == 4 + 1 + hedged


def test_a_batch_setting_turns_hedging_off_for_a_priced_model():
    with SimProvider(SimConfig()) as sim:
        gw = Gateway(hedging=QUICK.model_copy(update={"enabled": False}))
        spec = spec_at(sim)

        async def go():
            await warmed(gw, spec)
            sim.script_latency(4.0)
            return await gw.complete(ask("slow"), spec)

        c = asyncio.run(go())
        assert [a.kind for a in c.attempts] == ["ok"] and sim.stats.requests == 5


@pytest.mark.parametrize("field", ["reserve", "max_share", "quantile", "min_samples"])
def test_a_boolean_for_a_hedging_number_is_refused_not_read_as_one(field):
    from pydantic import ValidationError
    with pytest.raises(ValidationError, match="a boolean: give a number"):
        HedgeSettings.model_validate({field: True})
    assert HedgeSettings.model_validate({"reserve": 0, "max_share": 1}).reserve == 0.0
