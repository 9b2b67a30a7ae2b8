"""Paired comparisons: reference values, agreement with scipy, and honest pairing."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from madbench.eval.stats.analysis import analyse
from madbench.eval.stats.paired import compare, paired_test


def from_t(t: float, n: int, diff: float, confidence: float = 0.95) -> dict[str, float]:
    """Recover p, d_z and the CI of a paired test reported only as (t, n, mean difference): an independent oracle.

    p = 2·(1 − F_t(|t|; n−1)); d_z = t/√n; SE = d̄/t; CI = d̄ ± t_{1−α/2,n−1}·SE.
    """
    df = n - 1
    se = diff / t
    crit = stats.t.ppf(0.5 + confidence / 2, df)
    return {"p": float(2 * stats.t.sf(abs(t), df)), "d": t / math.sqrt(n), "ci_low": diff - crit * abs(se), "ci_high": diff + crit * abs(se)}


def frame_from(values: dict[str, np.ndarray], metric: str = "sharpe") -> pd.DataFrame:
    return pd.concat([pd.DataFrame({"config": c, "scenario_id": [f"s{i}" for i in range(len(v))], metric: v})
                      for c, v in values.items()], ignore_index=True)


def test_reference_values_from_a_reported_t():
    # A paired t of 2.300 with n = 35 gives p = 0.0277 and d = 0.389; +0.143 has CI [+0.017, +0.270].
    r = from_t(2.300, 35, 0.143)
    assert r["p"] == pytest.approx(0.0277, abs=5e-5)
    assert r["d"] == pytest.approx(0.389, abs=5e-4)
    # The reference difference is itself rounded to 3 decimals; its ±0.0005 moves each CI end by up to
    # 0.0005·(1 + t_crit/t) ≈ 0.00094, so the ends are checked to 1e-3 (0.143 exactly gives [0.0167, 0.2693]).
    assert r["ci_low"] == pytest.approx(0.017, abs=1e-3) and r["ci_high"] == pytest.approx(0.270, abs=1e-3)
    assert from_t(2.300, 35, 0.14345)["ci_high"] == pytest.approx(0.270, abs=5e-4)


def test_data_built_to_t_2_3_give_the_same_reference_values():
    rng = np.random.default_rng(3)
    z = rng.normal(size=35)
    z = (z - z.mean()) / z.std(ddof=1)
    sd = 0.143 * np.sqrt(35) / 2.3  # so that t = d̄ / (sd/√n) = 2.3 exactly
    b = rng.normal(0.5, 0.3, 35)
    a = b + 0.143 + sd * z
    c = compare(frame_from({"debate": a, "single": b}), "debate", "single", "sharpe")
    assert c.n == 35 and c.t == pytest.approx(2.300, abs=1e-9) and c.diff == pytest.approx(0.143)
    assert c.p == pytest.approx(0.0277, abs=5e-5) and c.d == pytest.approx(0.389, abs=5e-4)
    assert (c.ci_low, c.ci_high) == pytest.approx((0.017, 0.270), abs=1e-3)
    assert (c.ci_low, c.ci_high) == pytest.approx(tuple(from_t(2.300, 35, 0.143)[k] for k in ("ci_low", "ci_high")))


def test_equals_scipy_ttest_rel_and_wilcoxon_on_random_data():
    rng = np.random.default_rng(11)
    a, b = rng.normal(0.2, 1, 40), rng.normal(0, 1, 40)
    got = paired_test(a, b)
    ref = stats.ttest_rel(a, b)
    ci = ref.confidence_interval(0.95)
    assert got["t"] == pytest.approx(ref.statistic) and got["p"] == pytest.approx(ref.pvalue)
    assert (got["ci_low"], got["ci_high"]) == pytest.approx((ci.low, ci.high))
    assert got["wilcoxon_p"] == pytest.approx(stats.wilcoxon(a - b).pvalue)
    assert got["d"] == pytest.approx(np.mean(a - b) / np.std(a - b, ddof=1))


def test_pairs_by_scenario_and_replicate_then_counts_scenarios_and_reports_unpaired_rows():
    rows = []
    for rep in (0, 1):
        for i in range(6):
            rows.append({"config": "A", "scenario_id": f"s{i}", "replicate": rep, "sharpe": 1.0 + i + rep * (i + 1)})
            if not (i == 5 and rep == 1):  # B lacks one (scenario, replicate)
                rows.append({"config": "B", "scenario_id": f"s{i}", "replicate": rep, "sharpe": np.nan if i == 0 and rep == 0 else 0.5 + i})
    c = compare(pd.DataFrame(rows), "A", "B", "sharpe")
    # 10 paired runs in 6 scenarios: n counts scenarios, the runs are counted apart
    assert c.n == 6 and c.n_runs == 10 and c.unpaired_a == 2 and c.unpaired_b == 0
    # replicates are paired first, then averaged within the scenario: d_s = mean over its paired replicates
    pairs = {(i, rep): 0.5 + rep * (i + 1) for rep in (0, 1) for i in range(6) if (i, rep) not in {(0, 0), (5, 1)}}
    per_scenario = [np.mean([d for (i, _), d in pairs.items() if i == s]) for s in range(6)]
    assert c.diff == pytest.approx(np.mean(per_scenario))
    assert c.diff != pytest.approx(np.mean(list(pairs.values())))  # what counting runs as scenarios gave
    assert c.p == pytest.approx(stats.ttest_1samp(per_scenario, 0).pvalue)


def test_duplicate_rows_for_a_pair_are_an_error():
    df = frame_from({"A": np.arange(3.0), "B": np.arange(3.0)})
    df = pd.concat([df, df.iloc[[0]]], ignore_index=True)
    with pytest.raises(ValueError, match="duplicate row"):
        compare(df, "A", "B", "sharpe")


def test_undefined_statistics_are_nan_not_zero():
    same = paired_test(np.ones(5), np.ones(5))
    assert same["n"] == 5 and same["diff"] == 0 and np.isnan(same["t"]) and np.isnan(same["p"]) and np.isnan(same["wilcoxon_p"])
    one = paired_test(np.array([1.0]), np.array([0.0]))
    assert one["n"] == 1 and np.isnan(one["ci_low"])


def test_differences_within_rounding_of_zero_are_not_tested():
    """Two configs that end with the same allocation up to the 6-decimal rounding of weights: Sharpe differences of
    about 2e-6, nearly constant, once reported as t = 32, p = 0.001 and bolded. Now: no test, and the reason."""
    b = np.array([1.52, 0.87, 2.10])
    a = b + np.array([2.0e-6, 2.1e-6, 1.95e-6])
    assert stats.ttest_rel(a, b).pvalue < 0.01  # what the t-test alone says
    got = paired_test(a, b, metric="sharpe")
    assert all(np.isnan(got[k]) for k in ("t", "p", "d", "wilcoxon_p")) and got["diff"] == pytest.approx(2.017e-6, rel=1e-3)
    assert (got["ci_low"], got["ci_high"]) == pytest.approx((1.95e-6, 2.1e-6))  # the range of the differences
    assert got["note"] == ("not tested: every difference within ±0.00021 (0.0001 × the larger of 1 and the largest absolute "
                           "sharpe; largest 2.1e-06): equal up to the 6-decimal rounding of weights")
    # the tolerance scales with the metric: the same relative noise on a return in percent, and a real difference stays
    assert "not tested" in paired_test(100 * a, 100 * b)["note"]
    real = paired_test(b + np.array([1e-3, 1.2e-3, 0.9e-3]), b)
    assert real["note"] == "" and real["p"] < 0.05
    # exact zeros, and equal non-zero differences (no spread for a t, but every sign the same: Wilcoxon stands)
    assert paired_test(b, b)["note"] == "not tested: every difference is 0 (the same results)"
    same = paired_test(b + 0.125, b)
    assert np.isnan(same["t"]) and "no spread" in same["note"] and np.isfinite(same["wilcoxon_p"])


def test_a_rounding_difference_marks_nothing_in_the_comparison_table():
    rng = np.random.default_rng(5)
    base = rng.normal(1.0, 0.5, 12)
    runs = frame_from({"debate": base + rng.uniform(1e-6, 3e-6, 12), "mean": base, "single": base - 0.5 + rng.normal(0, 0.05, 12)})
    a = analyse(runs, "t", metrics=["sharpe"])
    rounding = next(p for p in a.pairs if {p.a, p.b} == {"debate", "mean"})
    assert np.isnan(rounding.p) and rounding.note.startswith("not tested: every difference within ±")
    cells = {c: a.table.cells[("sharpe", c)] for c in a.configs}
    assert [l for l, _ in cells["debate"].differs] == ["C"] and [l for l, _ in cells["mean"].differs] == ["C"]
    md = a.markdown()
    assert "| note |" in md and "equal up to the 6-decimal rounding of weights" in md
    rows = [line for line in md.splitlines() if line.startswith("| sharpe | debate | mean |")]
    assert len(rows) == 1 and rows[0].count("|") == md.splitlines()[md.splitlines().index(rows[0]) - 1].count("|")  # one cell
