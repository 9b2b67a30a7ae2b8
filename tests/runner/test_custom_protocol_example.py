"""examples/custom-protocol, copied to a folder outside the checkout, runs there through the CLI as its README says: a
protocol, rule-based answers and a run metric of its own, estimated, run on a real local Ray, and reported (stats and
the report)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "custom-protocol"


def madbench(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # madbench itself; the jury only from its own folder
    out = subprocess.run([sys.executable, "-m", "madbench.runner.cli", *args], cwd=cwd, env=env, capture_output=True,
                         text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


@pytest.mark.slow
def test_the_custom_protocol_example_runs_outside_the_checkout(tmp_path):
    here = tmp_path / "my-lab"
    shutil.copytree(EXAMPLE, here, ignore=shutil.ignore_patterns("results", "__pycache__"))
    assert ROOT not in here.parents
    cache = ["--cache-dir", str(tmp_path / "cache")]

    estimate = json.loads(madbench(["run", "batch.yaml", "--model", "rules/auto", "--dry-run", "--json", *cache], here).stdout)
    per_config = {c["config"]: c for c in estimate["configs"]}
    # the estimate follows the jury's own plan: every juror proposes, then every juror votes (4 scenarios each)
    assert per_config["jury-3"]["calls"] == 4 * (3 + 3) and per_config["jury-5"]["calls"] == 4 * (5 + 5)
    assert {m["kind"] for m in estimate["by_model"]} == {"proposal", "vote"}

    madbench(["run", "batch.yaml", "--model", "rules/auto", "--quiet", *cache], here)
    results = here / "results" / "jury@rules-auto"
    runs = pd.read_parquet(results / "runs.parquet")
    assert len(runs) == 8 and set(runs["status"]) == {"ok"}
    calls = pd.read_parquet(results / "calls.parquet")
    by_stage = calls.groupby(["run_id", "label"]).size().unstack()
    jurors = runs.set_index("run_id")["config"].map({"jury-3": 3, "jury-5": 5})
    assert set(by_stage.columns) == {"proposal", "vote"}
    assert (by_stage["proposal"] == jurors[by_stage.index]).all() and (by_stage["vote"] == by_stage["proposal"]).all()
    # the protocol's metric, read from each run's trace, agrees with the votes the protocol tallied
    votes = runs["x_votes"].map(json.loads)
    assert (runs["x_metric_winner_vote_share"] == votes.map(lambda v: max(v.values()) / sum(v.values()))).all()

    report = madbench(["stats", str(results), "--metric", "winner_vote_share,concentration"], here).stdout
    table = report.split("## Comparison")[1].split("##")[0]
    assert "| winner_vote_share |" in table and "| concentration |" in table
    # the report takes the run metrics among its defaults, by name
    madbench(["report", str(results), "--out", str(tmp_path / "report.html")], here)
    assert "winner_vote_share" in (tmp_path / "report.html").read_text()
