"""The scenario is the unit of inference: replicates are averaged (or modelled), never counted as scenarios."""

import numpy as np
import pandas as pd
import pytest
import statsmodels.formula.api as smf
from scipy import stats

from madbench.eval.stats.analysis import analyse
from madbench.eval.stats.units import replicated, scenario_means, within_sd


def replicated_runs(n_scenarios: int = 12, replicates: int = 3, seed: int = 0, per_quarter: int = 3) -> pd.DataFrame:
    """Runs of three configs on scenarios grouped in quarters, each (config, scenario) run ``replicates`` times
    with replicate noise around a per-scenario level, as an LLM at temperature > 0 gives."""
    rng = np.random.default_rng(seed)
    rows = []
    for s in range(n_scenarios):
        level = rng.normal(0.5, 1.0)
        for config, shift in (("debate", 0.25), ("single", 0.0), ("mean", 0.1)):
            for r in range(replicates):
                sharpe = level + shift + rng.normal(0, 0.4)
                rows.append({"config": config, "scenario_id": f"s{s:02d}", "replicate": r, "status": "ok",
                             "invest_quarter": f"Q{s // per_quarter}", "batch": "b", "sharpe": sharpe,
                             "total_return_pct": 4 * sharpe + rng.normal(0, 0.5), "rho_bar": rng.uniform(0.5, 0.95),
                             "equal_sharpe": level + 0.1})
    return pd.DataFrame(rows)


def by_hand_means(runs: pd.DataFrame, config: str, metric: str) -> pd.Series:
    g = runs[runs.config == config]
    return pd.Series({s: g.loc[g.scenario_id == s, metric].mean() for s in sorted(g.scenario_id.unique())})


def test_scenario_means_average_replicates_and_keep_scenario_columns():
    runs = replicated_runs(n_scenarios=4)
    means = scenario_means(runs)
    assert len(means) == 4 * 3 and (means.n_replicates == 3).all() and "replicate" not in means
    row = means[(means.config == "single") & (means.scenario_id == "s02")].iloc[0]
    assert row.sharpe == pytest.approx(by_hand_means(runs, "single", "sharpe")["s02"]) and row.invest_quarter == "Q0"
    assert replicated(runs) and not replicated(means.assign(replicate=0))


def test_within_sd_is_the_mean_of_per_scenario_sds():
    x = pd.Series([1.0, 3.0, 10.0, 10.0, 4.0])
    s = pd.Series(["a", "a", "b", "b", "c"])  # c has one replicate: no SD of its own
    assert within_sd(x, s) == pytest.approx(np.mean([np.std([1, 3], ddof=1), 0.0]))
    assert np.isnan(within_sd(pd.Series([1.0, 2.0]), pd.Series(["a", "b"])))


def test_paired_tests_count_scenarios_and_equal_ttest_rel_on_scenario_means():
    runs = replicated_runs()
    a = analyse(runs, "t", metrics=["sharpe"], correction="none")
    pair = next(p for p in a.pairs if (p.a, p.b) == ("debate", "single"))
    da, db = by_hand_means(runs, "debate", "sharpe"), by_hand_means(runs, "single", "sharpe")
    ref = stats.ttest_rel(da, db)
    assert pair.n == 12 and pair.n_runs == 36
    assert pair.p_unclustered == pytest.approx(ref.pvalue) and pair.t_unclustered == pytest.approx(ref.statistic)
    # the primary test is clustered by quarter: 4 quarters of 3 scenarios, which balanced is the t on the quarter means
    quarter_means = (da - db).groupby(lambda s: int(s[1:]) // 3).mean()
    by_quarter = stats.ttest_1samp(quarter_means, 0)
    assert (pair.cluster_by, pair.n_clusters, pair.df) == ("invest_quarter", 4, pytest.approx(3))
    assert pair.p == pytest.approx(by_quarter.pvalue) and pair.t == pytest.approx(by_quarter.statistic)
    assert pair.wilcoxon_p == pytest.approx(stats.wilcoxon(da - db).pvalue)
    pooled = stats.ttest_rel(runs[runs.config == "debate"].sharpe, runs[runs.config == "single"].sharpe)
    assert pair.p != pytest.approx(pooled.pvalue)  # what counting the 36 runs as scenarios gave
    summary = next(s for s in a.summaries if s["config"] == "debate")
    assert (summary["n"], summary["n_runs"]) == (12, 36)
    assert summary["sem"] == pytest.approx(da.sem()) and summary["within_sd"] == pytest.approx(
        runs[runs.config == "debate"].groupby("scenario_id").sharpe.std().mean())
    assert "[12]" in a.table.markdown() and "n counts scenarios" in a.markdown()
    assert "## Replicates" in a.markdown()


def test_a_mixed_model_with_a_scenario_random_effect_stands_beside_the_paired_test():
    runs = replicated_runs()
    a = analyse(runs, "t", metrics=["sharpe"])
    pair = next(p for p in a.pairs if (p.a, p.b) == ("debate", "single"))
    two = runs[runs.config.isin(["debate", "single"])]
    ref = smf.mixedlm("sharpe ~ C(config, Treatment('single'))", two, groups=two["scenario_id"]).fit(reml=True)
    term = "C(config, Treatment('single'))[T.debate]"
    assert pair.mixed_diff == pytest.approx(ref.params[term], rel=1e-4)
    assert pair.mixed_p == pytest.approx(ref.pvalues[term], rel=1e-3)
    assert "mixed_p" in a.markdown()


def test_without_replicates_there_is_no_mixed_model_and_no_replicate_columns():
    runs = replicated_runs(replicates=1)
    a = analyse(runs, "t", metrics=["sharpe"])
    assert all(np.isnan(p.mixed_p) and p.n == p.n_runs == 12 for p in a.pairs)
    assert "mixed_p" not in a.markdown() and "## Replicates" not in a.markdown()


def test_beats_one_over_n_counts_scenario_wins_not_replicate_wins():
    runs = replicated_runs()
    row = next(r for r in analyse(runs, "t", metrics=["sharpe"]).beats if r["config"] == "single")
    means, base = by_hand_means(runs, "single", "sharpe"), by_hand_means(runs, "single", "equal_sharpe")
    k = int((means > base).sum())
    assert (row["wins"], row["n"], row["scenarios"]) == (k, 12, 12)
    assert row["p_vs_half"] == pytest.approx(stats.binomtest(k, 12, 0.5).pvalue)


def test_correlations_and_the_regression_read_one_point_per_config_and_scenario():
    runs = replicated_runs()
    a = analyse(runs, "t", metrics=["sharpe"])
    pooled = next(r for r in a.correlations if r["scope"] == "pooled" and r["y"] == "sharpe")
    assert pooled["n"] == 36  # 3 configs × 12 scenarios, not 108 runs
    assert a.regression.n_obs == 36 and a.regression.n_clusters == 4


def test_identical_replicates_fit_no_mixed_model_and_say_why():
    """A deterministic analyst repeats itself: a random-intercept model would count the copies as evidence."""
    runs = replicated_runs()
    first = runs[runs.replicate == 0].set_index(["config", "scenario_id"]).sharpe
    runs["sharpe"] = [first[(c, s)] for c, s in zip(runs.config, runs.scenario_id, strict=True)]
    pair = next(p for p in analyse(runs, "t", metrics=["sharpe"]).pairs if (p.a, p.b) == ("debate", "single"))
    assert np.isnan(pair.mixed_p) and pair.within_sd_a == 0 and "replicates are identical" in pair.note
    assert pair.n == 12 and pair.p_unclustered == pytest.approx(stats.ttest_rel(first["debate"], first["single"]).pvalue)
