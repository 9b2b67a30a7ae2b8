"""Hedged requests ("The Tail at Scale", Dean & Barroso, CACM 56(2), 2013): a request still unanswered past a latency
quantile of its model is sent a second time; the first answer wins and the other request is closed.

What decides, per gateway (one per runner actor, so per process of a batch):

* ``HedgeSettings``: a batch's setting (``hedging:`` in the batch file), the quantile, the samples needed before
  hedging starts, a floor on the wait and the cap on extra requests (a share of the requests sent).
* ``ModelSpec.hedge`` (a tier's deployment setting): True or False per model; None, the default, hedges a model
  whose price is known (every hedge is counted, so its cost must be) and never one without.
* ``Hedger``: the latency window of each model (its endpoint's limit key), learned from the answers this gateway
  got, the requests now at each model, and the cap's counts.

The quantile is the Kaplan–Meier estimate over the answered latencies and the ages of the requests still at the
provider (right-censored: each has taken at least its age). Answers come fastest first, so a window of answers alone
puts the quantile too low while a wave of requests is out (the first phase of a batch: its 20 first answers are its
fastest), and hedges would go to requests that are merely average. And a hedge wins mostly in the far tail: a
request hedged at p90 answers first only when the original would have taken longer than p90 plus a whole second
request. So part of the cap (``reserve``) is kept for requests past ``straggler_quantile`` (p99): a batch waits on
its slowest run, and a spent cap must not leave its one 50 s request unhedged.

Hedging never changes an answer: both requests are the same request (one cache key), the cache stores the winner's
answer once, and a run's identity never sees these settings.
"""

from __future__ import annotations

