"""Multi-quarter mode: consecutive quarterly allocations, rebalanced at each as-of close.

At each rebalance (the as-of close of quarter k, which is the last close of
quarter k-1) the portfolio is worth V. Holdings have drifted to values h_i;
the target is V * w_i. Then

    turnover_k = sum_i |V * w_i - h_i| / V        (over the union of tickers, cash excluded)
    cost_k     = cost_bps / 10^4 * turnover_k * V

and the cost is taken from the portfolio before buying the targets, so it shows
in the first daily return after the rebalance. The first purchase from cash
counts as turnover too (1.0 when fully invested). Metrics are computed over the
concatenated daily curve, with each quarter's cash earning that quarter's rate.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel

from eval import metrics as M
from eval.backtest import DEFAULT_CAPITAL, Metrics, holding_window, metrics_row, weight_vector
from eval.errors import InputError
from eval.market.calendar import Quarter
from eval.market.pack import Pack


class QuarterAllocation(BaseModel):
    quarter: str
    weights: dict[str, float]
    allow_cash: bool = False


class MultiQuarterResult(BaseModel):
    quarters: list[str]
    metrics: Metrics
    turnover: float  # summed over rebalances
    turnover_per_quarter: list[float]
    costs_usd: float
    dates: list[str]
    equity_curve: list[float]


def backtest_sequence(pack: Pack, steps: list[QuarterAllocation], rf: str = "dff", cost_bps: float = 0.0,
                      capital: float = DEFAULT_CAPITAL) -> MultiQuarterResult:
    if not steps:
        raise InputError("quarters", "no allocations given", "give at least one quarter")
    quarters = [Quarter.parse(s.quarter, f"steps[{i}].quarter") for i, s in enumerate(steps)]
    for i in range(1, len(quarters)):
        if quarters[i] != quarters[i - 1].next():
            raise InputError(f"steps[{i}].quarter", f"{quarters[i]} does not follow {quarters[i - 1]}", "give consecutive quarters")
    value, holdings = capital, {"CASH": capital}  # dollar value per ticker at the current mark
    curve, dates, rf_d_days, turnovers, costs = [capital], [], [], [], 0.0
    spy_curve: list[float] | None = []
    for i, (q, step) in enumerate(zip(quarters, steps)):
        win = holding_window(pack, q, list(step.weights), rf, where=f"steps[{i}]")
        w, cash_w = weight_vector(step.weights, win.tickers, step.allow_cash, where=f"steps[{i}].weights")
        target = {t: value * x for t, x in zip(win.tickers, w)} | {"CASH": value * cash_w}
        names = (set(target) | set(holdings)) - {"CASH"}
        traded = sum(abs(target.get(n, 0.0) - holdings.get(n, 0.0)) for n in names)
        turnover = traded / value
        cost = cost_bps / 1e4 * traded
        costs += cost
        value -= cost
        turnovers.append(turnover)
        shares = value * w / win.prices[0]
        cash0 = value * cash_w
        growth = (1.0 + win.rf_d) ** np.arange(len(win.dates))
        seg = shares @ win.prices.T + cash0 * growth
        curve.extend(seg[1:].tolist())
        dates.extend(str(d.date()) for d in win.dates[1:])
        rf_d_days.extend([win.rf_d] * win.trading_days)
        if spy_curve is not None and win.spy is not None:
            scale = spy_curve[-1] / win.spy[0] if spy_curve else 1.0 / win.spy[0]
            spy_curve = (spy_curve or [1.0]) + (win.spy[1:] * scale).tolist()
        else:
            spy_curve = None
        value = float(seg[-1])
        holdings = {t: float(shares[j] * win.prices[-1, j]) for j, t in enumerate(win.tickers)} | {"CASH": float(cash0 * growth[-1])}
    c = np.array(curve)[None, :]
    r = M.daily_returns(c)
    rf_d = np.array(rf_d_days)
    total = M.total_return_pct(c)
    spy = M.total_return_pct(np.array(spy_curve)) if spy_curve is not None else np.nan
    last_w = np.array([v for k, v in holdings.items() if k != "CASH"])
    arrays = {
        "total_return_pct": total,
        "spy_return_pct": np.array([spy]),
        "excess_return_pct": total - spy,
        "sharpe": M.sharpe(r, rf_d),
        "sortino": M.sortino(r, rf_d),
        "volatility": M.volatility(r),
        "max_drawdown_pct": M.max_drawdown_pct(c),
        "n_positions": np.array([int((last_w > 0).sum())]),
        "cash_pct": np.array([holdings["CASH"] / value * 100.0]),
        "trading_days": np.array([len(rf_d_days)]),
    }
    return MultiQuarterResult(
        quarters=[str(q) for q in quarters], metrics=metrics_row(arrays, 0, spy_missing=spy_curve is None),
        turnover=float(sum(turnovers)), turnover_per_quarter=turnovers, costs_usd=costs,
        dates=[str(pack.calendar.as_of(quarters[0]).date())] + dates, equity_curve=curve,
    )
