"""`madbench stats` and `madbench power` from the command line."""

import json

import pandas as pd
import pytest
from scipy import stats

from madbench.results import ManifestRun, write_manifest
from madbench.runner.cli import main
from tests.eval.stats.test_tables_and_models import runs_frame, with_quarters
from tests.eval.stats.test_units import replicated_runs


def test_stats_json_records_and_csvs(tmp_path, capsys):
    file = tmp_path / "elsewhere.parquet"
    runs_frame().to_parquet(file)
    assert main(["stats", "--from-parquet", str(file), "--compare", "debate,single", "--metric", "sharpe", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    (pair,) = out["paired"]
    assert set(pair) >= {"metric", "a", "b", "n", "diff", "ci_low", "ci_high", "t", "p", "d", "wilcoxon_p"}
    assert (pair["a"], pair["b"], pair["n"]) == ("debate", "single", 30) and pair["p"] < 0.01
    assert {(s["config"], s["metric"]) for s in out["summaries"]} == {("debate", "sharpe"), ("single", "sharpe")}
    summary = pd.read_csv(tmp_path / "elsewhere-stats" / "summary.csv")
    assert len(summary) == 2 and (summary.n == 30).all()


def test_stats_markdown_on_a_results_dir(tmp_path, capsys):
    root = tmp_path / "results" / "b"
    root.mkdir(parents=True)
    runs_frame().to_parquet(root / "runs.parquet")
    assert main(["stats", str(root), "--correction", "bh"]) == 0
    out = capsys.readouterr().out
    assert "| metric | A: debate | B: single | C: mean |" in out and "## OLS `sharpe ~ rho_bar + C(config) + C(scenario_id)`" in out
    assert (root / "stats" / "paired.csv").exists() and (root / "stats" / "ols.csv").exists()


def test_stats_bad_input_is_named(tmp_path, capsys):
    file = tmp_path / "x.parquet"
    pd.DataFrame({"config": ["a"], "sharpe": [1.0]}).to_parquet(file)
    assert main(["stats", "--from-parquet", str(file)]) == 2
    assert "missing column(s) scenario_id" in capsys.readouterr().err
    runs_frame().to_parquet(file)
    assert main(["stats", "--from-parquet", str(file), "--compare", "debate,nope"]) == 2
    err = capsys.readouterr().err
    assert "config(s) with no committed run nope" in err and "choose from debate, single, mean" in err
    assert main(["stats"]) == 2


def test_power_cli(capsys):
    assert main(["power", "--metric", "sharpe", "--effect", "0.14", "--sd", "0.37", "--n", "35"]) == 0
    out = capsys.readouterr().out
    assert "power 80%:" in out and "power 90%:" in out and "with n = 35: power" in out
    assert main(["power", "--effect", "0.14", "--sd", "0", "--json"]) == 2


def test_missing_pairing_keys_are_one_error_line_naming_file_column_and_count(tmp_path, capsys):
    file = tmp_path / "holes.parquet"
    df = runs_frame()
    df.loc[[3, 4, 77], "scenario_id"] = None  # two in one config: once a "duplicate row(s)" traceback
    df.to_parquet(file)
    assert main(["stats", "--from-parquet", str(file)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{file}: column scenario_id has 3 missing value(s) (of 90 rows)" in err
    df = runs_frame().assign(replicate=0)
    df.loc[5, "replicate"] = None
    df.loc[[1, 2], "config"] = ""
    df.to_parquet(file)
    assert main(["stats", "--from-parquet", str(file)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "column config has 2 missing value(s)" in err
    df.loc[[1, 2], "config"] = "debate"
    df.to_parquet(file)
    assert main(["stats", "--from-parquet", str(file)]) == 2
    assert "column replicate has 1 missing value(s)" in capsys.readouterr().err


def test_a_run_twice_in_the_table_is_an_input_error(tmp_path, capsys):
    file = tmp_path / "twice.parquet"
    df = runs_frame()
    pd.concat([df, df.iloc[[0, 1]]], ignore_index=True).to_parquet(file)
    assert main(["stats", "--from-parquet", str(file)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "4 rows share their config/scenario_id with another row (e.g. config=debate, scenario_id=s0)" in err
    failed = df.iloc[[0]].assign(status="failed", sharpe=float("nan"))  # a failed attempt beside the finished run is no duplicate
    pd.concat([df, failed], ignore_index=True).to_parquet(file)
    assert main(["stats", "--from-parquet", str(file), "--metric", "sharpe"]) == 0


def test_stats_on_a_two_valued_rho_bar_prints_no_slope(tmp_path, capsys):
    from tests.eval.stats.test_degenerate import rules_like
    file = tmp_path / "rules.parquet"
    rules_like().to_parquet(file)
    assert main(["stats", "--from-parquet", str(file), "--metric", "sharpe"]) == 0
    out = capsys.readouterr().out
    assert "not fitted: rho_bar takes only 2 distinct values (0.883, 0.900)" in out and "| rho_bar |" not in out
    assert "correlations could be computed" in out and "| n/a |" not in out


def results_with_pairs(tmp_path, pairs):
    """A results directory as `madbench run` leaves it: runs.parquet and a manifest holding the batch's spec."""
    root = tmp_path / "results" / "b"
    root.mkdir(parents=True)
    runs_frame().to_parquet(root / "runs.parquet")
    spec = {"name": "b", "pairs": [{"control": c, "treatment": t, "factor": ["x"]} for c, t in pairs]}
    write_manifest(root, spec, [ManifestRun(run_id=c, scenario_id="s", config=c, replicate=0, status="ok")
                                for c in ("debate", "single", "mean")], "finished")
    return root


def test_stats_tests_the_batchs_declared_pairs_treatment_minus_control(tmp_path, capsys):
    """The batch declares single → debate and debate → mean (control → treatment): two comparisons, each treatment −
    control, not the three pairs of the configs in column order (debate − single would still be one; mean − debate
    would print as debate − mean)."""
    root = results_with_pairs(tmp_path, [("single", "debate"), ("debate", "mean")])
    runs = runs_frame()
    assert main(["stats", str(root), "--metric", "sharpe", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [(p["a"], p["b"]) for p in out["paired"]] == [("debate", "single"), ("mean", "debate")]
    assert out["comparisons"].startswith("the batch's declared pairs: a is the treatment, b its control")
    mean = lambda c: runs[runs.config == c].sharpe.to_numpy()
    assert out["paired"][1]["diff"] == pytest.approx(float((mean("mean") - mean("debate")).mean()))
    assert main(["stats", str(root), "--metric", "sharpe"]) == 0
    md = capsys.readouterr().out
    assert "Comparisons: the batch's declared pairs" in md and "(the declared pairs only)" in md
    assert "| sharpe | mean | debate |" in md and "| sharpe | debate | mean |" not in md and "| single | mean |" not in md
    # every pair only when asked for, or when none of the declared pairs is among the compared configs
    assert main(["stats", str(root), "--metric", "sharpe", "--json", "--all-pairs"]) == 0
    assert [(p["a"], p["b"]) for p in json.loads(capsys.readouterr().out)["paired"]] == [
        ("debate", "single"), ("debate", "mean"), ("single", "mean")]
    assert main(["stats", str(root), "--metric", "sharpe", "--json", "--compare", "single,mean"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [(p["a"], p["b"]) for p in out["paired"]] == [("single", "mean")]
    assert "none of the batch's declared pairs is among these configurations" in out["comparisons"]


def test_a_batch_without_pairs_and_a_parquet_compare_every_pair(tmp_path, capsys):
    root = results_with_pairs(tmp_path, [])
    assert main(["stats", str(root), "--metric", "sharpe", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["paired"]) == 3 and "the batch declares no pairs" in out["comparisons"]


@pytest.mark.slow
def test_stats_json_on_a_batch_with_3_replicates_counts_scenarios_and_tests_scenario_means(make_pack, tmp_path, capsys,
                                                                                           ray_local):
    """A real batch (rules/auto, 4 scenarios × 2 configs × 3 replicates): every paired comparison has n = 4
    scenarios and the p of scipy's ttest_rel on the scenario means, computed here from runs.parquet."""
    from tests.runner.test_batch import ROOT, TICKERS, write_batch
    batch = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)), replicates=3,
                        configs=[str(ROOT / "configs/debate/single-causal.yaml"), str(ROOT / "configs/debate/mean3-causal.yaml")])
    assert main(["run", str(batch), "--quiet", "--cache-dir", str(tmp_path / "cache")]) == 0
    capsys.readouterr()
    root = tmp_path / "results" / "t"
    assert main(["stats", str(root), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    runs = pd.read_parquet(root / "runs.parquet")
    runs = runs[runs.status == "ok"]
    assert len(runs) == 24 and out["n_scenarios"] == 4 and out["n_runs"] == 24 and out["unit"] == "scenario"
    assert out["correction"] == "holm" and out["paired"]
    tested = 0
    for pair in out["paired"]:
        assert pair["n"] == 4 and pair["n_runs"] == 12, pair
        means = runs.groupby(["config", "scenario_id"])[pair["metric"]].mean().unstack("config")
        ref = stats.ttest_rel(means[pair["a"]], means[pair["b"]])
        if pair["p"] is not None:
            assert pair["p"] == pytest.approx(ref.pvalue) and pair["p_adj"] >= pair["p"]
            tested += 1
    assert tested
    assert {s["n"] for s in out["summaries"]} == {4}


def test_stats_json_regression_has_quarter_clustered_errors_and_names_the_clusters(tmp_path, capsys):
    file = tmp_path / "quarters.parquet"
    with_quarters(runs_frame()).to_parquet(file)
    assert main(["stats", "--from-parquet", str(file), "--metric", "sharpe", "--json"]) == 0
    reg = json.loads(capsys.readouterr().out)["regression"]
    assert reg["cluster_by"] == "invest_quarter" and reg["n_clusters"] == 6 and reg["effects"] == "scenario fixed effects"
    assert any("< 30" in w for w in reg["warnings"])
    rho = next(c for c in reg["coefficients"] if c["term"] == "rho_bar")
    assert rho["se"] > 0 and {"coef", "t", "p", "ci_low", "ci_high"} <= set(rho)
    assert main(["stats", "--from-parquet", str(file), "--metric", "sharpe"]) == 0
    md = capsys.readouterr().out
    assert "Standard errors clustered by invest_quarter (6 clusters)" in md and "WARNING: only 6 invest_quarter cluster(s)" in md


def test_stats_power_plans_from_the_data_and_bad_flags_are_one_line(tmp_path, capsys):
    file = tmp_path / "reps.parquet"
    replicated_runs().to_parquet(file)
    assert main(["stats", "--from-parquet", str(file), "--metric", "sharpe", "--power", "--json"]) == 0
    plans = json.loads(capsys.readouterr().out)["power"]
    assert len(plans) == 3 and all(p["quarters"] == 4 and "scenarios" in p["line"] for p in plans)
    for bad, flag in ((["--power", "2"], "--power"), (["--share", "1.5"], "--share")):
        assert main(["stats", "--from-parquet", str(file), *bad]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and flag in err
    assert main(["stats", "--from-parquet", str(file), "--metric", "sharpe", "--paper-table", "--correction", "bh"]) == 0
    md = capsys.readouterr().out
    assert "Paper-table reproduction" in md and "Benjamini–Hochberg" in md