import bisect
import math
from collections import deque

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class HedgeSettings(BaseModel):
    """How a batch hedges its slow requests (``hedging:`` in a batch file)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    #: False: no request of the batch is hedged, whatever a model's own ``hedge`` says.
    enabled: bool = True
    #: A request is hedged once it has waited this quantile of its model's observed latencies.
    quantile: float = Field(0.9, gt=0, lt=1)
    #: Answers of a model observed before its requests are hedged (a quantile of fewer says little).
    min_samples: int = Field(20, ge=1, le=100_000)
    #: Never hedge before this many seconds at the provider: a fast model's jitter is not worth a second request.
    min_delay_s: float = Field(1.0, ge=0, le=3600)
    #: Extra requests at most, as a share of the requests sent to models that hedge.
    max_share: float = Field(0.05, ge=0, le=1)
    #: The latest answers of a model its quantile is taken over (older ones drop out, so the quantile follows drift).
    window: int = Field(1000, ge=1, le=1_000_000)
    #: A request still unanswered past this quantile (or ``quantile``, if higher) is a straggler: it may take the
    #: cap's ``reserve`` too.
    straggler_quantile: float = Field(0.99, gt=0, lt=1)
    #: The share of the cap kept for stragglers: hedges at ``quantile`` stop at (1 − reserve) · max_share. The
    #: default keeps what stragglers need at the defaults: 1 − p99 = 1% of requests, a fifth of a 5% cap.
    reserve: float = Field(0.2, ge=0, le=1)

    @field_validator("quantile", "min_delay_s", "max_share", "straggler_quantile", "reserve", "min_samples", "window",
                     mode="before")
    @classmethod
    def _no_boolean(cls, value: object) -> object:
        # YAML's `true` would pass as 1 (a whole cap kept in reserve, a quantile of 1): a number is meant
        if isinstance(value, bool):
            raise ValueError(f"is {str(value).lower()}, a boolean: give a number")
        return value

    @model_validator(mode="after")
    def _ordered(self) -> HedgeSettings:
        if "straggler_quantile" in self.model_fields_set and self.straggler_quantile < self.quantile:
            raise ValueError(f"straggler_quantile ({self.straggler_quantile}) is below quantile ({self.quantile}): a "
                             "straggler is a request slower than the ones hedged at `quantile`; give a higher one")
        return self


def empirical_quantile(ordered: list[float], q: float) -> float:
    """The ``q`` quantile of the sorted sample ``ordered`` by linear interpolation between order statistics (Hyndman
    & Fan 1996, definition 7, numpy's default): with h = (n − 1)·q, Q = x₍⌊h⌋₎ + (h − ⌊h⌋)·(x₍⌊h⌋+1₎ − x₍⌊h⌋₎)."""
    if not ordered:
        raise ValueError("the quantile of no sample")
    h = (len(ordered) - 1) * q
    lo = math.floor(h)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (h - lo) * (ordered[hi] - ordered[lo])


class LatencyWindow:
    """The last ``size`` latencies of one model, kept sorted too, for their quantile."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._arrivals: deque[float] = deque()
        self._sorted: list[float] = []

    def __len__(self) -> int:
        return len(self._arrivals)

    def add(self, latency_s: float) -> None:
        self._arrivals.append(latency_s)
        bisect.insort(self._sorted, latency_s)
        if len(self._arrivals) > self.size:
            old = self._arrivals.popleft()
            del self._sorted[bisect.bisect_left(self._sorted, old)]

    def quantile(self, q: float) -> float:
        return empirical_quantile(self._sorted, q)

    @property
    def ordered(self) -> list[float]:
        """The window's latencies, sorted (the list itself: not to be changed)."""
        return self._sorted


def censored_quantile(answered: list[float], waiting: list[float], q: float) -> float | None:
    """The ``q`` quantile of a latency from ``answered`` (sorted) latencies and the ages of requests still
    ``waiting`` (right-censored), by the Kaplan–Meier product-limit estimator (Kaplan & Meier, JASA 53(282), 1958):
    Ŝ(t) = Π over answered tᵢ ≤ t of (1 − 1/nᵢ), nᵢ the requests at risk at tᵢ (answered at tᵢ or later, or waiting
    at least tᵢ); the quantile is the smallest answered tᵢ with Ŝ(tᵢ) ≤ 1 − q. None when Ŝ stays above 1 − q (too
    many requests are still waiting to tell: the quantile lies beyond the last answer). With nothing waiting it is
    the inverse of the empirical distribution function."""
    if not answered:
        return None
    ages = sorted(waiting)
    n_answered, n_ages = len(answered), len(ages)
    survival, k = 1.0, 0  # k: ages shorter than the current answer (no longer at risk)
    for i, t in enumerate(answered):
        while k < n_ages and ages[k] < t:
            k += 1
        at_risk = (n_answered - i) + (n_ages - k)
        survival *= 1.0 - 1.0 / at_risk
        if survival <= 1.0 - q + 1e-12:
            return t
    return None


#: Seconds a model's computed delay is reused: every request waiting at it asks, and each answer costs a pass over
#: the window and the requests waiting.
DELAY_TTL_S = 0.2


class Hedger:
    """One gateway's hedging state: each model's latency window, the requests now at each model, and the cap's
    counts."""

    def __init__(self, settings: HedgeSettings | None = None) -> None:
        self.settings = settings or HedgeSettings()
        self.windows: dict[str, LatencyWindow] = {}
        #: Model key → {request: when it was sent (monotonic)}: the requests at the provider, censored observations.
        self.waiting: dict[str, dict[int, float]] = {}
        #: Requests sent to models that hedge (the cap's base), and hedges sent.
        self.requests = 0
        self.hedges = 0
        self._delays: dict[tuple[str, bool], tuple[float, float | None]] = {}  # the last delay computed, and when

    def sent(self, model_key: str, request: int, at: float) -> None:
        """A request (any id unique among those waiting) reached the model at ``at`` (monotonic)."""
        self.waiting.setdefault(model_key, {})[request] = at

    def settled(self, model_key: str, request: int) -> None:
        """The request is no longer at the model (answered, failed, closed)."""
        self.waiting.get(model_key, {}).pop(request, None)

    def observe(self, model_key: str, latency_s: float) -> None:
        """An answer of the model at ``model_key`` took ``latency_s`` at the provider."""
        window = self.windows.get(model_key)
        if window is None:
            window = self.windows[model_key] = LatencyWindow(self.settings.window)
        window.add(latency_s)

    def delay(self, model_key: str, now: float, straggler: bool = False) -> float | None:
        """How long a request to the model waits at the provider before it is hedged (at ``quantile``, or at
        ``straggler_quantile``); None while too few of its answers were seen, or too many requests still wait to
        tell (``censored_quantile``)."""
        window = self.windows.get(model_key)
        if window is None or len(window) < self.settings.min_samples:
            return None
        memo = self._delays.get((model_key, straggler))
        if memo is not None and 0 <= now - memo[0] < DELAY_TTL_S:
            return memo[1]
        q = max(self.settings.straggler_quantile, self.settings.quantile) if straggler else self.settings.quantile
        ages = [now - at for at in self.waiting.get(model_key, {}).values()]
        found = censored_quantile(window.ordered, ages, q)
        delay = None if found is None else max(self.settings.min_delay_s, found)
        self._delays[(model_key, straggler)] = (now, delay)
        return delay

    def take(self, straggler: bool = False) -> bool:
        """Whether one more hedge fits under the cap (hedges + 1 ≤ share · requests, the share ``max_share`` for a
        straggler and (1 − reserve) · max_share for another); counts it when it does."""
        share = self.settings.max_share * (1.0 if straggler else 1.0 - self.settings.reserve)
        if self.hedges + 1 > share * self.requests:
            return False
        self.hedges += 1
        return True
