"""The quarter-clustered paired test: CR2 standard errors with Satterthwaite df, checked against the ordinary t, a
hand-worked example, the matrix form of Bell & McCaffrey (2002), and its size in a simulation of the market-35 design."""

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from madbench.data.errors import InputError
from madbench.eval.stats.analysis import analyse
from madbench.eval.stats.clustered import cr2_mean_test, cr2_se_df
from madbench.eval.stats.frame import json_safe
from madbench.eval.stats.paired import compare

#: Scenarios per quarter of configs/scenarios/market-35.yaml: 16 quarters, 13 of 2 scenarios and 3 of 3.
MARKET_35 = np.array([2, 2, 2, 3, 2, 2, 3, 2, 2, 2, 3, 2, 2, 2, 2, 2])


def cr2_by_matrices(d: np.ndarray, clusters: np.ndarray, confidence: float = 0.95) -> dict[str, float]:
    """The CR2 test of the mean written out as matrices (Bell & McCaffrey 2002; Pustejovsky & Tipton 2018), an
    independent oracle: X = 1, H = X(X'X)⁻¹X', A_g = (I − H_gg)^{−1/2} by eigendecomposition,
    V = Σ_g (X_g'A_g e_g)² / (X'X)², and the Satterthwaite df with working model Ω = I from the n × G matrix
    G whose column g is (I − H)_g' A_g X_g (X'X)⁻¹: ν = tr(G'G)² / ‖G'G‖_F²."""
    n = len(d)
    x = np.ones((n, 1))
    xtx_inv = np.linalg.inv(x.T @ x)
    h = x @ xtx_inv @ x.T
    beta = (xtx_inv @ x.T @ d).item()
    e = d - x[:, 0] * beta
    meat, columns = 0.0, []
    for g in np.unique(clusters):
        rows = np.flatnonzero(clusters == g)
        w, q = np.linalg.eigh(np.eye(len(rows)) - h[np.ix_(rows, rows)])
        a_g = q @ np.diag(w ** -0.5) @ q.T
        meat += (x[rows].T @ a_g @ e[rows]).item() ** 2
        columns.append((np.eye(n) - h)[:, rows] @ a_g @ x[rows] @ xtx_inv[:, 0])
    se = math.sqrt(xtx_inv.item() ** 2 * meat)
    gram = np.column_stack(columns).T @ np.column_stack(columns)
    df = np.trace(gram) ** 2 / np.sum(gram ** 2)
    t = beta / se
    half = stats.t.ppf(0.5 + confidence / 2, df) * se
    return {"mean": beta, "se": se, "df": df, "t": t, "p": 2 * stats.t.sf(abs(t), df), "ci_low": beta - half, "ci_high": beta + half}


def quarter_labels(sizes: np.ndarray) -> np.ndarray:
    return np.repeat(np.arange(len(sizes)), sizes)


def test_every_scenario_its_own_cluster_is_the_ordinary_paired_t():
    d = np.random.default_rng(1).normal(0.1, 1.0, 35)
    got = cr2_mean_test(d, np.arange(35))
    ref = stats.ttest_1samp(d, 0)
    ci = ref.confidence_interval(0.95)
    assert got.df == pytest.approx(34) and got.se == pytest.approx(d.std(ddof=1) / math.sqrt(35))
    assert (got.t, got.p) == pytest.approx((ref.statistic, ref.pvalue))
    assert (got.ci_low, got.ci_high) == pytest.approx((ci.low, ci.high)) and got.n_clusters == 35


def test_a_hand_worked_example_of_two_clusters():
    # d = (1, 2, 3, 6) in {1, 2}, {3, 6}: d̄ = 3, e = (−2, −1, 0, 3), cluster sums S = (−3, 3), n_g/n = 1/2, so
    # V = (9/(1/2) + 9/(1/2)) / 16 = 2.25, SE 1.5, t = 2; B = 2·[[2 − 1, −1], [−1, 2 − 1]] gives ν = 4² / 16 = 1;
    # t(1) is Cauchy: p = 1 − 2·atan(2)/π.
    got = cr2_mean_test([1.0, 2.0, 3.0, 6.0], ["q1", "q1", "q2", "q2"])
    assert (got.mean, got.se, got.t, got.df) == pytest.approx((3.0, 1.5, 2.0, 1.0))
    assert got.p == pytest.approx(1 - 2 * math.atan(2) / math.pi) and got.p == pytest.approx(0.29517, abs=5e-6)
    assert (got.ci_low, got.ci_high) == pytest.approx((3 - 12.7062047 * 1.5, 3 + 12.7062047 * 1.5))


