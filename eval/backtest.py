"""Broker and holding period: an allocation -> a daily equity curve -> metrics.

One quarter: start with fresh cash (default $100,000), buy at the as-of close
(the last trading day before the quarter, the close the memo describes), hold
to the quarter's last trading day. Shares are fractional unless
``whole_shares``; a declared cash slot stays uninvested and accrues the
risk-free rate compounded per trading day. Prices are the pack's price basis
per ticker (adj_close, a total-return series, else close), recorded in the
result. A missing price inside the window is an error naming the dates, never
forward-filled.

The core (`simulate`, `evaluate`) is vectorised over K portfolios that share a
window, so baselines, grids and benchmarks cost one matrix product.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from pydantic import BaseModel

from madbench.data.errors import InputError
from madbench.data.market.calendar import Quarter
from madbench.data.market.pack import BENCHMARK, Pack
from madbench.eval import metrics as M

DEFAULT_CAPITAL = 100_000.0
WEIGHT_TOL = 1e-6
RF_SERIES = {"dff": "DFF", "dtb3": "DTB3", "0": None}


@dataclass(frozen=True)
class Window:
    quarter: Quarter
    dates: pd.DatetimeIndex  # the as-of date, then every trading day of the quarter
    tickers: tuple[str, ...]
    prices: np.ndarray  # (T+1, n)
    spy: np.ndarray | None  # (T+1,) or None when the pack has no SPY
    rf_annual: float  # as a fraction
    rf_source: str
    price_basis: dict[str, str]

    @property
    def rf_d(self) -> float:
        return M.daily_rf(self.rf_annual)

    @property
    def trading_days(self) -> int:
        return len(self.dates) - 1


def risk_free(pack: Pack, as_of: pd.Timestamp, rf: str, where: str = "--rf") -> tuple[float, str]:
    """Annual risk-free rate (fraction) published by ``as_of``: DFF, DTB3 or 0."""
    key = str(rf).lower()
    if key not in RF_SERIES:
        raise InputError(where, f"unknown risk-free choice {rf!r}", "use dff, dtb3 or 0")
    series = RF_SERIES[key]
    if series is None:
        return 0.0, "0"
    ps = pack.published(series)
    obs = ps.latest(as_of) if ps is not None else None
    if obs is None:
        raise InputError(where, f"the pack has no {series} value published by {as_of.date()}", "use --rf 0 or a pack with that series")
    return obs.value / 100.0, f"{series} {obs.date.date()} ({obs.value:.2f}%)"


def holding_window(pack: Pack, quarter: Quarter, tickers: list[str], rf: str = "dff", where: str = "backtest",
                   where_tickers: str | None = None, where_quarter: str | None = None) -> Window:
    where_tickers = where_tickers or f"{where}.tickers"
    where_quarter = where_quarter or f"{where}.quarter"
    missing = pack.missing_tickers(list(tickers))
    if missing:
        raise InputError(where_tickers, f"not in the pack {pack.root}: {', '.join(missing)}", "use tickers the pack has")
    dates = pack.calendar.holding_window(quarter, where=where_quarter)
    i0, i1 = pack.calendar.index_of(dates[0]), pack.calendar.index_of(dates[-1])
    cols = [pack.tickers.index(t) for t in tickers]
    prices = pack.px_np[i0 : i1 + 1, cols]
    holes = np.isnan(prices)
    if holes.any():
        j = int(np.flatnonzero(holes.any(axis=0))[0])
        bad = dates[holes[:, j]]
        shown = ", ".join(str(d.date()) for d in bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        raise InputError(where_tickers, f"{tickers[j]} has no price on {shown} inside the {quarter} holding window",
                         "drop the ticker or repair the pack; prices are never forward-filled")
    spy = pack.px_np[i0 : i1 + 1, pack.tickers.index(BENCHMARK)] if pack.has_ticker(BENCHMARK) else None
    rf_annual, rf_source = risk_free(pack, dates[0], rf)
    return Window(quarter, dates, tuple(tickers), prices, spy, rf_annual, rf_source,
                  {t: pack.price_basis[t] for t in tickers})


def weight_vector(weights: dict[str, float], tickers: tuple[str, ...] | list[str], allow_cash: bool, where: str = "weights") -> tuple[np.ndarray, float]:
    """Check an allocation and return (weights in ``tickers`` order, cash fraction)."""
    outside = sorted(set(weights) - set(tickers))
    if outside:
        raise InputError(where, f"tickers outside the scenario: {', '.join(outside)}", f"allocate only to {', '.join(tickers)}")
    w = np.array([float(weights.get(t, 0.0)) for t in tickers])
    if not np.isfinite(w).all():
        raise InputError(where, "weights must be finite numbers", "fix the weights")
    neg = [t for t, x in zip(tickers, w, strict=True) if x < 0]
    if neg:
        raise InputError(where, f"negative weights for {', '.join(neg)}", "weights are long-only: use 0 or more")
    total = float(w.sum())
    if allow_cash:
        if total > 1 + WEIGHT_TOL:
            raise InputError(where, f"weights sum to {total:.6f} > 1", "scale them down; the rest stays in cash")
        return w, max(0.0, 1.0 - total)
    if abs(total - 1.0) > WEIGHT_TOL:
        raise InputError(where, f"weights sum to {total:.6f}, not 1, and no cash slot is declared", "make them sum to 1 or allow cash")
    return w, 0.0


def simulate(window: Window, W: np.ndarray, capital: float = DEFAULT_CAPITAL, whole_shares: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Equity curves (K, T+1) and initial cash (K,) for weight rows W (K, n).

    shares = capital * w / P_0 (floored when ``whole_shares``); the rest is cash,
    which grows as cash_0 * (1 + rf_d)^t.
    """
    W = np.atleast_2d(np.asarray(W, dtype=float))
    shares = capital * W / window.prices[0]
    if whole_shares:
        shares = np.floor(shares + 1e-9)
        cash0 = capital - shares @ window.prices[0]
    else:
        cash0 = capital * (1.0 - W.sum(axis=1))
    growth = (1.0 + window.rf_d) ** np.arange(len(window.dates))
    curves = shares @ window.prices.T + cash0[:, None] * growth[None, :]
    return curves, cash0


