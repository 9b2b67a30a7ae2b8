"""Portfolio metrics over daily equity curves: pure numpy, vectorised over rows.

Every function takes curves of shape (..., T+1): the as-of mark followed by T
daily closes, so many portfolios are scored in one call. Conventions:

    r_t   = V_t / V_{t-1} - 1                   (T daily returns)
    rf_d  = (1 + rf) ** (1/252) - 1             (rf: annual rate as a fraction)

A value that is undefined (sd = 0, no downside days) is NaN here and becomes
null with a reason in the result object, never 0.
"""

from __future__ import annotations

import numpy as np

ANN = 252


def daily_rf(rf_annual: float) -> float:
    """rf_d = (1 + rf)^(1/252) - 1."""
    return (1.0 + rf_annual) ** (1.0 / ANN) - 1.0


def daily_returns(curves: np.ndarray) -> np.ndarray:
    """r_t = V_t / V_{t-1} - 1 along the last axis."""
    return curves[..., 1:] / curves[..., :-1] - 1.0


def total_return_pct(curves: np.ndarray) -> np.ndarray:
    """(V_T / V_0 - 1) * 100."""
    return (curves[..., -1] / curves[..., 0] - 1.0) * 100.0


def sharpe(r: np.ndarray, rf_d: float) -> np.ndarray:
    """mean(r - rf_d) / sd(r, ddof=1) * sqrt(252); NaN where sd = 0."""
    sd = np.std(r, axis=-1, ddof=1) if r.shape[-1] > 1 else np.full(r.shape[:-1], np.nan)
    ex = np.mean(r - rf_d, axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(sd > 0, ex / np.where(sd > 0, sd, 1.0) * np.sqrt(ANN), np.nan)


def sortino(r: np.ndarray, rf_d: float) -> np.ndarray:
    """mean(r - rf_d) / sqrt(sum(min(r - rf_d, 0)^2) / N) * sqrt(252), N = all days; NaN with no downside day."""
    ex = r - rf_d
    dd = np.sqrt(np.mean(np.minimum(ex, 0.0) ** 2, axis=-1))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(dd > 0, np.mean(ex, axis=-1) / np.where(dd > 0, dd, 1.0) * np.sqrt(ANN), np.nan)


def volatility(r: np.ndarray) -> np.ndarray:
    """sd(r, ddof=1) * sqrt(252), annualised, as a fraction; NaN with fewer than 2 returns."""
    if r.shape[-1] < 2:
        return np.full(r.shape[:-1], np.nan)
    return np.std(r, axis=-1, ddof=1) * np.sqrt(ANN)


def max_drawdown_pct(curves: np.ndarray) -> np.ndarray:
    """min_t (V_t / max_{s<=t} V_s - 1) * 100 (zero or negative)."""
    return (curves / np.maximum.accumulate(curves, axis=-1) - 1.0).min(axis=-1) * 100.0


#: Why a metric can be null, by name.
UNDEFINED = {
    "sharpe": "undefined: the daily returns have zero standard deviation",
    "sortino": "undefined: no day fell below the risk-free rate (zero downside deviation)",
}
