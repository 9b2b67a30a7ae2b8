"""The batch runner on a real local Ray: spec validation, layout, no-op reruns, kill -9 and resume."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import yaml

from madbench.runner.cli import main
from tests.conftest import errors_only

ROOT = Path(__file__).resolve().parents[2]
TICKERS = ["AAA", "BBB", "CCC", "DDD"]
QUARTERS = ("2021Q2", "2021Q3", "2021Q4", "2022Q1")


def write_batch(tmp_path, pack, quarters=QUARTERS, **over) -> Path:
    """A batch over one scenario per quarter of ``quarters`` (fewer where a test's property needs fewer runs), on one
    runner actor: a test about several actors asks for them (``workers=2``); elsewhere a second actor's start (a
    Python process importing the debate stack, and litellm for a simulated provider) only adds CPU time."""
    scen = tmp_path / "scenarios.yaml"
    scen.write_text(yaml.safe_dump({"scenarios": [
        {"id": f"s{q}", "invest_quarter": q, "tickers": TICKERS, "constraints": {"max_weight": 0.6}}
        for q in quarters]}))
    spec = {"name": "t", "scenarios": {"file": str(scen)},
            "configs": [str(ROOT / "configs/debate/single-causal.yaml"), str(ROOT / "configs/debate/causal-debate-3.yaml")],
            "model": "rules/auto", "replicates": 2, "pack": str(pack), "results_dir": str(tmp_path / "results"),
            "max_in_flight": 4, "workers": 1, "cache_dir": str(tmp_path / "cache")} | over
    path = tmp_path / "batch.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.mark.parametrize("over,message", [
    ({"replicatez": 2}, "replicatez: unknown key"),
    ({"scenarios": {}}, "give `file`, `make`, or both"),
    ({"configs": ["does-not-exist.yaml"]}, "does-not-exist.yaml: debate config not found"),
    ({"name": "bad name!"}, "name: 'bad name!' is not a plain name: a name is letters, digits and _ . + = -"),
])
def test_bad_batch_specs_are_named(make_pack, tmp_path, capsys, over, message):
    batch = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)), **over)
    assert main(["run", str(batch), "--dry-run"]) == 2
    err = errors_only(capsys.readouterr().err)
    assert message in err and err.count("\n") == 1


def test_unknown_scenario_id_and_bad_config_in_batch(make_pack, tmp_path, capsys):
    pack = make_pack(tickers=tuple(TICKERS))
    batch = write_batch(tmp_path, pack)
    spec = yaml.safe_load(batch.read_text())
    spec["scenarios"]["ids"] = ["s2021Q2", "nope"]
    batch.write_text(yaml.safe_dump(spec))
    assert main(["run", str(batch), "--dry-run"]) == 2
    assert "scenarios.ids: not in" in capsys.readouterr().err
    spec["scenarios"].pop("ids")
    spec["grid"] = {"roundz": [1, 2]}
    batch.write_text(yaml.safe_dump(spec))
    assert main(["run", str(batch), "--dry-run"]) == 2
    assert "roundz: unknown key" in capsys.readouterr().err


def test_dry_run_counts(make_pack, tmp_path, capsys):
    batch = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)), grid={"temperature": [0.2, 0.7]})
    assert main(["run", str(batch), "--dry-run", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # 2 configs x 2 temperatures x 4 scenarios x 2 replicates; single: 1 propose + 1 crit; debate: 3 + 2*(3+3+3) + 1
    # when nothing fires, plus causal-debate-3's JS collapse re-revising 3 agents in half its rounds (expected case)
    assert out["runs"] == 32 and out["expected_calls"] == 8 * (2 + 22 + 3) * 2


def test_drawn_scenarios_follow_the_files(make_pack, tmp_path, capsys):
    """A file and a draw together (the leakage batch adds post-cutoff quarters to the paper's): both are run."""
    batch = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)), replicates=1)
    spec = yaml.safe_load(batch.read_text())
    spec["scenarios"]["make"] = {"quarters": "2021Q2:2021Q3", "count": 3, "min_tickers": 3, "max_tickers": 4, "seed": 1}
    batch.write_text(yaml.safe_dump(spec))
    assert main(["run", str(batch), "--dry-run", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"] == 2 * (4 + 3)


@pytest.mark.slow
def test_batch_layout_and_second_run_is_a_no_op(make_pack, tmp_path):
    batch = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)))
    assert main(["run", str(batch), "--quiet"]) == 0
    root = tmp_path / "results" / "t"
    runs = pd.read_parquet(root / "runs.parquet")
    assert len(runs) == 16 and runs.run_id.is_unique and (runs.status == "ok").all()
    assert {"config", "scenario_id", "replicate", "rounds", "aggregation", "roles", "tiers", "rho_bar", "sharpe",
            "equal_sharpe", "jsd_propose", "cost_usd", "node_id", "crit_causal_alignment"} <= set(runs.columns)
    rounds, calls = pd.read_parquet(root / "rounds.parquet"), pd.read_parquet(root / "calls.parquet")
    assert len(rounds) == 8 * 1 * 3 * 2 + 8 * 1  # debate: 2 rounds x 3 agents; single: one scored proposal
    assert set(calls.run_id) == set(runs.run_id) and (calls.is_llm == False).all()  # noqa: E712
    assert len(list((root / "traces").glob("*.jsonl.zst"))) == 16  # committed: compressed
    assert not list((root / "traces").glob("*.jsonl"))
    manifest = json.loads((root / "manifest.json").read_text())
    assert manifest["state"] == "finished" and {r["status"] for r in manifest["runs"]} == {"ok"}
    assert "ray" in manifest["versions"]
    assert not list((root / "parts").iterdir())  # every row log folded into the tables
    mtime = (root / "runs" / f"{runs.run_id.iloc[0]}.json").stat().st_mtime
    tables = {t: (root / f"{t}.parquet").stat().st_mtime_ns for t in ("runs", "rounds", "calls")}
    assert main(["run", str(batch), "--quiet"]) == 0
    assert {t: (root / f"{t}.parquet").stat().st_mtime_ns for t in tables} == tables  # nothing to fold: not rewritten
    lost = runs.run_id.iloc[1]  # committed, but its table rows never written (a crash or a full disk struck between)
    for table in ("runs", "rounds", "calls"):
        kept = pq.read_table(root / f"{table}.parquet")
        pq.write_table(kept.filter(pc.not_equal(kept.column("run_id"), lost)), root / f"{table}.parquet")
    t = time.monotonic()
    assert main(["run", str(batch), "--quiet"]) == 0
    assert time.monotonic() - t < 15
    assert (root / "runs" / f"{runs.run_id.iloc[0]}.json").stat().st_mtime == mtime  # nothing re-run
    again = pd.read_parquet(root / "runs.parquet")
    assert len(again) == 16 and lost in set(again.run_id)  # its rows were rebuilt from the trace
    assert len(pd.read_parquet(root / "rounds.parquet")) == len(rounds)
    assert main(["status", str(root)]) == 0


