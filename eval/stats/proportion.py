"""Confidence intervals of a binomial proportion (hits of n trials).

Wilson (1927) and Clopper-Pearson (1934), both at level 1 - alpha; and the Korn-Graubard (1998) effective sample size
that lets either hold where trials come in clusters (the assets of one memo are recognised together or not at all).
"""

from __future__ import annotations

import math

from scipy.stats import beta, norm


def wilson_interval(hits: float, n: float, alpha: float = 0.05) -> tuple[float, float]:
    """Wilson score interval: (p + z²/2n ± z·sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n), p = hits/n, z = Φ⁻¹(1 - alpha/2)."""
    if n <= 0:
        return (math.nan, math.nan)
    z = float(norm.ppf(1 - alpha / 2))
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def clopper_pearson_interval(hits: float, n: float, alpha: float = 0.05) -> tuple[float, float]:
    """Clopper-Pearson: (Beta⁻¹(alpha/2; x, n-x+1), Beta⁻¹(1-alpha/2; x+1, n-x)), 0 at x = 0 and 1 at x = n (x = hits;
    a non-integer x, from an effective sample size, takes the same Beta quantiles)."""
    if n <= 0:
        return (math.nan, math.nan)
    lo = 0.0 if hits <= 0 else float(beta.ppf(alpha / 2, hits, n - hits + 1))
    hi = 1.0 if hits >= n else float(beta.ppf(1 - alpha / 2, hits + 1, n - hits))
    return (lo, hi)


def clustered_effective_n(hits: list[int], sizes: list[int]) -> float:
    """Korn-Graubard effective sample size of a proportion over clusters: n* = p(1-p) / v, with p = Σy/Σm and the
    ratio estimator's variance v = k/(k-1) · Σ(y_i - p·m_i)² / (Σm)² over k clusters (y_i hits of m_i trials); at most
    Σm (no design effect below 1), and Σm where v = 0 with 0 < p < 1 (every cluster at the same rate). Where p is 0 or 1,
    or there is one cluster, the data cannot tell the correlation within clusters: k, each cluster one trial (the
    conservative end; Σm would let two memos recognised whole read as fifteen independent hits)."""
    total, k = sum(sizes), len(sizes)
    if total == 0:
        return 0.0
    p = sum(hits) / total
    if k < 2 or p in (0.0, 1.0):
        return float(k)
    v = k / (k - 1) * sum((y - p * m) ** 2 for y, m in zip(hits, sizes, strict=True)) / total ** 2
    return float(total) if v <= 0 else min(float(total), p * (1 - p) / v)


def chance_corrected(rate: float, chance: float) -> float:
    """The share recognised beyond guessing, (rate - chance) / (1 - chance) (the correction for guessing of kappa)."""
    return (rate - chance) / (1 - chance)
