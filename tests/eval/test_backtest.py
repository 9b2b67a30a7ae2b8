"""Backtest conventions and every metric formula, pinned against hand computations."""

import math

import numpy as np
import pandas as pd
import pytest

from madbench.data.errors import InputError
from madbench.data.market.calendar import Quarter
from madbench.data.market.pack import load_pack
from madbench.eval.backtest import Window, backtest, backtest_positions, holding_window, simulate
from madbench.eval.baselines import baseline_metrics, ivol_weights, minvar_weights
from madbench.eval.multiquarter import QuarterAllocation, backtest_sequence
from tests.conftest import SHARED_MARKET, requires_shared


def toy_window(prices, spy=None, rf=0.0):
    prices = np.asarray(prices, dtype=float)
    n = prices.shape[1]
    dates = pd.bdate_range("2022-03-31", periods=len(prices))
    return Window(Quarter(2022, 2), dates, tuple(f"T{i}" for i in range(n)), prices,
                  None if spy is None else np.asarray(spy, dtype=float), rf, "test", {f"T{i}": "adj_close" for i in range(n)})


# ---------------------------------------------------------------- formulas by hand

CURVE = [100.0, 102.0, 99.0, 103.0, 101.0]


def hand_returns(v):
    return [v[i] / v[i - 1] - 1 for i in range(1, len(v))]


def test_metrics_match_hand_computation_without_rf():
    r = hand_returns(CURVE)
    n = len(r)
    mean = sum(r) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in r) / (n - 1))
    down = math.sqrt(sum(min(x, 0) ** 2 for x in r) / n)
    w = toy_window([[c] for c in CURVE], spy=[10, 10.5, 10, 10, 11])
    res = backtest(w, {"T0": 1.0})
    m = res.metrics
    assert m.total_return_pct == pytest.approx(1.0)
    assert m.spy_return_pct == pytest.approx(10.0) and m.excess_return_pct == pytest.approx(-9.0)
    assert m.sharpe == pytest.approx(mean / sd * math.sqrt(252))
    assert m.sortino == pytest.approx(mean / down * math.sqrt(252))
    assert m.volatility == pytest.approx(sd * math.sqrt(252))
    peak, mdd = 0, 0
    for v in CURVE:
        peak = max(peak, v)
        mdd = min(mdd, v / peak - 1)
    assert m.max_drawdown_pct == pytest.approx(mdd * 100)
    assert (m.n_positions, m.cash_pct, m.trading_days) == (1, 0.0, 4)
    assert res.equity_curve == pytest.approx([100_000 * c / 100 for c in CURVE])


def test_metrics_with_rf_and_a_cash_slot():
    rf = 0.05
    rf_d = (1 + rf) ** (1 / 252) - 1
    w = toy_window([[c] for c in CURVE], rf=rf)
    res = backtest(w, {"T0": 0.6}, allow_cash=True)
    v = [60_000 * c / 100 + 40_000 * (1 + rf_d) ** t for t, c in enumerate(CURVE)]
    assert res.equity_curve == pytest.approx(v, rel=1e-12)
    r = hand_returns(v)
    n = len(r)
    ex = [x - rf_d for x in r]
    sd = math.sqrt(sum((x - sum(r) / n) ** 2 for x in r) / (n - 1))
    assert res.metrics.sharpe == pytest.approx(sum(ex) / n / sd * math.sqrt(252), rel=1e-10)
    assert res.metrics.sortino == pytest.approx(sum(ex) / n / math.sqrt(sum(min(x, 0) ** 2 for x in ex) / n) * math.sqrt(252), rel=1e-10)
    assert res.metrics.cash_pct == pytest.approx(40.0)


def test_undefined_metrics_are_null_with_reason():
    flat = toy_window([[10.0]] * 5)
    m = backtest(flat, {"T0": 1.0}).metrics
    assert m.sharpe is None and "zero standard deviation" in m.null_reasons["sharpe"]
    assert m.sortino is None and "downside" in m.null_reasons["sortino"]
    assert m.spy_return_pct is None and "SPY" in m.null_reasons["spy_return_pct"]
    one_day = backtest(toy_window([[10.0], [11.0]]), {"T0": 1.0}).metrics
    assert one_day.volatility is None and "fewer than 2" in one_day.null_reasons["volatility"]
    assert "fewer than 2" in one_day.null_reasons["sharpe"]
    up = toy_window([[10.0], [11.0], [12.5], [13.0]])
    m = backtest(up, {"T0": 1.0}).metrics
    assert m.sortino is None and m.sharpe is not None


