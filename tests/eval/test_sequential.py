"""The group-sequential maths (eval/stats/group_sequential.py) against published values and closed forms, and the
``sequential:`` block's checks. Fast: no runner, no Ray."""

import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy import stats

from madbench.data.errors import InputError
from madbench.eval.stats.group_sequential import (
    classic_constant,
    design_power,
    efficacy_bounds,
    ld_obrien_fleming,
    make_design,
    planned_looks,
    stagewise_p,
    t_to_z,
    take_look,
    z_to_t,
)
from madbench.runner.batch import load_batch

ROOT = Path(__file__).resolve().parents[2]


def test_classic_constants_match_jennison_and_turnbull():
    # J&T (2000) Table 2.3 (O'Brien-Fleming C_B) and Table 2.1 (Pocock C_P), K = 5, two-sided alpha = 0.05
    assert classic_constant(5, 0.05, "obrien-fleming") == pytest.approx(2.040, abs=0.005)
    assert classic_constant(5, 0.05, "pocock") == pytest.approx(2.413, abs=0.005)


def test_lan_demets_obrien_fleming_bounds_match_the_published_ones():
    bounds = efficacy_bounds([1, 2, 3, 4, 5], 0.05, "obrien-fleming")
    assert bounds == pytest.approx([4.877, 3.357, 2.680, 2.290, 2.031], abs=0.005)


def test_one_look_is_the_fixed_test_and_its_power_the_normal_formula():
    d = make_design([50], 0.05, "obrien-fleming", effect=0.4)
    assert d.efficacy[0] == pytest.approx(stats.norm.ppf(0.975), abs=1e-6)
    power, expected = design_power(d, 0.4)
    assert power == pytest.approx(stats.norm.sf(1.959964 - 0.4 * math.sqrt(50)), abs=1e-4) and expected == 50


def test_the_type_i_error_spent_is_alpha_and_the_spending_function_at_each_look():
    n = planned_looks(70, 5)
    for spending in ("obrien-fleming", "pocock"):
        d = make_design(n, 0.05, spending)
        assert design_power(d, 0.0)[0] == pytest.approx(0.025, abs=1e-4)  # one side of a two-sided 0.05
    # a crossing exactly at look k's bound has p = twice the one-sided alpha spent up to k
    d = make_design(n, 0.05, "obrien-fleming")
    for k in (1, 3, 5):
        spent = ld_obrien_fleming(np.array([n[k - 1] / 70]), 0.025)[0]
        assert stagewise_p(d, k, d.efficacy[k - 1]) == pytest.approx(2 * spent, rel=1e-3)


def test_stagewise_p_orders_earlier_stops_first_and_stays_above_alpha_without_a_crossing():
    d = make_design(planned_looks(70, 5), 0.05, "pocock", futility=True, effect=0.39, power=0.8)
    assert stagewise_p(d, 1, 3.0) == pytest.approx(2 * stats.norm.sf(3.0), rel=1e-6)  # the first look: the plain p
    assert stagewise_p(d, 2, 3.0) > stagewise_p(d, 1, 3.0)
    assert stagewise_p(d, 1, -1.5) >= 0.05  # a futility stop never reads as significant


def test_non_binding_futility_leaves_the_efficacy_bounds_and_buys_its_power_back():
    n = planned_looks(70, 5)
    plain = make_design(n, 0.05, "obrien-fleming", effect=0.39)
    fut = make_design(n, 0.05, "obrien-fleming", futility=True, effect=0.39, power=0.8)
    assert fut.efficacy == plain.efficacy and fut.futility[-1] == pytest.approx(fut.efficacy[-1])
    assert plain.power > 0.8 and fut.power == pytest.approx(0.8, abs=1e-4)
    assert design_power(fut, 0.0)[1] < 0.7 * 70  # under H0 it mostly stops early
    short = make_design(planned_looks(20, 5), 0.05, "obrien-fleming", futility=True, effect=0.39, power=0.8)
    assert short.notes and short.power < 0.8  # a maximum short of the plan is said, not hidden


