"""A batch built in Python (``madbench.BatchSpec``, or a mapping of its fields) runs and estimates as its file does:
its relative paths read from a stated folder, its records typed."""

from pathlib import Path

import pytest
import yaml

import madbench
from madbench.runner.api_records import ConfigEstimate, EstimateFigures, ModelLine, RunCounts, TableRows
from madbench.runner.estimate.assumptions import Rates
from tests.runner.test_batch import ROOT, TICKERS

CONFIGS = [str(ROOT / "configs/debate/single-causal.yaml"), str(ROOT / "configs/debate/causal-debate-3.yaml")]


def python_batch(folder: Path, pack: Path, **over) -> madbench.BatchSpec:
    """Two quarters × two configs on rules/auto, every path but the configs' relative to ``folder``."""
    (folder / "scenarios.yaml").write_text(yaml.safe_dump({"scenarios": [
        {"id": f"s{q}", "invest_quarter": q, "tickers": TICKERS, "constraints": {"max_weight": 0.6}}
        for q in ("2021Q2", "2021Q3")]}))
    fields = {"name": "py", "scenarios": {"file": "scenarios.yaml"}, "configs": CONFIGS, "model": "rules/auto",
              "pack": str(pack.relative_to(folder)), "results_dir": "results", "cache_dir": "cache", "workers": 1,
              "max_in_flight": 4} | over
    return madbench.BatchSpec(**fields)


@pytest.mark.slow
def test_a_batch_built_in_python_runs_on_ray_and_is_the_batch_its_file_would_be(make_pack, tmp_path, ray_local,
                                                                                 monkeypatch):
    pack = make_pack(tickers=tuple(TICKERS))
    spec = python_batch(tmp_path, pack)
    monkeypatch.chdir(tmp_path.parent)  # elsewhere: the spec's paths are read from base_dir, not from here
    run = madbench.run(spec, base_dir=tmp_path)
    assert (run.ok, run.failed, run.pending, run.exit_status) == (4, 0, 0, 0)
    assert run.results_dir == tmp_path / "results" / "py"
    assert isinstance(run.tables, TableRows) and run.tables.runs == 4 and run.tables.rounds > 0
    assert run.spend.spent_usd == 0 and run.sequential is None and run.provider_batches is None
    assert "base_dir=" in run.retry_command and str(tmp_path) in run.batch_file
    runs = madbench.open_results(run.results_dir).runs
    assert sorted(runs["scenario_id"].unique()) == ["s2021Q2", "s2021Q3"] and len(runs) == 4
    # The same fields as a file in that folder are the same runs: all committed already, nothing left to estimate.
    (tmp_path / "py.yaml").write_text(yaml.safe_dump(spec.model_dump(exclude_unset=True)))
    again = madbench.estimate(tmp_path / "py.yaml")
    assert (again.runs, again.committed, again.estimate) == (4, 4, None)


def test_the_estimate_of_a_python_batch_is_typed_and_reads_its_paths_from_base_dir(make_pack, tmp_path, monkeypatch):
    spec = python_batch(tmp_path, make_pack(tickers=tuple(TICKERS)))
    elsewhere = tmp_path / "elsewhere"  # empty: the worker's shared temporary folder may hold another test's pack1
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    e = madbench.estimate(spec, base_dir=tmp_path)
    assert (e.batch, e.runs, e.committed, e.results_dir) == ("py", 4, 0, tmp_path / "results" / "py")
    est = e.estimate
    assert isinstance(est.total, EstimateFigures) and est.total.runs == 4
    assert [c.config for c in est.configs] == ["single-causal", "causal-debate-3"]
    assert all(isinstance(c, ConfigEstimate) and c.runs == 2 for c in est.configs)
    assert all(isinstance(m, ModelLine) for m in est.by_model) and isinstance(est.rates, Rates)
    assert est.total.cost_usd == 0  # rule-based answers cost nothing
    with pytest.raises(madbench.InputError, match="pack1: data pack directory not found"):  # without base_dir: from here
        madbench.estimate(spec)


def test_a_mapping_is_checked_as_a_batch_file_is(tmp_path):
    with pytest.raises(madbench.InputError, match="replicatez: unknown key"):
        madbench.estimate({"name": "py", "scenarios": {"file": "s.yaml"}, "configs": CONFIGS, "replicatez": 2})


def test_a_python_batch_changed_after_it_was_built_is_checked_again(make_pack, tmp_path):
    spec = python_batch(tmp_path, make_pack(tickers=tuple(TICKERS)))
    spec.workers = 0  # pydantic does not validate an assignment
    with pytest.raises(madbench.InputError, match="workers"):
        madbench.run(spec, base_dir=tmp_path)


def test_base_dir_is_refused_beside_a_batch_file_and_must_be_a_folder(make_pack, tmp_path):
    with pytest.raises(madbench.InputError, match="base_dir: is for a batch built in Python"):
        madbench.estimate(tmp_path / "batch.yaml", base_dir=tmp_path)
    spec = python_batch(tmp_path, make_pack(tickers=tuple(TICKERS)))
    with pytest.raises(madbench.InputError, match="is not a folder"):
        madbench.estimate(spec, base_dir=tmp_path / "missing")
    with pytest.raises(madbench.InputError, match="is of type int"):
        madbench.estimate(3)


def test_run_counts_say_which_status_failed_the_exit():
    from madbench.runner.api import exit_status
    assert exit_status("finished", RunCounts(ok=3, failed=0, pending=0)) == 0
    assert exit_status("finished", RunCounts(ok=2, failed=1, pending=0)) != 0
    assert exit_status("interrupted", RunCounts(ok=2, failed=0, pending=1)) != exit_status("finished", RunCounts(ok=2, failed=1, pending=0))
