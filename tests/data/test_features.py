"""Each memo feature against an independent computation (pandas rolling / explicit loops)."""

import math

import numpy as np
import pandas as pd
import pytest

from madbench.data.market import features as F

rng = np.random.default_rng(42)
N = 400
spy = 100 * np.cumprod(1 + rng.normal(0.0003, 0.01, N))
px = 50 * np.cumprod(1 + 1.3 * (np.diff(spy, prepend=spy[0]) / spy) + rng.normal(0.0005, 0.02, N))
vol = rng.integers(10**6, 10**7, N).astype(float)
s = pd.Series(px)
r = s.pct_change()


def test_returns_over_windows():
    for n in (20, 60, 120, 252):
        assert F.ret(px, n) == pytest.approx((px[-1] / px[-1 - n] - 1) * 100, rel=1e-12)
    assert F.ret(px[:20], 20) is None  # needs 21 prices


def test_volatility_matches_pandas_rolling_std():
    for n in (20, 60):
        expected = r.rolling(n).std().iloc[-1] * math.sqrt(252) * 100
        assert F.vol(px, n) == pytest.approx(expected, rel=1e-10)


def test_downside_vol_uses_all_days_in_the_denominator():
    last = r.iloc[-60:].to_numpy()
    expected = math.sqrt(sum(min(x, 0.0) ** 2 for x in last) / 60) * math.sqrt(252) * 100
    assert F.downside_vol(px, 60) == pytest.approx(expected, rel=1e-12)


def test_drawdowns():
    window = px[-61:]
    assert F.drawdown(px, 60) == pytest.approx((window[-1] / window.max() - 1) * 100)
    w = px[-253:]
    peak, worst = -np.inf, 0.0
    for p in w:
        peak = max(peak, p)
        worst = min(worst, p / peak - 1)
    assert F.max_drawdown(px, 252) == pytest.approx(worst * 100, rel=1e-12)


def test_sharpe_and_undefined_case():
    last = r.iloc[-60:]
    assert F.sharpe(px, 60) == pytest.approx(last.mean() / last.std() * math.sqrt(252), rel=1e-10)
    flat = np.full(100, 10.0)
    assert F.sharpe(flat, 60) is None  # sd = 0: undefined, not 0


def test_beta_is_cov_over_var_against_spy():
    ri = pd.Series(px).pct_change().iloc[-252:]
    rm = pd.Series(spy).pct_change().iloc[-252:]
    expected = ri.cov(rm) / rm.var()
    assert F.beta(px, spy, 252) == pytest.approx(expected, rel=1e-10)
    assert F.beta(spy, spy, 252) == pytest.approx(1.0)


def test_moving_averages_and_momentum():
    for n in (20, 50, 200):
        assert F.sma(px, n) == pytest.approx(s.rolling(n).mean().iloc[-1], rel=1e-12)
    assert F.mom200(px) == pytest.approx(px[-1] / s.rolling(200).mean().iloc[-1], rel=1e-12)
    assert F.mom12_1(px) == pytest.approx((px[-22] / px[-253] - 1) * 100, rel=1e-12)


def test_idiosyncratic_momentum_removes_beta_times_market():
    b = pd.Series(px).pct_change().iloc[-252:].cov(pd.Series(spy).pct_change().iloc[-252:]) / pd.Series(spy).pct_change().iloc[-252:].var()
    ri = pd.Series(px).pct_change().iloc[-60:].to_numpy()
    rm = pd.Series(spy).pct_change().iloc[-60:].to_numpy()
    assert F.idiosyncratic_momentum(px, spy) == pytest.approx(sum(ri - b * rm) * 100, rel=1e-10)
    # a pure multiple of the market has no idiosyncratic return
    assert F.idiosyncratic_momentum(spy, spy) == pytest.approx(0.0, abs=1e-9)


def test_trend_relative_strength_and_dollar_volume():
    assert F.trend(px, 60) == pytest.approx((r.iloc[-60:] > 0).sum() / 60)
    assert F.relative_strength(px, spy, 60) == pytest.approx((px[-1] / px[-61] - spy[-1] / spy[-61]) * 100)
    assert F.avg_dollar_volume(px, vol, 20) == pytest.approx(float(np.mean(px[-20:] * vol[-20:])))


def test_missing_value_inside_a_window_gives_none():
    holed = px.copy()
    holed[-5] = np.nan
    assert F.ret(holed, 20) is None
    assert F.vol(holed, 60) is None
    assert F.ret(holed, 2) == pytest.approx((px[-1] / px[-3] - 1) * 100)
