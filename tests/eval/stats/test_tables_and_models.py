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
    assert "holm-adjusted over every pair × metric" in holm.table.markdown()


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


def with_quarters(df: pd.DataFrame, per_quarter: int = 5) -> pd.DataFrame:
    """Each scenario in a quarter, ``per_quarter`` scenarios to a quarter (s0–s4 in Q0, …)."""
    return df.assign(invest_quarter=df.scenario_id.str[1:].astype(int).floordiv(per_quarter).map(lambda q: f"Q{q}"))


def test_ols_has_scenario_fixed_effects_and_quarter_clustered_errors():
    df = with_quarters(runs_frame())
    fit = ols(df, ablation="batch", treatment="config")
    assert fit.formula == "sharpe ~ rho_bar + C(config) + C(scenario_id)" and fit.effects == "scenario fixed effects"
    assert any("C(batch) is constant within every scenario_id" in w for w in fit.warnings)  # absorbed, and said
    dummies = pd.get_dummies(df.scenario_id, drop_first=True).astype(float).to_numpy()
    X = np.column_stack([np.ones(len(df)), df.config == "mean", df.config == "single", df.rho_bar, dummies]).astype(float)
    beta = np.linalg.lstsq(X, df.sharpe.to_numpy(), rcond=None)[0]
    table = fit.table.set_index("term")
    assert table.loc["rho_bar", "coef"] == pytest.approx(beta[3])
    assert not any(t.startswith("C(scenario_id)") for t in table.index)  # fixed effects are not reported as findings
    groups = pd.factorize(df.invest_quarter)[0]
    ref = smf.ols(fit.formula, data=df).fit(cov_type="cluster", cov_kwds={"groups": groups}, use_t=True)
    plain = smf.ols(fit.formula, data=df).fit()
    assert table.loc["rho_bar", "se"] == pytest.approx(ref.bse["rho_bar"]) and table.loc["rho_bar", "se"] != pytest.approx(plain.bse["rho_bar"])
    assert (fit.cluster_by, fit.n_clusters) == ("invest_quarter", 6)
    assert any("only 6 invest_quarter cluster(s) (< 30)" in w and "Cameron & Miller" in w for w in fit.warnings)
    assert "clustered by invest_quarter (6 clusters)" in fit.lines()[0]


def test_a_regressor_constant_within_scenario_falls_back_to_quarter_effects_and_says_so():
    df = with_quarters(runs_frame())
    df = df[df.config == "debate"]  # one config: rho_bar has one value per scenario
    fit = ols(df, ablation=None, treatment="config")
    assert fit.effects.startswith("quarter fixed effects") and fit.formula == "sharpe ~ rho_bar + C(invest_quarter)"
    assert any("constant within every scenario" in w for w in fit.warnings)


def test_without_a_quarter_column_errors_are_clustered_by_scenario_with_a_warning():
    fit = ols(runs_frame(), ablation="batch", treatment="config")
    assert (fit.cluster_by, fit.n_clusters) == ("scenario_id", 30)
    assert any("no invest_quarter column" in w for w in fit.warnings) and not any("< 30" in w for w in fit.warnings)


def test_beats_one_over_n_is_a_two_sided_sign_test_against_one_half_and_a_stated_share():
    df = runs_frame()
    rows = {r["config"]: r for r in beats_baseline(df, ["debate", "single"])}
    d = df[df.config == "debate"]
    k = int((d.sharpe > d.equal_sharpe).sum())
    assert rows["debate"]["wins"] == k and rows["debate"]["n"] == 30
    assert rows["debate"]["p_vs_half"] == pytest.approx(stats.binomtest(k, 30, 0.5).pvalue)  # two-sided
    assert rows["debate"]["p_vs_share"] == pytest.approx(stats.binomtest(k, 30, 1 / 3).pvalue)
    other = beats_baseline(df, ["debate"], share=0.25)[0]
    assert other["share_h0"] == 0.25 and other["p_vs_share"] == pytest.approx(stats.binomtest(k, 30, 0.25).pvalue)


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