@pytest.mark.slow
def test_kill_minus_9_at_five_points_then_resume_equals_uninterrupted(make_pack, tmp_path):
    pack = make_pack(tickers=tuple(TICKERS))
    (tmp_path / "ref").mkdir()
    # One replicate (8 runs): a resume's equality to an uninterrupted batch is a property of each run, and the second
    # replicate doubled both batches' work without adding a kind of run.
    reference_batch = write_batch(tmp_path / "ref", pack, replicates=1)
    assert main(["run", str(reference_batch), "--quiet"]) == 0
    reference = pd.read_parquet(tmp_path / "ref" / "results" / "t" / "runs.parquet").set_index("run_id")
    (tmp_path / "chaos").mkdir()
    batch = write_batch(tmp_path / "chaos", pack, replicates=1)
    rng = random.Random(3)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for _ in range(5):
        proc = subprocess.Popen([sys.executable, "-m", "madbench.runner.cli", "run", str(batch), "--quiet"], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        time.sleep(rng.uniform(4.0, 9.0))
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and its whole local Ray, at once
        proc.wait()
    assert main(["run", str(batch), "--quiet"]) == 0
    runs = pd.read_parquet(tmp_path / "chaos" / "results" / "t" / "runs.parquet")
    assert runs.run_id.is_unique and len(runs) == 8 and (runs.status == "ok").all()
    runs = runs.set_index("run_id")
    assert set(runs.index) == set(reference.index)
    assert (runs.loc[reference.index, "weights"] == reference["weights"]).all()


def test_every_ready_batch_parses_and_its_configs_resolve():
    from madbench.runner.batch import load_batch, resolve_configs
    names = {p.stem for p in (ROOT / "configs" / "batches").glob("*.yaml")}
    assert {"rules-35", "quickstart", "rq2-e1", "rq2-e2", "a1-tiers", "a7", "a8", "a10"} <= names
    for p in (ROOT / "configs" / "batches").glob("*.yaml"):
        spec, base = load_batch(p)
        assert resolve_configs(spec, base, str(p))