def test_whole_shares_keep_the_remainder_in_cash():
    w = toy_window([[333.0, 70.0], [340.0, 71.0], [338.0, 72.5]])
    res = backtest(w, {"T0": 0.5, "T1": 0.5}, whole_shares=True)
    shares = [math.floor(50_000 / 333), math.floor(50_000 / 70)]
    cash = 100_000 - shares[0] * 333 - shares[1] * 70
    assert res.metrics.cash_pct == pytest.approx(cash / 1000)
    assert res.equity_curve[-1] == pytest.approx(shares[0] * 338 + shares[1] * 72.5 + cash)


def test_positions_equal_the_same_weights():
    w = toy_window([[50.0, 20.0], [55.0, 19.0], [60.0, 21.0]])
    by_pos = backtest_positions(w, {"T0": 100, "T1": 250}, cash=0.0)
    by_w = backtest(w, {"T0": 0.5, "T1": 0.5}, capital=10_000)
    assert by_pos.equity_curve == pytest.approx(by_w.equity_curve)
    assert by_pos.metrics.sharpe == pytest.approx(by_w.metrics.sharpe)


def test_vectorised_rows_equal_single_runs():
    rng = np.random.default_rng(0)
    w = toy_window(100 * np.cumprod(1 + rng.normal(0, 0.01, (63, 5)), axis=0))
    W = rng.dirichlet(np.ones(5), size=7)
    curves, _ = simulate(w, W)
    for k in range(7):
        single = backtest(w, {f"T{i}": W[k, i] for i in range(5)}, allow_cash=True)
        assert single.equity_curve == pytest.approx(curves[k].tolist(), rel=1e-12)


@pytest.mark.parametrize("weights, allow_cash, needle", [
    ({"T0": -0.1, "T1": 1.1}, False, "negative weights for T0"),
    ({"T0": 0.5, "T1": 0.4}, False, "sum to 0.900000, not 1"),
    ({"T0": 0.7, "T1": 0.4}, True, "> 1"),
    ({"T0": 0.5, "XX": 0.5}, False, "outside the scenario: XX"),
])
def test_bad_weights_are_rejected(weights, allow_cash, needle):
    with pytest.raises(InputError, match=needle.replace("(", r"\(").replace(">", ">")):
        backtest(toy_window([[1.0, 1.0], [1.1, 1.0]]), weights, allow_cash=allow_cash)


def test_missing_price_inside_window_names_dates(make_pack):
    def hole(t):
        p = t["prices"]
        t["prices"] = p.drop(p[(p.ticker == "BBB") & (pd.to_datetime(p.date).isin([pd.Timestamp("2022-05-02"), pd.Timestamp("2022-05-03")]))].index)
    pack = load_pack(make_pack(edit=hole))
    with pytest.raises(InputError, match="BBB has no price on 2022-05-02, 2022-05-03"):
        holding_window(pack, Quarter(2022, 2), ["AAA", "BBB"])
    with pytest.raises(InputError, match="as-of date of 2030Q1"):
        holding_window(pack, Quarter(2030, 1), ["AAA"])


def test_window_and_risk_free_choices(make_pack):
    pack = load_pack(make_pack())
    w = holding_window(pack, Quarter(2022, 2), ["AAA"], rf="dff")
    assert w.dates[0] == pd.Timestamp("2022-03-31") and w.dates[1] == pd.Timestamp("2022-04-01")
    assert w.dates[-1] == pd.Timestamp("2022-06-30")
    dff = pack.macro[(pack.macro.series == "DFF") & (pack.macro.date <= "2022-03-30")].sort_values("date").value.iloc[-1]
    assert w.rf_annual == pytest.approx(dff / 100)
    assert holding_window(pack, Quarter(2022, 2), ["AAA"], rf="0").rf_annual == 0.0
    assert holding_window(pack, Quarter(2022, 2), ["AAA"], rf="dtb3").rf_source.startswith("DTB3")