@pytest.mark.parametrize("sizes", [MARKET_35, np.array([1, 2, 5, 3, 1, 4]), np.array([7, 1])])
def test_agrees_with_the_matrix_form_on_unequal_clusters(sizes):
    rng = np.random.default_rng(int(sizes.sum()))
    labels = quarter_labels(sizes)
    d = 0.2 + rng.normal(size=len(sizes))[labels] * 0.5 + rng.normal(size=len(labels))
    got, ref = cr2_mean_test(d, labels), cr2_by_matrices(d, labels)
    for key in ("mean", "se", "df", "t", "p", "ci_low", "ci_high"):
        assert getattr(got, key) == pytest.approx(ref[key], rel=1e-9), key


def test_equal_clusters_give_the_t_on_the_cluster_means():
    rng = np.random.default_rng(4)
    labels = quarter_labels(np.full(6, 4))
    d = rng.normal(size=6)[labels] + rng.normal(size=24)
    got = cr2_mean_test(d, labels)
    ref = stats.ttest_1samp(pd.Series(d).groupby(labels).mean(), 0)
    assert got.df == pytest.approx(5) and (got.t, got.p) == pytest.approx((ref.statistic, ref.pvalue))


def test_one_cluster_or_mismatched_labels_are_refused():
    with pytest.raises(ValueError, match="at least 2 clusters"):
        cr2_mean_test([1.0, 2.0, 3.0], ["q", "q", "q"])
    with pytest.raises(ValueError, match="one cluster label per difference"):
        cr2_mean_test([1.0, 2.0, 3.0], ["q", "r"])


