"""The sweep design's maths: its boundaries against the exact many-to-one (Dunnett) and single-arm ones, its adjusted
p against its decisions, each look's rules, and the family-wise error, power and coverage of whole simulated sweeps."""

import numpy as np
import pytest

from madbench.eval.stats.group_sequential import efficacy_bounds, planned_looks
from madbench.eval.stats.sweep_design import adjusted_p, decide, family_bounds, make_sweep, simultaneous_ci
from madbench.eval.stats.sweep_simulation import Rules, planned_df, simulate


def dunnett_error(c: float, arms: int, rho: float) -> float:
    from scipy.stats import multivariate_normal
    cov = np.full((arms, arms), rho) + (1 - rho) * np.eye(arms)
    return 1 - multivariate_normal(np.zeros(arms), cov).cdf(np.full(arms, c))


def test_a_one_look_mams_bound_is_dunnetts_many_to_one_critical_value():
    u, c = family_bounds([70], 8, 0.05, "mams", "pocock", 0.5)
    assert dunnett_error(u[0], 8, 0.5) == pytest.approx(0.05, abs=0.0015)
    assert u[0] < 2.5  # sharper than Bonferroni's z_{1 − 0.05/8} = 2.50
    assert c[0] > u[0]  # the simultaneous two-sided constant is wider than the one-sided bound


def test_bonferroni_bounds_are_the_single_arm_bounds_at_alpha_over_the_arms():
    n = planned_looks(70, 5)
    u, c = family_bounds(n, 4, 0.05, "bonferroni", "obrien-fleming", 0.5)
    assert np.allclose(u, efficacy_bounds(np.asarray(n, float), 2 * 0.05 / 4, "obrien-fleming"))
    assert np.allclose(c, efficacy_bounds(np.asarray(n, float), 0.05 / 4, "obrien-fleming"))


def test_the_mams_bound_spends_its_alpha_over_the_looks():
    n = planned_looks(70, 5)
    one = family_bounds(n[:1], 8, 0.05, "mams", "pocock", 0.5)[0]
    five = family_bounds(n, 8, 0.05, "mams", "pocock", 0.5)[0]
    assert (five > one[0]).all()  # five looks each spend less than one look at the whole alpha


def test_the_adjusted_p_is_at_most_alpha_exactly_when_the_arm_crosses():
    for rule in ("mams", "bonferroni"):
        d = make_sweep(planned_looks(40, 4), 6, 0.05, rule, "pocock", 0.5, True, 0.5, 0.8, df=None)
        for look in range(1, 5):
            z = np.linspace(0, 5, 201)
            p = adjusted_p(d, look, z)
            assert ((p <= 0.05) == (z >= d.efficacy[look - 1])).all(), (rule, look)
            assert (np.diff(p) <= 1e-12).all()  # a larger statistic is never less extreme


def test_a_look_declares_drops_and_ends_arms_by_its_rules():
    d = make_sweep([10, 20, 30], 4, 0.05, "mams", "pocock", 0.5, True, 0.8, 0.8, df=None)
    t = np.array([10.0, -3.0, 1.7, 1.6])  # futility at look 1 is near 1.48
    es = np.array([2.0, -1.0, 0.6, 0.0])
    racing = np.array([True, True, True, True])
    codes = decide(d, 1, t, 1e6, es, racing, 0.5)
    assert codes.tolist()[:2] == [1, 2]  # efficacy; futility
    assert codes[3] == 3 and codes[2] == 3  # more than 0.5 behind the leader (the declared arm counts)
    assert decide(d, 1, t, 1e6, es, racing, None)[2] == 0  # no selection rule: it races on
    assert (decide(d, 3, np.array([0.0, 1.0]), 1e6, np.zeros(2), np.array([True, False]), None) == [4, 0]).all()


def test_simultaneous_intervals_widen_with_the_family():
    d1 = make_sweep([30], 1, 0.05, "mams", "pocock", 0.5, False, 0.5, 0.8)
    d8 = make_sweep([30], 8, 0.05, "mams", "pocock", 0.5, False, 0.5, 0.8)
    lo1, hi1 = simultaneous_ci(d1, 0.3, 0.1, 1e6, 1)
    lo8, hi8 = simultaneous_ci(d8, 0.3, 0.1, 1e6, 1)
    assert hi1 - lo1 == pytest.approx(2 * 1.96 * 0.1, abs=0.01)  # one arm: the usual 95% interval
    assert hi8 - lo8 > hi1 - lo1


def test_whole_sweeps_hold_the_family_wise_error_and_find_the_better_arm():
    n = planned_looks(70, 5)
    d = make_sweep(n, 8, 0.05, "mams", "pocock", 0.5, True, 0.5, 0.85, df=planned_df(n))
    rng = np.random.default_rng(5)
    null = simulate(d, np.zeros(8), 2000, rng)
    one = simulate(d, np.array([0.5] + [0.0] * 7), 2000, rng)
    assert null["fwer"] <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / 2000)
    assert null["naive_fwer"] > 2 * null["fwer"]  # what the unadjusted tests would have claimed
    assert one["power_per_better_arm"] == pytest.approx(d.power, abs=0.04)
    assert null["share_of_fixed"] < 0.6 and null["ci_covers_all"] >= 0.94
    assert null["adjusted_p_agrees"] == 1.0


def test_dropping_the_losers_uses_fewer_runs_and_keeps_the_error():
    n = planned_looks(70, 5)
    d = make_sweep(n, 8, 0.05, "mams", "pocock", 0.5, True, 0.5, 0.85, df=planned_df(n))
    effects = np.array([0.39, 0.39] + [0.0] * 6)
    plain = simulate(d, effects, 1500, np.random.default_rng(2))
    drop = simulate(d, effects, 1500, np.random.default_rng(2), rules=Rules(margin=0.3))
    assert drop["runs"] < plain["runs"]
    assert drop["fwer"] <= plain["fwer"]  # the same draws: dropping only removes chances to declare