class Metrics(BaseModel):
    total_return_pct: float
    spy_return_pct: float | None
    excess_return_pct: float | None
    sharpe: float | None
    sortino: float | None
    volatility: float | None
    max_drawdown_pct: float
    n_positions: int
    cash_pct: float
    trading_days: int
    null_reasons: dict[str, str] = {}


def metric_arrays(curves: np.ndarray, rf_d, spy_curve: np.ndarray | None, held: np.ndarray, cash_pct: np.ndarray) -> dict[str, np.ndarray]:
    """All metrics for K curves as arrays (NaN where undefined).

    ``rf_d`` is a scalar or one rate per day; ``held`` (K, n) marks positions > 0.
    """
    r = M.daily_returns(curves)
    total = M.total_return_pct(curves)
    spy = M.total_return_pct(spy_curve) if spy_curve is not None else np.nan
    return {
        "total_return_pct": total,
        "spy_return_pct": np.full(len(total), spy),
        "excess_return_pct": total - spy,
        "sharpe": M.sharpe(r, rf_d),
        "sortino": M.sortino(r, rf_d),
        "volatility": M.volatility(r),
        "max_drawdown_pct": M.max_drawdown_pct(curves),
        "n_positions": np.atleast_2d(held).sum(axis=1),
        "cash_pct": np.asarray(cash_pct, dtype=float),
        "trading_days": np.full(len(total), r.shape[-1]),
    }


def evaluate(window: Window, curves: np.ndarray, W: np.ndarray, cash0: np.ndarray, capital: float) -> dict[str, np.ndarray]:
    """Metrics of K single-window curves (see ``metric_arrays``)."""
    return metric_arrays(curves, window.rf_d, window.spy, np.atleast_2d(W) > 0, cash0 / capital * 100.0)


def metrics_row(arrays: dict[str, np.ndarray], k: int = 0, spy_missing: bool = False) -> Metrics:
    values, reasons = {}, {}
    short = int(arrays["trading_days"][k]) < 2
    for name, arr in arrays.items():
        v = arr[k].item()
        if isinstance(v, float) and np.isnan(v):
            if name in ("spy_return_pct", "excess_return_pct") and spy_missing:
                reasons[name] = f"no {BENCHMARK} prices in the pack"
            elif short and name in ("sharpe", "sortino", "volatility"):
                reasons[name] = "undefined: fewer than 2 daily returns"
            else:
                reasons[name] = M.UNDEFINED[name]
            v = None
        values[name] = v
    return Metrics(**values, null_reasons=reasons)


class BacktestResult(BaseModel):
    quarter: str
    as_of: str
    end: str
    tickers: list[str]
    weights: dict[str, float]
    capital: float
    whole_shares: bool
    rf_annual: float
    rf_source: str
    price_basis: dict[str, str]
    metrics: Metrics
    dates: list[str]
    equity_curve: list[float]


def backtest(window: Window, weights: dict[str, float], allow_cash: bool = False, capital: float = DEFAULT_CAPITAL,
             whole_shares: bool = False, where: str = "weights") -> BacktestResult:
    w, _ = weight_vector(weights, window.tickers, allow_cash, where)
    curves, cash0 = simulate(window, w[None, :], capital, whole_shares)
    arrays = evaluate(window, curves, w[None, :], cash0, capital)
    return _result(window, w, curves[0], arrays, capital, whole_shares)


def backtest_positions(window: Window, shares: dict[str, float], cash: float, where: str = "positions") -> BacktestResult:
    """Explicit share counts plus cash (to check against other systems' books)."""
    outside = sorted(set(shares) - set(window.tickers))
    if outside:
        raise InputError(where, f"tickers outside the window: {', '.join(outside)}", f"use only {', '.join(window.tickers)}")
    q = np.array([float(shares.get(t, 0.0)) for t in window.tickers])
    if (q < 0).any() or cash < 0:
        raise InputError(where, "negative shares or cash", "positions are long-only")
    capital = float(q @ window.prices[0] + cash)
    if capital <= 0:
        raise InputError(where, "the positions are worth nothing at the as-of close", "give some shares or cash")
    w = q * window.prices[0] / capital  # the same book expressed as weights of its value
    curves, cash0 = simulate(window, w[None, :], capital)
    arrays = evaluate(window, curves, w[None, :], cash0, capital)
    return _result(window, w, curves[0], arrays, capital, whole_shares=False)


def _result(window: Window, w: np.ndarray, curve: np.ndarray, arrays, capital: float, whole_shares: bool) -> BacktestResult:
    return BacktestResult(
        quarter=str(window.quarter), as_of=str(window.dates[0].date()), end=str(window.dates[-1].date()),
        tickers=list(window.tickers), weights={t: float(x) for t, x in zip(window.tickers, w, strict=True)}, capital=capital,
        whole_shares=whole_shares, rf_annual=window.rf_annual, rf_source=window.rf_source, price_basis=window.price_basis,
        metrics=metrics_row(arrays, 0, spy_missing=window.spy is None),
        dates=[str(d.date()) for d in window.dates], equity_curve=[float(x) for x in curve],
    )
