"""Planning that matches the analysis: scenarios clustered by quarter (Kish design effect) and a safeguarded effect."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from madbench.eval.stats.analysis import analyse
from madbench.eval.stats.power import (
    clustered_power,
    design_effect,
    icc_oneway,
    plan_from_pilot,
    safeguard_effect,
    scenarios_needed,
)
from tests.eval.stats.test_units import replicated_runs


def test_icc_matches_the_anova_estimator_on_balanced_groups():
    rng = np.random.default_rng(1)
    groups = np.repeat(np.arange(8), 4)
    x = rng.normal(0, 1, 8)[groups] + rng.normal(0, 0.7, 32)
    frame = pd.DataFrame({"x": x, "g": groups})
    msb = 4 * frame.groupby("g").x.mean().var(ddof=1)  # balanced: MSB = m · var of group means
    msw = frame.groupby("g").x.var(ddof=1).mean()
    assert icc_oneway(x, groups) == pytest.approx((msb - msw) / (msb + 3 * msw))
    assert icc_oneway(rng.normal(size=32), groups) >= 0  # truncated, never negative
    assert np.isnan(icc_oneway(x, np.zeros(32)))


def test_design_effect_and_safeguard_effect():
    assert design_effect(3, 0.0) == 1.0 and design_effect(3, 0.5) == pytest.approx(2.0)
    # the 60% interval's bound nearer zero: |d̄| − t_{0.8, df}·SE
    assert safeguard_effect(0.3, 0.1, 20) == pytest.approx(0.3 - stats.t.ppf(0.8, 20) * 0.1)
    assert safeguard_effect(-0.3, 0.1, 20) == pytest.approx(0.3 - stats.t.ppf(0.8, 20) * 0.1)
    assert safeguard_effect(0.05, 0.1, 20) == 0.0


def test_a_plan_shrinks_the_pilot_effect_and_inflates_by_the_design_effect():
    rng = np.random.default_rng(2)
    quarters = np.repeat([f"Q{i}" for i in range(6)], 3)
    d = 0.3 + rng.normal(0, 0.3, 6)[np.arange(18) // 3] + rng.normal(0, 0.2, 18)
    plan = plan_from_pilot(d, quarters, [0.8])
    sd = d.std(ddof=1)
    effect = safeguard_effect(d.mean(), sd / math.sqrt(18), 17)
    assert plan["effect"] == pytest.approx(effect) and plan["effect"] < abs(d.mean())
    assert plan["icc"] == pytest.approx(icc_oneway(d, quarters)) and plan["deff"] == pytest.approx(1 + 2 * plan["icc"])
    (row,) = plan["needed"]
    assert row["independent_scenarios"] == scenarios_needed(effect, sd, 0.8)
    # planned for the clustered t: the fewest quarters of 3 whose df G − 1 and Kish-deflated noncentrality give the power
    assert row["scenarios"] > row["independent_scenarios"] and row["scenarios"] == 3 * row["quarters"]
    g, d_z = row["quarters"], effect / sd
    assert row["df"] == g - 1 and plan["test"].startswith("quarter-clustered")
    assert clustered_power(d_z, 3 * g, plan["deff"], g - 1) >= 0.8 > clustered_power(d_z, 3 * (g - 1), plan["deff"], g - 2)
    assert plan_from_pilot(d - d.mean(), quarters, [0.8])["needed"] == []  # an interval covering 0: nothing to plan for


def test_analyse_with_power_plans_each_tested_comparison_and_says_how_many_scenarios():
    a = analyse(replicated_runs(), "t", metrics=["sharpe"], power=[0.8, 0.9])
    assert len(a.power) == 3 and all(row["quarters"] == 4 for row in a.power)
    md = a.markdown()
    assert "## Planning" in md and "Kish design effect" in md and "Perugini" in md
    assert any("Needs power 80%:" in row["line"] and "scenarios" in row["line"] for row in a.power)


def test_the_clustered_power_is_the_t_on_quarter_means_and_below_the_ordinary_t():
    # G equal quarters of m, no intra-quarter correlation: the t on the G quarter means, df G - 1, ncp d_z·√(G·m)
    from statsmodels.stats.power import TTestPower
    assert clustered_power(0.4, 36, 1.0, 35) == pytest.approx(TTestPower().power(0.4, 36, 0.05), abs=1e-6)
    assert clustered_power(0.4, 36, 1.0, 11) < clustered_power(0.4, 36, 1.0, 35)
