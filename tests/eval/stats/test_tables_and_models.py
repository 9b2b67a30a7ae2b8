"""Paper-format tables, corrections, correlations, OLS, the binomial test and power analysis."""

import numpy as np
import pandas as pd
import pytest
import statsmodels.formula.api as smf
from scipy import stats
from statsmodels.stats.multitest import multipletests

from madbench.eval.stats.analysis import analyse
from madbench.eval.stats.beats import beats_baseline
from madbench.eval.stats.correlate import correlate, delta_correlations
from madbench.eval.stats.power import achieved_power, scenarios_needed
from madbench.eval.stats.regress import ols
from madbench.eval.stats.tables import adjust


def runs_frame(n: int = 30, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    base = rng.normal(0.5, 1.0, n)
    rows = []
    for config, shift, noise in (("debate", 0.6, 0.2), ("single", 0.0, 0.2), ("mean", 0.55, 0.6)):
        rho = rng.uniform(0.5, 0.95, n)
        sharpe = base + shift + noise * rng.normal(size=n) + 0.8 * (rho - 0.7)
        for i in range(n):
            rows.append({"config": config, "scenario_id": f"s{i}", "status": "ok", "batch": "abl1" if i < n // 2 else "abl2",
                         "sharpe": sharpe[i], "total_return_pct": 5 * sharpe[i], "rho_bar": rho[i], "equal_sharpe": base[i] + 0.3})
    return pd.DataFrame(rows)


def test_table_superscripts_name_the_differing_columns_bold_when_strong():
    a = analyse(runs_frame(), "test", compare=["debate", "single", "mean"], metrics=["sharpe"])
    cells = {c: a.table.cells[("sharpe", c)] for c in a.configs}
    assert ("B", True) in cells["debate"].differs and ("A", True) in cells["single"].differs  # p << 0.01
    p_ac = next(p.p for p in a.pairs if {p.a, p.b} == {"debate", "mean"})
    assert (p_ac < 0.15) == any(l == "C" for l, _ in cells["debate"].differs)
    md = a.table.markdown()
    assert "| metric | A: debate | B: single | C: mean |" in md and "**B**" in md


def test_holm_and_bh_match_statsmodels_and_keep_nan_out_of_the_family():
    p = [0.01, 0.04, float("nan"), 0.03]
    holm = adjust(p, "holm")
    ref = multipletests([0.01, 0.04, 0.03], method="holm")[1]
    assert np.isnan(holm[2]) and [holm[0], holm[1], holm[3]] == pytest.approx(list(ref))
    assert adjust(p, "bh")[3] == pytest.approx(multipletests([0.01, 0.04, 0.03], method="fdr_bh")[1][2])


def test_correction_can_remove_a_superscript():
    df = runs_frame(seed=4)
    none = analyse(df, "t", metrics=["sharpe", "total_return_pct"])
    holm = analyse(df, "t", metrics=["sharpe", "total_return_pct"], correction="holm")
    count = lambda a: sum(len(c.differs) for c in a.table.cells.values())
    assert count(holm) <= count(none)
    assert "holm-corrected" in holm.table.markdown()


def test_correlations_equal_scipy_and_delta_correlation_pairs_by_scenario():
    df = runs_frame()
    d = df[df.config == "debate"]
    r = correlate(d.rho_bar, d.sharpe)
    assert r["pearson_r"] == pytest.approx(stats.pearsonr(d.rho_bar, d.sharpe).statistic)
    assert r["spearman_rho"] == pytest.approx(stats.spearmanr(d.rho_bar, d.sharpe).statistic)
    row = delta_correlations(df, [("debate", "single")])[0]
    a, b = df[df.config == "debate"].set_index("scenario_id"), df[df.config == "single"].set_index("scenario_id")
    ref = stats.pearsonr(a.rho_bar - b.rho_bar, a.sharpe - b.sharpe)
    assert row["n"] == 30 and row["pearson_r"] == pytest.approx(ref.statistic)
    assert np.isnan(correlate(np.ones(5), np.arange(5.0))["pearson_r"])  # constant side: undefined, not 0


def test_ols_matches_least_squares_with_dummies():
    df = runs_frame()
    formula, fit, table = ols(df, ablation="batch", treatment="config")
    assert formula == "sharpe ~ rho_bar + C(batch) + C(config)"
    X = np.column_stack([np.ones(len(df)), df.rho_bar, df.batch == "abl2", df.config == "mean", df.config == "single"]).astype(float)
    beta = np.linalg.lstsq(X, df.sharpe.to_numpy(), rcond=None)[0]
    assert table.set_index("term").loc["rho_bar", "coef"] == pytest.approx(beta[1])
    ref = smf.ols("sharpe ~ rho_bar + C(batch) + C(config)", data=df).fit()
    assert table.set_index("term")["p"].to_numpy() == pytest.approx(ref.pvalues.to_numpy())
    assert ols(df[df.batch == "abl1"], ablation="batch")[0] == "sharpe ~ rho_bar"  # one level: no dummy


def test_beats_one_over_n_binomial():
    df = runs_frame()
    rows = {r["config"]: r for r in beats_baseline(df, ["debate", "single"])}
    d = df[df.config == "debate"]
    k = int((d.sharpe > d.equal_sharpe).sum())
    assert rows["debate"]["wins"] == k and rows["debate"]["n"] == 30
    assert rows["debate"]["p_one_sided"] == pytest.approx(stats.binomtest(k, 30, 0.5, alternative="greater").pvalue)


def test_power_matches_the_noncentral_t():
    n80 = scenarios_needed(0.14, 0.37, 0.80)
    n90 = scenarios_needed(0.14, 0.37, 0.90)
    d = 0.14 / 0.37

    def power(n):  # two-sided one-sample t: P(|T| > t_crit) with T ~ nct(n−1, d√n)
        crit = stats.t.ppf(0.975, n - 1)
        nc = d * np.sqrt(n)
        return stats.nct.sf(crit, n - 1, nc) + stats.nct.cdf(-crit, n - 1, nc)

    assert power(n80) >= 0.80 > power(n80 - 1) and power(n90) >= 0.90 > power(n90 - 1)
    assert 50 < n80 < n90 < 90
    assert achieved_power(0.14, 0.37, 35) == pytest.approx(power(35), abs=1e-6)


def test_ols_on_a_constant_regressor_says_so_instead_of_fitting():
    from madbench.eval.stats.degenerate import Degenerate
    df = runs_frame().assign(rho_bar=0.9)
    with pytest.raises(Degenerate, match=r"rho_bar is constant \(0\.900\) on the 90 complete row"):
        ols(df)
    a = analyse(df, "t", metrics=["sharpe"])
    assert a.ols_table is None and "not fitted: rho_bar is constant" in a.ols_note and "not fitted" in a.markdown()


def test_ols_on_a_regressor_collinear_with_the_conditions_is_rank_deficient():
    from madbench.eval.stats.regress import RankDeficient
    df = runs_frame()
    df["rho_bar"] = df.config.map({"debate": 0.8, "single": 0.85, "mean": 0.9})  # 3 values, one per config
    with pytest.raises(RankDeficient, match="rank"):
        ols(df, treatment="config")
    a = analyse(df, "t", metrics=["sharpe"])
    assert a.ols_table is None and a.ols_note.startswith("not fitted: OLS") and "rank" in a.ols_note