def test_baselines_weights(make_pack):
    pack = load_pack(make_pack())
    q, t = Quarter(2022, 2), ["AAA", "BBB", "CCC"]
    w = ivol_weights(pack, q, t)
    i = pack.calendar.index_of(pd.Timestamp("2022-03-31"))
    r = np.diff(pack.px_np[i - 60 : i + 1, [pack.tickers.index(x) for x in t]], axis=0) / pack.px_np[i - 60 : i, [pack.tickers.index(x) for x in t]]
    inv = 1 / r.std(axis=0, ddof=1)
    assert w == pytest.approx(inv / inv.sum())
    mv = minvar_weights(pack, q, t)
    assert mv.sum() == pytest.approx(1) and (mv >= -1e-12).all()
    r1 = np.diff(pack.px_np[i - 252 : i + 1, [pack.tickers.index(x) for x in t]], axis=0) / pack.px_np[i - 252 : i, [pack.tickers.index(x) for x in t]]
    cov = np.cov(r1, rowvar=False)
    rng = np.random.default_rng(1)
    for trial in rng.dirichlet(np.ones(3), size=200):  # no feasible point has lower variance
        assert mv @ cov @ mv <= trial @ cov @ trial + 1e-12
    names = set(baseline_metrics(pack, q, t))
    assert names == {"equal", "ivol", "minvar", "spy"}


def test_multi_quarter_turnover_costs_and_chaining(make_pack):
    pack = load_pack(make_pack())
    steps = [QuarterAllocation(quarter="2022Q1", weights={"AAA": 1.0}), QuarterAllocation(quarter="2022Q2", weights={"BBB": 1.0})]
    free = backtest_sequence(pack, steps, rf="0", cost_bps=0)
    paid = backtest_sequence(pack, steps, rf="0", cost_bps=25)
    assert free.turnover_per_quarter == pytest.approx([1.0, 2.0])
    a = backtest(holding_window(pack, Quarter(2022, 1), ["AAA"], rf="0"), {"AAA": 1.0}).metrics.total_return_pct
    b = backtest(holding_window(pack, Quarter(2022, 2), ["BBB"], rf="0"), {"BBB": 1.0}).metrics.total_return_pct
    assert free.metrics.total_return_pct == pytest.approx(((1 + a / 100) * (1 + b / 100) - 1) * 100)
    expected_costs = 100_000 * 0.0025 * 1.0 + (100_000 - 250) * (1 + a / 100) * 0.0025 * 2.0
    assert paid.costs_usd == pytest.approx(expected_costs)
    assert paid.metrics.total_return_pct < free.metrics.total_return_pct
    with pytest.raises(InputError, match="does not follow"):
        backtest_sequence(pack, [steps[0], QuarterAllocation(quarter="2022Q3", weights={"AAA": 1.0})])


# ---------------------------------------------------------------- real data

@requires_shared
@pytest.mark.parametrize("quarter, expected", [("2022Q2", -16.11), ("2023Q2", 8.68)])
def test_spy_quarter_returns(quarter, expected):
    pack = load_pack(SHARED_MARKET)
    m = backtest(holding_window(pack, Quarter.parse(quarter), ["SPY"]), {"SPY": 1.0}).metrics
    assert m.total_return_pct == pytest.approx(expected, abs=0.05)


@requires_shared
def test_equal_weight_2022q1_matches_independent_computation():
    pack = load_pack(SHARED_MARKET)
    res = backtest(holding_window(pack, Quarter(2022, 1), ["AAPL", "MSFT", "XOM"]), {t: 1 / 3 for t in ("AAPL", "MSFT", "XOM")})
    raw = pd.read_parquet(SHARED_MARKET / "prices.parquet")
    raw["date"] = pd.to_datetime(raw["date"])
    px = raw[raw.ticker.isin(["AAPL", "MSFT", "XOM"])].pivot(index="date", columns="ticker", values="adj_close")
    px = px[(px.index >= "2021-12-31") & (px.index <= "2022-03-31")]
    curve = (100_000 / 3 / px.iloc[0] * px).sum(axis=1)
    assert res.dates[0] == "2021-12-31" and res.dates[-1] == "2022-03-31"
    assert np.max(np.abs(np.array(res.equity_curve) - curve.to_numpy())) < 1e-9 * 100_000
    r = curve.pct_change().dropna()
    macro = pd.read_parquet(SHARED_MARKET / "macro.parquet")
    dff = macro[(macro.series == "DFF") & (pd.to_datetime(macro.date) <= "2021-12-30")].sort_values("date").value.iloc[-1] / 100
    rf_d = (1 + dff) ** (1 / 252) - 1
    assert res.metrics.total_return_pct == pytest.approx((curve.iloc[-1] / 100_000 - 1) * 100, abs=1e-9)
    assert res.metrics.sharpe == pytest.approx((r - rf_d).mean() / r.std() * np.sqrt(252), abs=1e-9)
    assert res.metrics.volatility == pytest.approx(r.std() * np.sqrt(252), abs=1e-9)
