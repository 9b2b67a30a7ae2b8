"""Per-ticker features for the memo: pure functions over a price history.

Every function takes the history *up to and including the as-of date* (oldest
first) and returns ``None`` when its window is not covered, so a short history
reads "n/a (insufficient history)" instead of a made-up number. Conventions:

- r_t = p_t / p_{t-1} - 1, the simple daily return on the pack's price basis
  (adj_close, a total-return series, where the pack has it);
- an "n-day" window covers the last n daily returns, i.e. the last n+1 prices;
- annualisation uses 252 trading days; percentages are returned as percent.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

#: A price, volume or return series, oldest first.
FloatArray = NDArray[np.float64]
ANN = 252.0


def _tail(x: FloatArray, n: int) -> FloatArray | None:
    """Last ``n`` values, or None if fewer exist or any is missing."""
    if n <= 0 or len(x) < n:
        return None
    w = x[-n:]
    return None if np.isnan(w).any() else w


def returns(p: FloatArray) -> FloatArray:
    """r_t = p_t / p_{t-1} - 1 (length len(p) - 1)."""
    return p[1:] / p[:-1] - 1.0


def ret(p: FloatArray, n: int) -> float | None:
    """RETn = (p_T / p_{T-n} - 1) * 100."""
    w = _tail(p, n + 1)
    return None if w is None else float((w[-1] / w[0] - 1.0) * 100.0)


def vol(p: FloatArray, n: int) -> float | None:
    """VOLn = sd(r over n days, ddof=1) * sqrt(252) * 100."""
    w = _tail(p, n + 1)
    return None if w is None else float(np.std(returns(w), ddof=1) * np.sqrt(ANN) * 100.0)


def downside_vol(p: FloatArray, n: int = 60) -> float | None:
    """DVOLn = sqrt(sum(min(r, 0)^2) / n) * sqrt(252) * 100, over all n days."""
    w = _tail(p, n + 1)
    if w is None:
        return None
    r = np.minimum(returns(w), 0.0)
    return float(np.sqrt(np.mean(r * r)) * np.sqrt(ANN) * 100.0)


def drawdown(p: FloatArray, n: int = 60) -> float | None:
    """DDn = (p_T / max(p over the window) - 1) * 100: distance below the n-day high."""
    w = _tail(p, n + 1)
    return None if w is None else float((w[-1] / w.max() - 1.0) * 100.0)


def max_drawdown(p: FloatArray, n: int = 252) -> float | None:
    """MDD = min_t(p_t / max_{s<=t} p_s - 1) * 100 over the window (1 year = 252 days)."""
    w = _tail(p, n + 1)
    return None if w is None else float((w / np.maximum.accumulate(w) - 1.0).min() * 100.0)


def sharpe(p: FloatArray, n: int = 60) -> float | None:
    """SHARPE = mean(r) / sd(r, ddof=1) * sqrt(252) over n days; no risk-free rate.

    None when sd = 0 (the ratio is undefined, not zero).
    """
    w = _tail(p, n + 1)
    if w is None:
        return None
    r = returns(w)
    sd = np.std(r, ddof=1)
    return None if sd == 0 else float(np.mean(r) / sd * np.sqrt(ANN))


def beta(p: FloatArray, m: FloatArray, n: int = 252) -> float | None:
    """BETA = cov(r_i, r_m) / var(r_m) over n days (sample moments), m = SPY prices on the same dates."""
    wi, wm = _tail(p, n + 1), _tail(m, n + 1)
    if wi is None or wm is None:
        return None
    ri, rm = returns(wi), returns(wm)
    var = np.var(rm, ddof=1)
    return None if var == 0 else float(np.cov(ri, rm, ddof=1)[0, 1] / var)


def sma(p: FloatArray, n: int) -> float | None:
    """SMAn = mean of the last n prices."""
    w = _tail(p, n)
    return None if w is None else float(w.mean())


def mom200(p: FloatArray) -> float | None:
    """MOM200 = p_T / SMA200 (a ratio; above 1 means price is over its 200-day average)."""
    s = sma(p, 200)
    return None if s is None else float(p[-1] / s)


def mom12_1(p: FloatArray) -> float | None:
    """MOM12_1 = (p_{T-21} / p_{T-252} - 1) * 100: the 12-month return skipping the last month."""
    w = _tail(p, 253)
    return None if w is None else float((w[-22] / w[0] - 1.0) * 100.0)


def idiosyncratic_momentum(p: FloatArray, m: FloatArray, n: int = 60, beta_days: int = 252) -> float | None:
    """IDMOM = sum over the last n days of (r_i - BETA * r_m) * 100, BETA over ``beta_days``.

    The part of the recent return that the market exposure does not explain.
    """
    b = beta(p, m, beta_days)
    wi, wm = _tail(p, n + 1), _tail(m, n + 1)
    if b is None or wi is None or wm is None:
        return None
    return float(np.sum(returns(wi) - b * returns(wm)) * 100.0)


def trend(p: FloatArray, n: int = 60) -> float | None:
    """TREND = share of the last n daily returns that are positive."""
    w = _tail(p, n + 1)
    return None if w is None else float(np.mean(returns(w) > 0))


def relative_strength(p: FloatArray, m: FloatArray, n: int = 60) -> float | None:
    """RSn = RETn(ticker) - RETn(SPY), in percentage points."""
    a, b = ret(p, n), ret(m, n)
    return None if a is None or b is None else a - b


def avg_dollar_volume(p: FloatArray, v: FloatArray, n: int = 20) -> float | None:
    """ADVOL = mean(p_t * volume_t) over the last n days (USD, on the pack's price basis)."""
    wp, wv = _tail(p, n), _tail(v, n)
    return None if wp is None or wv is None else float(np.mean(wp * wv))
