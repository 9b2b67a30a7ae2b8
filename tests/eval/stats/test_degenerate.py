"""Statistics the data cannot carry are refused with a reason, never printed as findings nor as a bare n/a.

The rules (eval.stats.degenerate): at least 3 pairs, a predictor with at least 3 distinct values (values within
float noise count as one) and a response that varies.
"""

import numpy as np
import pandas as pd
import pytest

from madbench.eval.stats.analysis import analyse
from madbench.eval.stats.correlate import correlate, not_computed, quality_correlations
from madbench.eval.stats.degenerate import Degenerate, check_predictor, distinct_values, fmt_values
from madbench.eval.stats.regress import ols
from tests.eval.stats.test_tables_and_models import runs_frame


def rules_like(seed: int = 0) -> pd.DataFrame:
    """What rule-based analysts give: ρ̄ ∈ {0.8833…, 0.9} (a few runs low), Sharpe varying freely."""
    df = runs_frame(n=35, seed=seed)
    rng = np.random.default_rng(seed)
    df["rho_bar"] = np.where((rng.random(len(df)) < 0.2) & (df.config == "debate"), 0.9 - 1 / 60, 0.9)
    df["crit_logical_validity"] = 0.9
    return df


def test_distinct_values_merge_float_noise_and_print_apart():
    assert distinct_values([0.9, 0.9 + 1e-15, np.nan, 0.9 - 1 / 60, np.inf]) == [pytest.approx(0.88333333), 0.9]
    assert distinct_values([0.0, 1e-17, -1e-17]) == [pytest.approx(0.0, abs=1e-16)]
    assert len(distinct_values([0.0, 1e-6, 2e-6])) == 3  # a real spread, however small, is kept
    assert fmt_values([0.9 - 1 / 60, 0.9]) == "0.883, 0.900"
    assert fmt_values([0.90001, 0.90002]) == "0.90001, 0.90002"  # as many decimals as it takes


@pytest.mark.parametrize("x,y,note", [
    ([1.0, 2.0], [1.0, 3.0], "n/a: fewer than 3 pairs (2)"),
    ([1.0, 2.0, np.nan, 4.0], [1.0, np.nan, 2.0, 3.0], "n/a: fewer than 3 pairs (2)"),
    ([0.9] * 6, np.arange(6.0), "n/a: rho_bar is constant (0.900)"),
    ([0.9, 0.9, 0.9, 0.8833333, 0.9, 0.8833333], np.arange(6.0), "n/a: rho_bar takes only 2 distinct values (0.883, 0.900)"),
    (np.arange(6.0), [1.5] * 6, "n/a: sharpe is constant (1.500)"),
])
def test_correlation_rows_say_why_they_are_not_computed(x, y, note):
    r = correlate(np.asarray(x), np.asarray(y), "rho_bar", "sharpe")
    assert r["note"] == note and np.isnan(r["pearson_r"]) and np.isnan(r["spearman_p"])


def test_three_distinct_values_are_enough():
    r = correlate(np.array([0.8, 0.85, 0.9, 0.9, 0.8]), np.array([1.0, 2.0, 2.5, 3.0, 0.5]), "rho_bar", "sharpe")
    assert r["note"] == "" and np.isfinite(r["pearson_r"])


def test_ols_refuses_a_two_valued_regressor():
    df = rules_like()
    with pytest.raises(Degenerate, match=r"rho_bar takes only 2 distinct values \(0\.883, 0\.900\)"):
        ols(df, ablation="batch", treatment="config")
    with pytest.raises(Degenerate, match="sharpe is constant"):
        check_predictor(np.arange(5.0), np.ones(5), "rho_bar", "sharpe")
    with pytest.raises(Degenerate, match="more rows than terms"):
        ols(runs_frame(n=4).iloc[:5], ablation="batch", treatment="config")


def test_analysis_prints_reasons_not_numbers_and_drops_a_stale_ols_csv(tmp_path):
    out = tmp_path / "stats"
    analyse(runs_frame(), "t", metrics=["sharpe"]).write_csvs(out)
    assert (out / "ols.csv").exists()  # a real fit, written

    a = analyse(rules_like(), "t", metrics=["sharpe"])
    assert a.ols_table is None and a.ols_formula == "sharpe ~ rho_bar + C(batch) + C(config) + C(scenario_id)"
    assert a.ols_note == "not fitted: rho_bar takes only 2 distinct values (0.883, 0.900) on the 105 complete row(s)"
    md = a.markdown()
    assert "## OLS `sharpe ~ rho_bar + C(batch) + C(config) + C(scenario_id)`\n\nnot fitted: rho_bar takes only 2 distinct values" in md
    assert "| rho_bar |" not in md and "n/a | n/a" not in md  # no slope, and no bare n/a rows
    assert "None of the 27 correlations could be computed" in md
    assert "- crit_logical_validity is constant (0.900): pooled (all); within ablation (abl1, abl2); " \
           "within condition (debate, single, mean); against sharpe, total_return_pct [12 rows]" in md
    assert "- rho_bar is constant (0.900): within condition (single, mean); against sharpe, total_return_pct [4 rows]" in md
    assert "- Δrho_bar is constant (0.000): paired (single − mean); against Δsharpe [1 row]" in md
    written = a.write_csvs(out)
    assert not (out / "ols.csv").exists() and out / "ols.csv" not in written  # the earlier fit is gone
    corr = pd.read_csv(out / "correlations.csv", keep_default_na=False)
    assert len(corr) == len(a.correlations) and corr["note"].str.startswith("n/a: ").all()


def test_mixed_rows_keep_computed_ones_in_the_table_and_count_the_rest():
    df = runs_frame()
    df["crit_logical_validity"] = 0.9
    rows = quality_correlations(df, ["rho_bar", "crit_logical_validity"], ["sharpe"], {"pooled": None})
    assert [r["note"] for r in rows] == ["", "n/a: crit_logical_validity is constant (0.900)"]
    assert not_computed(rows) == ["crit_logical_validity is constant (0.900): pooled (all); against sharpe [1 row]"]
    a = analyse(df.assign(crit_causal_alignment=0.5), "t", metrics=["sharpe"])
    md = a.markdown()
    assert "Not computed: " in md and f"of {len(a.correlations)} correlations" in md
    assert all("note" not in r for r in a.computed_correlations) and a.computed_correlations
    assert a.ols_table is not None
