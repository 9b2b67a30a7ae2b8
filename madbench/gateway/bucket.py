"""Pure rate-limit state: token buckets and adaptive concurrency (AIMD).

No clocks, no asyncio: every method takes ``now`` so the logic is unit-testable.
The async queue (``limiter.py``) and the Ray actor wrap this object.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from .models import RateLimits

INF = math.inf
#: Seconds of token budget a TPM bucket may bank (see ``LimiterCore``).
TOKEN_BURST_S = 1.0


@dataclass
class TokenBucket:
    """Classic token bucket: ``rate`` tokens/s, at most ``capacity`` banked.

    A cost above the capacity waits for a full bucket and then drives the level
    negative, so long-run throughput still equals ``rate`` (a request larger
    than one refill is never starved).
    """

    rate: float
    capacity: float
    level: float
    last: float

    def refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + (now - self.last) * self.rate)
        self.last = now

    def wait_for(self, cost: float, now: float) -> float:
        self.refill(now)
        need = min(cost, self.capacity)
        return 0.0 if self.level >= need else (need - self.level) / self.rate

    def take(self, cost: float, now: float) -> None:
        self.refill(now)
        self.level -= cost


@dataclass
class Lease:
    lease_id: int
    tokens: float
    granted_at: float


@dataclass
class LimiterCore:
    limits: RateLimits
    now: float
    requests: TokenBucket | None = None
    tokens: TokenBucket | None = None
    concurrency: float = 0.0
    leases: dict[int, Lease] = field(default_factory=dict)
    next_id: int = 1
    successes_in_row: int = 0
    episode_until: float = -INF
    counts: dict[str, int] = field(default_factory=lambda: {"granted": 0, "ok": 0, "rate_limited": 0, "error": 0, "reclaimed": 0, "shrinks": 0, "grows": 0})

    def __post_init__(self) -> None:
        lim = self.limits
        pace = (1.0 - lim.headroom) / 60.0  # per second, with the headroom kept unused
        if lim.rpm:
            self.requests = TokenBucket(lim.rpm * pace, lim.burst, lim.burst, self.now)
        if lim.tpm:
            # A bucket of one second's tokens, not a minute's: a provider counting tokens over a sliding minute then
            # never sees more than ~tpm in any 60 s (a full minute's bucket let the first minute send ~2x tpm, and
            # the provider answered the excess with 429s). A request larger than the bucket waits for it to fill and
            # then drives it negative, so large requests still pass at the paced rate.
            rate = lim.tpm * pace
            self.tokens = TokenBucket(rate, rate * TOKEN_BURST_S, rate * TOKEN_BURST_S, self.now)
        self.concurrency = float(lim.max_concurrency)

    @property
    def in_flight(self) -> int:
        return len(self.leases)

    def _reclaim(self, now: float) -> None:
        stale = [i for i, lease in self.leases.items() if now - lease.granted_at > self.limits.lease_timeout_s]
        for i in stale:
            del self.leases[i]
            self.counts["reclaimed"] += 1

    def wait_for(self, est_tokens: float, now: float) -> float:
        """Seconds until a request of ``est_tokens`` may start; INF while every slot is taken."""
        self._reclaim(now)
        if self.in_flight >= math.floor(self.concurrency):
            return INF
        waits = [0.0]
        if self.requests:
            waits.append(self.requests.wait_for(1.0, now))
        if self.tokens:
            waits.append(self.tokens.wait_for(est_tokens, now))
        return max(waits)

    def grant(self, est_tokens: float, now: float) -> Lease:
        if self.requests:
            self.requests.take(1.0, now)
        if self.tokens:
            self.tokens.take(est_tokens, now)
        lease = Lease(self.next_id, est_tokens, now)
        self.leases[lease.lease_id] = lease
        self.next_id += 1
        self.counts["granted"] += 1
        return lease

    def release(self, lease_id: int, outcome: str, now: float, tokens_used: float | None = None,
                retry_after: float | None = None) -> None:
        """Return a slot. ``outcome`` is ok, rate_limited or error."""
        lease = self.leases.pop(lease_id, None)
        if lease is not None and self.tokens and tokens_used is not None:
            # Settle the estimate against what the provider actually counted.
            self.tokens.take(tokens_used - lease.tokens, now)
        self.counts[outcome] += 1
        if outcome == "rate_limited":
            self.successes_in_row = 0
            if now >= self.episode_until:  # one multiplicative decrease per 429 episode
                self.concurrency = max(1.0, math.floor(self.concurrency / 2))
                self.counts["shrinks"] += 1
            pause = min(retry_after or 1.0, self.limits.retry_after_cap_s)
            self.episode_until = max(self.episode_until, now + pause)
        elif outcome == "ok":
            self.successes_in_row += 1
            if self.successes_in_row >= self.limits.increase_after and self.concurrency < self.limits.max_concurrency:
                self.concurrency += 1  # additive increase
                self.successes_in_row = 0
                self.counts["grows"] += 1

    def snapshot(self) -> dict[str, Any]:
        return {"in_flight": self.in_flight, "concurrency": self.concurrency,
                "max_concurrency": self.limits.max_concurrency, **self.counts}
