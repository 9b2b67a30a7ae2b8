"""`madbench stats DIR1 DIR2 …` and ``madbench.runs_df`` / ``madbench.study_stats``: several results directories as
one study, each read as `stats` reads one; bad input one line, exit 2, nothing written; one directory as before."""

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from statsmodels.stats.multitest import multipletests

import madbench
from madbench.eval.stats.analysis import analyse
from madbench.eval.stats.frame import json_safe, load_runs
from madbench.results import ManifestRun, write_manifest
from madbench.runner.cli import main
from tests.eval.stats.test_tables_and_models import runs_frame, with_quarters
from tests.runner.test_reader_trust import BATCH, RUN, refused


def results_dir(root: Path, name: str, configs: list[str], pairs: list[tuple[str, str]], seed: int = 0) -> Path:
    """A results directory as `madbench run` leaves one: runs.parquet and a manifest with the batch's spec;
    ``pairs`` as (control, treatment)."""
    root.mkdir(parents=True)
    runs = with_quarters(runs_frame(seed=seed)).assign(batch=name)
    runs[runs.config.isin(configs)].to_parquet(root / "runs.parquet")
    spec = {"name": name, "pairs": [{"control": c, "treatment": t, "factor": ["x"]} for c, t in pairs]}
    write_manifest(root, spec, [ManifestRun(run_id=c, scenario_id="s", config=c, replicate=0, status="ok")
                                for c in configs], "finished")
    return root


@pytest.fixture
def two(tmp_path) -> tuple[Path, Path]:
    return (results_dir(tmp_path / "results" / "a", "a", ["debate", "single"], [("single", "debate")]),
            results_dir(tmp_path / "results" / "b", "b", ["debate", "mean"], [("mean", "debate")], seed=1))


def test_two_directories_are_one_study_with_one_family_and_the_batch_in_every_output(two, tmp_path, capsys):
    out = tmp_path / "study"
    assert main(["stats", *map(str, two), "--metric", "sharpe,total_return_pct", "--out", str(out), "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    paired = record["paired"]
    assert [(p["a"], p["b"], p["batch_a"], p["batch_b"]) for p in paired] == [
        ("a/debate", "single", "a", "a"), ("b/debate", "mean", "b", "b")] * 2
    holm = multipletests([p["p"] for p in paired], method="holm")[1]
    assert [p["p_adj"] for p in paired] == pytest.approx(list(holm))  # one family: all 4 tests of both batches
    assert {p["cluster_by"] for p in paired} == {"invest_quarter"}
    assert [b["batch"] for b in record["batches"]] == ["a", "b"] and "all its 2 batches" in record["family"]
    assert pd.read_csv(out / "paired.csv")[["batch_a", "batch_b"]].values.tolist() == [["a", "a"], ["b", "b"]] * 2
    assert set(pd.read_csv(out / "summary.csv").batch) == {"a", "b"} and (out / "batches.csv").is_file()
    assert not (two[0] / "stats").exists() and not (two[1] / "stats").exists()  # the study's tables go to --out alone
    assert main(["stats", *map(str, two), "--metric", "sharpe", "--out", str(out)]) == 0
    md = capsys.readouterr().out
    assert md.startswith("## Batches") and "| batch | a | a | b | b |" in md and "| batch_a | batch_b |" in md


def test_one_directory_prints_what_it_printed_before_with_no_batch_column(two, capsys):
    root = two[0]
    assert main(["stats", str(root), "--metric", "sharpe", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    runs = load_runs(root)
    before = analyse(runs, str(root / "runs.parquet"), ["debate", "single"], ["sharpe"], declared=[("debate", "single")])
    assert record == json.loads(json.dumps(json_safe(before.record() | {"compute_match": []})))
    assert "batches" not in record and "batch_a" not in record["paired"][0] and "batch" not in record["summaries"][0]
    assert "batch_a" not in pd.read_csv(root / "stats" / "paired.csv").columns


@pytest.mark.parametrize("case", ["no --out", "twice", "one name", "config clash", "parquet too"])
def test_a_study_that_cannot_be_told_apart_is_one_line_and_writes_nothing(two, tmp_path, capsys, case):
    a, b = map(str, two)
    out = ["--out", str(tmp_path / "study")]
    if case == "one name":  # batch a again, in a folder also called a
        results_dir(tmp_path / "copy" / "a", "a", ["debate", "mean"], [])
    if case == "config clash":  # batch c's own config b/debate is b's debate in the study
        root = results_dir(tmp_path / "results" / "c", "c", ["debate", "mean"], [])
        runs = pd.read_parquet(root / "runs.parquet")
        runs.assign(config=runs.config.replace({"debate": "b/debate"})).to_parquet(root / "runs.parquet")
    args = {"no --out": [a, b], "twice": [a, a + "/", *out], "one name": [a, str(tmp_path / "copy" / "a"), *out],
            "config clash": [a, b, str(tmp_path / "results" / "c"), *out],
            "parquet too": [a, b, "--from-parquet", str(two[0] / "runs.parquet"), *out]}[case]
    err = refused(capsys, tmp_path, ["stats", *args])
    assert {"no --out": "need --out FOLDER", "twice": "is given twice", "one name": "is batch 'a', by batch name and by folder",
            "config clash": "are both 'b/debate' in the study", "parquet too": "not both"}[case] in err


def test_each_directory_is_read_through_its_commit_points(two, tmp_path, capsys):
    """A runs table holding a run no commit point vouches for, in the second directory, is refused before the first
    is analysed or anything written."""
    real = Path(shutil.copytree(BATCH, tmp_path / "real"))
    (real / "runs" / f"{RUN}.json").unlink()
    err = refused(capsys, tmp_path, ["stats", str(two[0]), str(real), "--out", str(tmp_path / "study")])
    assert f"{real / 'runs.parquet'}: holds 1 run(s) no commit point vouches for" in err


def test_real_batches_of_one_name_and_one_run_ids_are_named_by_folder(tmp_path, capsys):
    """Two copies of one batch: one batch name, the same run ids; each is named by its folder, its configs
    batch/config, its rounds joined to its own runs."""
    b1, b2 = (shutil.copytree(BATCH, tmp_path / n) for n in ("b1", "b2"))
    assert main(["stats", str(b1), str(b2), "--out", str(tmp_path / "study"), "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert [(r["batch"], r["configs"]) for r in record["batches"]] == [
        ("b1", "b1/single-causal, b1/mean3-causal"), ("b2", "b2/single-causal, b2/mean3-causal")]
    assert record["n_runs"] == 4
    runs = madbench.runs_df(b1, b2)
    assert runs.groupby("batch").run_id.apply(sorted).to_dict() == {"b1": sorted(pd.read_parquet(BATCH / "runs.parquet").run_id)} | {
        "b2": sorted(pd.read_parquet(BATCH / "runs.parquet").run_id)}


def test_the_python_api_reads_several_directories_as_the_cli_does(two, tmp_path, capsys):
    runs = madbench.runs_df(*two)
    assert runs.batch.value_counts().to_dict() == {"a": 60, "b": 60}
    assert set(runs.config) == {"debate", "single", "mean"}  # as each batch stores them: a config is (batch, config)
    analysis = madbench.study_stats(*two, metrics=["sharpe"])
    assert main(["stats", *map(str, two), "--metric", "sharpe", "--out", str(tmp_path / "study"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["paired"] == json.loads(json.dumps(json_safe(analysis.record()["paired"])))
