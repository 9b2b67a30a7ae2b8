"""The limiter's pure state: pacing, token debt, concurrency slots and AIMD."""

import math

import pytest

from madbench.gateway.bucket import LimiterCore, TokenBucket
from madbench.gateway.models import RateLimits


def test_token_bucket_paces_at_rate_after_burst():
    b = TokenBucket(rate=2.0, capacity=1.0, level=1.0, last=0.0)
    assert b.wait_for(1, 0.0) == 0.0
    b.take(1, 0.0)
    assert b.wait_for(1, 0.0) == pytest.approx(0.5)
    assert b.wait_for(1, 0.25) == pytest.approx(0.25)
    assert b.wait_for(1, 0.5) == 0.0


def test_oversized_cost_waits_for_full_bucket_then_goes_into_debt():
    b = TokenBucket(rate=10.0, capacity=100.0, level=100.0, last=0.0)
    assert b.wait_for(250, 0.0) == 0.0  # a request larger than the bucket is not starved
    b.take(250, 0.0)
    assert b.level == -150
    assert b.wait_for(10, 0.0) == pytest.approx(16.0)  # debt repaid at the rate before the next one


@pytest.mark.parametrize("headroom", [0.0, 0.02, 0.2])
def test_rpm_spacing_matches_limit_less_headroom(headroom):
    core = LimiterCore(RateLimits(rpm=120, max_concurrency=100, headroom=headroom), now=0.0)
    t, starts = 0.0, []
    for _ in range(20):
        w = core.wait_for(0, t)
        t += w
        starts.append(t)
        core.grant(0, t)
    gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    assert all(g == pytest.approx(0.5 / (1 - headroom)) for g in gaps)  # 120/min = one every 0.5 s, less headroom


def test_concurrency_slots_block_until_release():
    core = LimiterCore(RateLimits(max_concurrency=2), now=0.0)
    a = core.grant(0, 0.0)
    core.grant(0, 0.0)
    assert math.isinf(core.wait_for(0, 0.0))
    core.release(a.lease_id, "ok", 0.1)
    assert core.wait_for(0, 0.1) == 0.0


def test_tpm_settles_estimate_against_actual_usage():
    core = LimiterCore(RateLimits(tpm=600, max_concurrency=10, headroom=0), now=0.0)  # 10 tokens/s, 10 banked
    lease = core.grant(500, 0.0)
    core.release(lease.lease_id, "ok", 0.0, tokens_used=100)  # we over-estimated by 400
    assert core.tokens.level == pytest.approx(10 - 100)


def test_no_sliding_minute_admits_more_than_tpm_not_even_the_first():
    tpm, size = 200_000, 5_000
    core = LimiterCore(RateLimits(tpm=tpm, max_concurrency=1000), now=0.0)
    now, admitted = 0.0, []
    while now < 180:
        wait = core.wait_for(size, now)
        now += wait
        core.grant(size, now)
        admitted.append(now)
    worst = max(sum(1 for s in admitted if t <= s < t + 60) for t in admitted) * size
    assert worst <= tpm  # a minute's bucket let the first minute admit about 2x tpm


def test_429_episode_halves_concurrency_once_and_successes_grow_it_back():
    core = LimiterCore(RateLimits(max_concurrency=8, increase_after=3), now=0.0)
    leases = [core.grant(0, 0.0) for _ in range(4)]
    for lease in leases[:3]:  # three 429s within one Retry-After window are one episode
        core.release(lease.lease_id, "rate_limited", 0.1, retry_after=2.0)
    assert core.concurrency == 4
    core.release(leases[3].lease_id, "rate_limited", 2.5, retry_after=2.0)  # a new episode
    assert core.concurrency == 2
    for _ in range(6):
        core.release(core.grant(0, 3.0).lease_id, "ok", 3.0)
    assert core.concurrency == 4  # +1 per 3 successes in a row
    assert core.counts["shrinks"] == 2 and core.counts["grows"] == 2


def test_concurrency_never_below_one_and_stale_leases_reclaimed():
    core = LimiterCore(RateLimits(max_concurrency=1, lease_timeout_s=10), now=0.0)
    core.grant(0, 0.0)  # a caller that crashed without releasing
    core.release(999, "rate_limited", 0.0, retry_after=1.0)
    assert core.concurrency == 1
    assert math.isinf(core.wait_for(0, 5.0))
    assert core.wait_for(0, 11.0) == 0.0 and core.counts["reclaimed"] == 1
