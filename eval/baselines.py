"""Per-scenario baselines, stored beside every run so "beats 1/N" is a column.

- ``equal``: w_i = 1/N.
- ``spy``: all in SPY over the same window.
- ``ivol``: w_i ∝ 1 / sd_i, sd over the 60 daily returns up to the as-of date.
- ``minvar``: argmin w'Σw subject to sum(w) = 1, 0 <= w_i <= 1 (long-only), Σ the
  sample covariance of the 252 daily returns up to the as-of date (scipy SLSQP).

Baselines are fully invested and ignore the scenario's max_weight: they are
reference portfolios, not constrained competitors.
"""

from __future__ import annotations

import numpy as np

from madbench.data.errors import InputError
from madbench.data.market.calendar import Quarter
from madbench.data.market.pack import BENCHMARK, Pack
from madbench.eval.backtest import DEFAULT_CAPITAL, Metrics, Window, evaluate, holding_window, metrics_row, simulate

IVOL_DAYS = 60
MINVAR_DAYS = 252
BASELINES = ("equal", "spy", "ivol", "minvar")


def _history_returns(pack: Pack, quarter: Quarter, tickers: list[str], days: int, what: str) -> np.ndarray:
    as_of = pack.calendar.as_of(quarter)
    i = pack.calendar.index_of(as_of)
    if i < days:
        raise InputError(what, f"needs {days} daily returns before {as_of.date()}, the pack has {i}", "use a later quarter")
    p = pack.px_np[i - days : i + 1, [pack.tickers.index(t) for t in tickers]]
    short = [t for t, bad in zip(tickers, np.isnan(p).any(axis=0), strict=True) if bad]
    if short:
        raise InputError(what, f"{', '.join(short)} lack {days} days of prices before {as_of.date()}", "drop them or use a later quarter")
    return p[1:] / p[:-1] - 1.0


def equal_weights(n: int) -> np.ndarray:
    return np.full(n, 1.0 / n)


def ivol_weights(pack: Pack, quarter: Quarter, tickers: list[str]) -> np.ndarray:
    """w_i = (1/sd_i) / sum_j (1/sd_j), sd over the last 60 daily returns (ddof=1)."""
    sd = np.std(_history_returns(pack, quarter, tickers, IVOL_DAYS, "ivol baseline"), axis=0, ddof=1)
    if (sd <= 0).any():
        raise InputError("ivol baseline", "a ticker has zero volatility over 60 days", "drop it")
    inv = 1.0 / sd
    return inv / inv.sum()


def minvar_weights(pack: Pack, quarter: Quarter, tickers: list[str]) -> np.ndarray:
    """Long-only minimum variance on the preceding year of daily returns."""
    from scipy.optimize import minimize
    cov = np.cov(_history_returns(pack, quarter, tickers, MINVAR_DAYS, "minvar baseline"), rowvar=False, ddof=1)
    n = len(tickers)
    if n == 1:
        return np.ones(1)
    res = minimize(lambda w: w @ cov @ w, equal_weights(n), jac=lambda w: 2 * cov @ w, method="SLSQP",
                   bounds=[(0.0, 1.0)] * n,
                   # analytic gradients: SLSQP otherwise differences the constraint numerically at every step
                   constraints=[{"type": "eq", "fun": lambda w: w.sum() - 1.0, "jac": lambda w: np.ones_like(w)}],
                   options={"ftol": 1e-12, "maxiter": 500})
    if not res.success:
        raise RuntimeError(f"minimum-variance optimisation failed for {quarter} {tickers}: {res.message}")
    w = np.clip(res.x, 0.0, None)
    return w / w.sum()


def baseline_weights(pack: Pack, quarter: Quarter, tickers: list[str], name: str) -> np.ndarray:
    """The weights of baseline ``name``: a function of the pack's prices alone, so computed once per pack, scenario
    and name (every config and replicate of a scenario holds the same baselines; minvar is an optimisation)."""
    weights = pack.derived(("baseline_weights", name, str(quarter), tuple(tickers)),
                           lambda: _baseline_weights(pack, quarter, tickers, name))
    return weights.copy()


def _baseline_weights(pack: Pack, quarter: Quarter, tickers: list[str], name: str) -> np.ndarray:
    if name == "equal":
        return equal_weights(len(tickers))
    if name == "ivol":
        return ivol_weights(pack, quarter, tickers)
    if name == "minvar":
        return minvar_weights(pack, quarter, tickers)
    raise InputError("--weights", f"unknown baseline {name!r}", "use one of equal, ivol, minvar or a JSON file")


def baseline_metrics(pack: Pack, quarter: Quarter, tickers: list[str], rf: str = "dff",
                     capital: float = DEFAULT_CAPITAL, window: Window | None = None) -> dict[str, Metrics]:
    """Metrics of every baseline for one scenario, keyed by baseline name."""
    window = window or holding_window(pack, quarter, tickers, rf)
    W = np.stack([baseline_weights(pack, quarter, tickers, b) for b in ("equal", "ivol", "minvar")])
    curves, cash0 = simulate(window, W, capital)
    arrays = evaluate(window, curves, W, cash0, capital)
    out = {name: metrics_row(arrays, k, spy_missing=window.spy is None) for k, name in enumerate(("equal", "ivol", "minvar"))}
    if pack.has_ticker(BENCHMARK):
        spy_w = holding_window(pack, quarter, [BENCHMARK], rf)
        c, c0 = simulate(spy_w, np.ones((1, 1)), capital)
        out["spy"] = metrics_row(evaluate(spy_w, c, np.ones((1, 1)), c0, capital), 0)
    return out