def test_a_look_is_the_paired_t_against_bounds_on_the_t_scale():
    rng = np.random.default_rng(3)
    d = make_design([10, 20], 0.05, "pocock", futility=True, effect=0.8, power=0.8)
    x = rng.normal(0.1, 1.0, 10)
    look = take_look(d, 1, x)
    assert look.t == pytest.approx(stats.ttest_1samp(x, 0).statistic)
    assert look.efficacy_t == pytest.approx(stats.t.ppf(stats.norm.cdf(d.efficacy[0]), 9))
    assert look.efficacy_t > d.efficacy[0]  # few degrees of freedom: a wider bound
    assert take_look(d, 1, x + 5).decision == "efficacy"
    assert take_look(d, 1, x - 0.5).decision == "futility"
    assert take_look(d, 2, np.zeros(20)).decision == "final"
    assert float(t_to_z(z_to_t(1.7, 9), 9)) == pytest.approx(1.7)


def test_planned_looks_are_equally_spaced_and_refuse_too_many():
    assert planned_looks(35, 5) == [7, 14, 21, 28, 35]
    with pytest.raises(ValueError):
        planned_looks(4, 5)


def _batch(tmp_path: Path, **sequential) -> Path:
    spec = yaml.safe_load((ROOT / "configs" / "batches" / "a7-sequential.yaml").read_text())
    spec["sequential"] |= sequential
    path = tmp_path / "b.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.mark.parametrize(("field", "value", "says"), [
    ("pair", "a7-control", "sequential.pair"),
    ("metric", "sharp", "sequential.metric"),
    ("effect", 0, "sequential.effect"),
    ("spending", "haybittle", "sequential.spending"),
    ("futility", "binding", "sequential.futility"),
])
def test_a_bad_sequential_block_is_one_error_naming_the_file_and_field(tmp_path, field, value, says):
    path = _batch(tmp_path, **{field: value})
    with pytest.raises(InputError) as err:
        load_batch(path)
    assert str(path) in str(err.value) and says in str(err.value)


def test_a_look_on_scenarios_sharing_quarters_is_the_clustered_t_with_its_satterthwaite_df():
    from madbench.eval.stats.clustered import cr2_mean_test
    rng = np.random.default_rng(4)
    d = make_design([12, 24], 0.05, "pocock", effect=0.5)
    x, quarters = rng.normal(0.3, 1.0, 12), [f"q{i // 3}" for i in range(12)]
    look = take_look(d, 1, x, quarters)
    cr2 = cr2_mean_test(x, quarters)
    assert look.t == pytest.approx(cr2.t) and look.df == pytest.approx(cr2.df) and look.n_clusters == 4
    assert look.efficacy_t == pytest.approx(stats.t.ppf(stats.norm.cdf(d.efficacy[0]), cr2.df))
    assert look.df < 11  # fewer clusters than scenarios: fewer df than the ordinary t's
    alone = take_look(d, 1, x, [f"q{i}" for i in range(12)])  # each scenario its own quarter: the ordinary t
    assert alone.t == pytest.approx(stats.ttest_1samp(x, 0).statistic) and alone.df == pytest.approx(11)


def test_a_design_planned_on_the_t_scale_has_the_noncentral_t_power_and_says_what_it_can_detect():
    from statsmodels.stats.power import TTestPower
    d = make_design([35], 0.05, "pocock", effect=0.39, power=0.8, df=[34])
    exact = TTestPower().power(effect_size=0.39, nobs=35, alpha=0.025, alternative="larger")  # one side of 0.05
    assert d.power == pytest.approx(exact, abs=1e-3) and d.power < make_design([35], 0.05, "pocock", effect=0.39).power
    assert d.notes and "cannot reach power 0.8" in d.notes[0] and f"{d.detectable:.3f}" in d.notes[0]
    at_detectable = make_design([35], 0.05, "pocock", effect=d.detectable, power=0.8, df=[34])
    assert at_detectable.power == pytest.approx(0.8, abs=1e-3)
