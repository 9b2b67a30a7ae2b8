"""`madbench scenarios make`: seeded random universes spread over quarters and sectors.

Sizes are drawn log-uniformly in [min, max] (many small universes, a few large,
like the paper's set); tickers are drawn sector by sector in a random order so
each universe spans as many sectors as its size allows. Only stocks with prices
over the whole memo look-back (one year before the as-of date) and the holding
quarter are eligible, so every drawn scenario can be memoed and backtested.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from madbench.data.errors import InputError
from madbench.data.market.calendar import Quarter
from madbench.data.market.pack import Pack
from madbench.data.scenario import Constraints, Scenario

LOOKBACK_DAYS = 253  # prices needed before the as-of date for every 1-year feature


def eligible_tickers(pack: Pack, quarter: Quarter) -> list[str]:
    window = pack.calendar.holding_window(quarter)
    start = pack.calendar.index_of(window[0]) - LOOKBACK_DAYS + 1
    end = pack.calendar.index_of(window[-1])
    if start < 0:
        return []
    stocks = [t for t in pack.tickers if str(pack.universe.loc[t, "asset_class"]) == "stock"] if "asset_class" in pack.universe.columns else pack.tickers
    cols = [pack.tickers.index(t) for t in stocks]
    block = pack.px_np[start : end + 1, cols]
    ok = ~np.isnan(block).any(axis=0)
    return [t for t, good in zip(stocks, ok, strict=True) if good]


def draw_scenarios(pack: Pack, quarters: list[Quarter], count: int, min_tickers: int, max_tickers: int, seed: int) -> list[Scenario]:
    if not 1 <= min_tickers <= max_tickers:
        raise InputError("--min-tickers/--max-tickers", f"need 1 <= min ({min_tickers}) <= max ({max_tickers})", "fix the bounds")
    if count < 1:
        raise InputError("--count", "must be at least 1", "pass a positive count")
    rng = np.random.default_rng(seed)
    pools = {}
    for q in quarters:
        pool = eligible_tickers(pack, q)
        if len(pool) < min_tickers:
            raise InputError("--quarters", f"{q} has only {len(pool)} eligible stocks in the pack, fewer than --min-tickers {min_tickers}", "choose quarters the pack covers with a year of history before them")
        pools[q] = pool
    order = list(rng.permutation(len(quarters)))
    scenarios = []
    for i in range(count):
        q = quarters[order[i % len(quarters)]]
        pool = pools[q]
        hi = min(max_tickers, len(pool))
        # log-uniform size: P(size <= k) grows with log k, as in the paper's skewed set
        size = min(hi, max(min_tickers, int(round(math.exp(rng.uniform(math.log(min_tickers), math.log(hi)))))))
        by_sector: dict[str, list[str]] = {}
        for t in pool:
            by_sector.setdefault(pack.sector(t), []).append(t)
        sectors = sorted(by_sector)
        rng.shuffle(sectors)
        for s in sectors:
            rng.shuffle(by_sector[s])
        picked = [t for t in itertools.chain.from_iterable(itertools.zip_longest(*(by_sector[s] for s in sectors))) if t][:size]
        picked = sorted(picked)
        max_weight = max(0.4, math.ceil(100 / size) / 100)
        scenarios.append(Scenario(
            id=f"{q}_n{size}_{i + 1:03d}",
            invest_quarter=str(q),
            tickers=picked,
            sectors={t: pack.sector(t) for t in picked},
            constraints=Constraints(max_weight=max_weight, min_holdings=min(3, size), allow_cash=False),
        ))
    return scenarios


@dataclass
class DrawStats:
    n: int
    size_min: int
    size_mean: float
    size_median: float
    size_max: int
    sizes: dict[int, int]
    quarters: dict[str, int]
    sectors: dict[str, int]  # scenarios that include the sector
    mean_jaccard: float

    def format(self) -> str:
        lines = [
            f"scenarios: {self.n}",
            f"tickers per scenario: min {self.size_min}, mean {self.size_mean:.1f}, median {self.size_median:.1f}, max {self.size_max}",
            "size histogram: " + ", ".join(f"{k}:{v}" for k, v in sorted(self.sizes.items())),
            "quarters: " + ", ".join(f"{k} ({v})" for k, v in sorted(self.quarters.items())),
            "sector coverage (scenarios including it): " + ", ".join(f"{k} ({v})" for k, v in sorted(self.sectors.items(), key=lambda kv: (-kv[1], kv[0]))),
            f"mean pairwise Jaccard: {self.mean_jaccard:.3f} (the paper's set: mean 11.5 tickers, Jaccard 0.216)",
        ]
        return "\n".join(lines)


def mean_pairwise_jaccard(sets: list[set[str]]) -> float:
    """mean over pairs i<j of |A_i ∩ A_j| / |A_i ∪ A_j|."""
    pairs = [(a, b) for a, b in itertools.combinations(sets, 2)]
    return float(np.mean([len(a & b) / len(a | b) for a, b in pairs])) if pairs else float("nan")


def draw_stats(scenarios: list[Scenario], sector_of: Callable[[str], str]) -> DrawStats:
    sizes = [len(s.tickers) for s in scenarios]
    sectors: dict[str, int] = {}
    for s in scenarios:
        for sec in {sector_of(t) for t in s.tickers}:
            sectors[sec] = sectors.get(sec, 0) + 1
    quarters: dict[str, int] = {}
    for s in scenarios:
        quarters[s.invest_quarter] = quarters.get(s.invest_quarter, 0) + 1
    hist: dict[int, int] = {}
    for n in sizes:
        hist[n] = hist.get(n, 0) + 1
    return DrawStats(
        n=len(scenarios), size_min=min(sizes), size_mean=float(np.mean(sizes)), size_median=float(np.median(sizes)),
        size_max=max(sizes), sizes=hist, quarters=quarters, sectors=sectors,
        mean_jaccard=mean_pairwise_jaccard([set(s.tickers) for s in scenarios]),
    )
