"""Hedged requests ("The Tail at Scale", Dean & Barroso, CACM 56(2), 2013): a request still unanswered past a latency
quantile of its model is sent a second time; the first answer wins and the other request is closed.

What decides, per gateway (one per runner actor, so per process of a batch):

* ``HedgeSettings``: a batch's setting (``hedging:`` in the batch file), the quantile, the samples needed before
  hedging starts, a floor on the wait and the cap on extra requests (a share of the requests sent).
* ``ModelSpec.hedge`` (a tier's deployment setting): True or False per model; None, the default, hedges a model
  whose price is known (every hedge is counted, so its cost must be) and never one without.
* ``Hedger``: the latency window of each model (its endpoint's limit key), learned from the answers this gateway
  got, and the cap's counts.

Hedging never changes an answer: both requests are the same request (one cache key), the cache stores the winner's
answer once, and a run's identity never sees these settings.
"""

from __future__ import annotations

import bisect
import math
from collections import deque

from pydantic import BaseModel, ConfigDict, Field


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


class Hedger:
    """One gateway's hedging state: each model's latency window and the cap's counts."""

    def __init__(self, settings: HedgeSettings | None = None) -> None:
        self.settings = settings or HedgeSettings()
        self.windows: dict[str, LatencyWindow] = {}
        #: Requests sent to models that hedge (the cap's base), and hedges sent.
        self.requests = 0
        self.hedges = 0

    def observe(self, model_key: str, latency_s: float) -> None:
        """An answer of the model at ``model_key`` took ``latency_s`` at the provider."""
        window = self.windows.get(model_key)
        if window is None:
            window = self.windows[model_key] = LatencyWindow(self.settings.window)
        window.add(latency_s)

    def delay(self, model_key: str) -> float | None:
        """How long a request to the model waits at the provider before it is hedged; None while too few of its
        answers were seen."""
        window = self.windows.get(model_key)
        if window is None or len(window) < self.settings.min_samples:
            return None
        return max(self.settings.min_delay_s, window.quantile(self.settings.quantile))

    def take(self) -> bool:
        """Whether one more hedge fits under the cap (hedges + 1 ≤ max_share · requests); counts it when it does."""
        if self.hedges + 1 > self.settings.max_share * self.requests:
            return False
        self.hedges += 1
        return True