def rejection_rates(sizes: np.ndarray, rho: float, replications: int, seed: int, alpha: float = 0.05) -> tuple[float, float]:
    """Type I error of the ordinary t and of the CR2 test on differences with true mean 0 and intra-cluster
    correlation ``rho`` (a shared quarter effect plus independent noise, unit variance), over ``replications``."""
    rng = np.random.default_rng(seed)
    labels = quarter_labels(sizes)
    n = len(labels)
    plain = clustered = 0
    for chunk in np.array_split(np.arange(replications), max(1, replications // 50_000)):
        d = math.sqrt(rho) * rng.normal(size=(len(chunk), len(sizes)))[:, labels] + math.sqrt(1 - rho) * rng.normal(size=(len(chunk), n))
        t_plain = d.mean(axis=1) / (d.std(axis=1, ddof=1) / math.sqrt(n))
        mean, se, df, _ = cr2_se_df(d, labels)
        plain += int((np.abs(t_plain) > stats.t.ppf(1 - alpha / 2, n - 1)).sum())
        clustered += int((np.abs(mean / se) > stats.t.ppf(1 - alpha / 2, df)).sum())
    return plain / replications, clustered / replications


def test_the_batch_form_agrees_with_the_one_sample_form():
    labels = quarter_labels(MARKET_35)
    d = np.random.default_rng(8).normal(size=(5, len(labels)))
    mean, se, df, g = cr2_se_df(d, labels)
    for row, m, s in zip(d, mean, se, strict=True):
        one = cr2_mean_test(row, labels)
        assert (one.mean, one.se, one.df, one.n_clusters) == pytest.approx((m, s, df, g))


def test_on_the_market_35_quarters_the_ordinary_t_over_rejects_and_the_clustered_test_holds_its_size():
    """35 scenarios in the 16 quarters of market-35 (13 of 2, 3 of 3), paired differences with intra-quarter
    correlation 0.15 and mean 0 (Kish design effect 1 + (Σn_g²/n − 1)·0.15 = 1.19). Measured at 200,000
    replications: ordinary t 0.0731, CR2 0.0511 (this seed); 0.0712–0.0723 and 0.0494–0.0506 over seeds 0–4; one
    Monte Carlo standard error is about 0.0006. (16 quarters of exactly 2 give the ordinary t 0.067 only.)"""
    assert MARKET_35.sum() == 35 and len(MARKET_35) == 16
    plain, clustered = rejection_rates(MARKET_35, 0.15, 200_000, seed=2024)
    assert plain > 0.07 and clustered <= 0.057
    assert clustered == pytest.approx(0.05, abs=0.004)


def test_with_no_clustering_both_tests_hold_their_size():
    plain, clustered = rejection_rates(MARKET_35, 0.0, 100_000, seed=7)
    assert plain == pytest.approx(0.05, abs=0.004) and clustered == pytest.approx(0.05, abs=0.004)


def market_runs(seed: int = 3, rho: float = 0.3, shift: float = 0.25) -> pd.DataFrame:
    """Two configs on 35 scenarios in the market-35 quarters; their differences share a quarter effect."""
    rng = np.random.default_rng(seed)
    labels = quarter_labels(MARKET_35)
    base = rng.normal(0.5, 1.0, 35)
    diff = shift + math.sqrt(rho) * rng.normal(size=16)[labels] + math.sqrt(1 - rho) * rng.normal(size=35)
    rows = []
    for config, values in (("debate", base + diff), ("single", base)):
        rows += [{"config": config, "scenario_id": f"s{i:02d}", "invest_quarter": f"Q{labels[i]:02d}", "status": "ok",
                  "sharpe": v} for i, v in enumerate(values)]
    return pd.DataFrame(rows)


def test_the_primary_paired_test_is_clustered_by_quarter_with_the_ordinary_t_beside_it():
    runs = market_runs()
    c = compare(runs, "debate", "single", "sharpe")
    wide = runs.pivot(index="scenario_id", columns="config", values="sharpe")
    d = (wide["debate"] - wide["single"]).to_numpy()
    quarters = runs[runs.config == "debate"].set_index("scenario_id").loc[wide.index, "invest_quarter"].to_numpy()
    ref, plain = cr2_by_matrices(d, quarters), stats.ttest_rel(wide["debate"], wide["single"])
    assert (c.cluster_by, c.n_clusters, c.n) == ("invest_quarter", 16, 35)
    assert (c.t, c.p, c.se, c.df, c.ci_low, c.ci_high) == pytest.approx(tuple(ref[k] for k in ("t", "p", "se", "df", "ci_low", "ci_high")))
    assert (c.t_unclustered, c.p_unclustered) == pytest.approx((plain.statistic, plain.pvalue))
    assert c.se_unclustered == pytest.approx(d.std(ddof=1) / math.sqrt(35)) and c.p != pytest.approx(c.p_unclustered)
    assert c.d == pytest.approx(d.mean() / d.std(ddof=1)) and c.note == ""


def test_without_quarters_or_with_a_quarter_each_the_test_is_the_ordinary_t_unchanged():
    runs = market_runs()
    wide = runs.pivot(index="scenario_id", columns="config", values="sharpe")
    plain = stats.ttest_rel(wide["debate"], wide["single"])
    none = compare(runs.drop(columns="invest_quarter"), "debate", "single", "sharpe")
    own = compare(runs.assign(invest_quarter=runs.scenario_id), "debate", "single", "sharpe")
    empty = compare(runs.assign(invest_quarter=None), "debate", "single", "sharpe")
    for c in (none, own, empty):
        assert (c.t, c.p, c.df) == (c.t_unclustered, c.p_unclustered, 34.0) and c.p == pytest.approx(plain.pvalue)
    assert (none.cluster_by, none.n_clusters, own.cluster_by, own.n_clusters) == ("scenario_id", 35, "invest_quarter", 35)
    md = analyse(runs.drop(columns="invest_quarter"), "t", metrics=["sharpe"]).markdown()
    assert "p_unclustered" not in md and "takes the scenarios as independent (no invest_quarter to cluster by)" in md


def test_all_scenarios_in_one_quarter_keep_the_ordinary_t_and_say_so():
    c = compare(market_runs().assign(invest_quarter="2024Q1"), "debate", "single", "sharpe")
    assert c.cluster_by == "scenario_id" and c.p == c.p_unclustered
    assert c.note.startswith("not clustered: all 35 scenarios in one invest_quarter")


def test_a_scenario_with_two_quarters_is_an_input_error():
    runs = market_runs()
    runs.loc[(runs.config == "single") & (runs.scenario_id == "s00"), "invest_quarter"] = "Q15"
    with pytest.raises(InputError, match="more than one invest_quarter"):
        analyse(runs, "runs.parquet", metrics=["sharpe"])
    runs.loc[runs.scenario_id == "s00", "invest_quarter"] = None
    with pytest.raises(InputError, match="invest_quarter is missing for 1 scenario"):
        analyse(runs, "runs.parquet", metrics=["sharpe"])


def test_the_family_adjusts_the_clustered_p_and_the_outputs_name_the_clusters():
    runs = pd.concat([market_runs(), market_runs(shift=0.1).query("config == 'debate'").assign(config="mean")])
    a = analyse(runs, "t", metrics=["sharpe"], correction="holm")
    holm = np.maximum.accumulate([min(1.0, x * k) for x, k in zip(sorted(p.p for p in a.pairs), (3, 2, 1), strict=True)])
    assert sorted(p.p_adj for p in a.pairs) == pytest.approx(list(holm))  # Holm over the clustered p
    record = json.loads(json.dumps(json_safe(a.record())))
    assert {(r["cluster_by"], r["n_clusters"]) for r in record["paired"]} == {("invest_quarter", 16)}
    assert {"p_unclustered", "t_unclustered", "se", "df"} <= set(record["paired"][0])
    line = "p: clustered by invest_quarter (CR2 standard errors, Satterthwaite df), 16 clusters"
    assert record["clustering"].startswith(line)
    md = a.markdown()
    header = next(x for x in md.splitlines() if x.startswith("| metric | a | b |"))
    assert line in a.table.note() and line in md and "| p_unclustered |" in header and "| n_clusters |" in header
    assert "unclustered paired p < 0.15" in a.paper_table.note()
