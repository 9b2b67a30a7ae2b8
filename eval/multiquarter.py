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
from pydantic import BaseModel, ConfigDict

from madbench.data.errors import InputError
from madbench.data.market.calendar import Quarter
from madbench.data.market.pack import Pack
from madbench.eval.backtest import DEFAULT_CAPITAL, Metrics, holding_window, metric_arrays, metrics_row, simulate, weight_vector


class QuarterAllocation(BaseModel):
    model_config = ConfigDict(extra="forbid")

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
                      capital: float = DEFAULT_CAPITAL, where: str = "steps") -> MultiQuarterResult:
    """``steps`` held one after the other (module docstring); errors name ``where`` (the file the steps came from)."""
    if not steps:
        raise InputError(where, "no allocations given", "give at least one quarter")
    quarters = [Quarter.parse(s.quarter, f"{where}[{i}].quarter") for i, s in enumerate(steps)]
    for i in range(1, len(quarters)):
        if quarters[i] != quarters[i - 1].next():
            raise InputError(f"{where}[{i}].quarter", f"{quarters[i]} does not follow {quarters[i - 1]}", "give consecutive quarters")
    value, holdings = capital, {"CASH": capital}  # dollar value per position at the current mark
    curve, rf_d_days, turnovers, costs = [capital], [], [], 0.0
    spy_returns: list[np.ndarray] | None = []
    for i, (q, step) in enumerate(zip(quarters, steps, strict=True)):
        win = holding_window(pack, q, list(step.weights), rf, where=f"{where}[{i}]")
        w, cash_w = weight_vector(step.weights, win.tickers, step.allow_cash, where=f"{where}[{i}].weights")
        target = {t: value * x for t, x in zip(win.tickers, w, strict=True)}
        traded = sum(abs(target.get(n, 0.0) - holdings.get(n, 0.0)) for n in (set(target) | set(holdings)) - {"CASH"})
        turnovers.append(traded / value)
        cost = cost_bps / 1e4 * traded
        costs += cost
        value -= cost
        seg, _ = simulate(win, w[None, :], capital=value)
        curve.extend(seg[0, 1:].tolist())
        rf_d_days.extend([win.rf_d] * win.trading_days)
        spy_returns = spy_returns + [win.spy[1:] / win.spy[:-1]] if spy_returns is not None and win.spy is not None else None
        growth = win.prices[-1] / win.prices[0]
        holdings = {t: value * x * g for t, x, g in zip(win.tickers, w, growth, strict=True)}
        holdings["CASH"] = value * cash_w * (1.0 + win.rf_d) ** win.trading_days
        value = float(seg[0, -1])
    c = np.array(curve)[None, :]
    spy_curve = np.concatenate([[1.0], np.cumprod(np.concatenate(spy_returns))]) if spy_returns is not None else None
    positions = np.array([[v > 0 for k, v in holdings.items() if k != "CASH"]])
    arrays = metric_arrays(c, np.array(rf_d_days), spy_curve, positions, np.array([holdings["CASH"] / value * 100.0]))
    return MultiQuarterResult(
        quarters=[str(q) for q in quarters], metrics=metrics_row(arrays, 0, spy_missing=spy_curve is None),
        turnover=float(sum(turnovers)), turnover_per_quarter=turnovers, costs_usd=costs,
        dates=[str(d.date()) for d in _chained_dates(pack, quarters)], equity_curve=curve,
    )


def _chained_dates(pack: Pack, quarters: list[Quarter]):
    """The first as-of date, then every trading day of each quarter."""
    yield pack.calendar.as_of(quarters[0])
    for q in quarters:
        yield from pack.calendar.holding_window(q)[1:]
