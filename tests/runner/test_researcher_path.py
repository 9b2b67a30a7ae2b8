"""The researcher's path, walked through the `madbench` commands on one batch against a local
OpenAI-compatible server: preflight → run → status → interrupt → resume → re-score → stats → report.

The server is madbench's simulated provider on 127.0.0.1 (it answers debate turns with the rule-based
analysts and counts every request it receives), reached through litellm exactly as a hosted model is.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from madbench.sim.provider import SimConfig, SimProvider

ROOT = Path(__file__).resolve().parents[2]
TICKERS = ["AAA", "BBB", "CCC", "DDD"]
KEY = "MADBENCH_PATH_TEST_KEY"
QUARTERS = ("2021Q2", "2021Q3", "2021Q4", "2022Q1", "2022Q2")


def madbench(*args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "madbench.runner.cli", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT, env=env or os.environ.copy())


def write_batch(tmp_path: Path, pack: Path, server: SimProvider, quarters=QUARTERS) -> Path:
    scenarios = tmp_path / "scenarios.yaml"
    scenarios.write_text(yaml.safe_dump({"scenarios": [
        {"id": f"s{q}", "invest_quarter": q, "tickers": TICKERS, "constraints": {"max_weight": 0.6}} for q in quarters]}))
    spec = {"name": "path", "scenarios": {"file": str(scenarios)},
            "configs": [str(ROOT / "configs/debate/single-causal.yaml"), str(ROOT / "configs/debate/causal-debate-3.yaml")],
            "model": {"model": "openai/madbench-sim", "api_base": server.url, "api_key_env": KEY, "send_context": True},
            "pack": str(pack), "results_dir": str(tmp_path / "results"), "cache_dir": str(tmp_path / "cache"),
            "max_in_flight": 2, "workers": 1, "retries": 0}
    path = tmp_path / "batch.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def wait_for(predicate, timeout: float, what: str):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


@pytest.mark.slow
def test_the_researchers_path_through_the_cli(make_pack, tmp_path):
    pack = make_pack(tickers=tuple(TICKERS))
    with SimProvider(SimConfig(latency_median_s=0.25, latency_sigma=0.2)) as server:
        _walk(tmp_path, pack, server)


def _walk(tmp_path: Path, pack: Path, server: SimProvider) -> None:
    env = {k: v for k, v in os.environ.items() if k != KEY}
    results = tmp_path / "results" / "path"

    # 1. Preflight: a missing key and an unbacktestable scenario are named before any request is sent.
    bad = write_batch(tmp_path, pack, server, quarters=QUARTERS + ("2031Q1",))
    r = madbench("run", str(bad), env=env)
    assert r.returncode == 2, r.stderr
    assert f"environment variable {KEY}" in r.stderr and "scenario s2031Q1" in r.stderr
    assert server.stats.requests == 0 and not results.exists()

    # 2. Run with the key; status shows runs in flight; Ctrl-C exits 130 with runs pending.
    batch = write_batch(tmp_path, pack, server)
    env[KEY] = "sk-placeholder-for-the-local-server"
    proc = subprocess.Popen([sys.executable, "-m", "madbench.runner.cli", "run", str(batch)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def in_flight():
        s = madbench("status", str(results), "--json", env=env)
        return json.loads(s.stdout) if s.returncode == 0 and json.loads(s.stdout)["in_flight"] else None
    status = wait_for(in_flight, 180, "`madbench status` to show runs in flight")
    assert status["state"] == "running" and status["in_flight"][0]["step"]
    wait_for(lambda: len(list((results / "runs").glob("*.json"))) >= 2, 300, "two committed runs")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    after = json.loads(madbench("status", str(results), "--json", env=env).stdout)
    assert after["state"] == "interrupted" and after["pending"] > 0 and after["in_flight"] == []

    # 3. The same command resumes and finishes every run.
    r = madbench("run", str(batch), "--quiet", env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    done = json.loads(madbench("status", str(results), "--json", env=env).stdout)
    assert (done["ok"], done["failed"], done["pending"]) == (10, 0, 0)

    # 4. Every run's totals in runs.parquet are the sums of its rows in calls.parquet.
    runs, calls = pd.read_parquet(results / "runs.parquet"), pd.read_parquet(results / "calls.parquet")
    sums = calls.groupby("run_id")[["prompt_tokens", "completion_tokens"]].sum().join(calls.groupby("run_id").size().rename("n"))
    for row in runs.itertuples():
        assert row.calls == sums.loc[row.run_id, "n"], row.run_id
        assert row.prompt_tokens == sums.loc[row.run_id, "prompt_tokens"] > 0
        assert row.completion_tokens == sums.loc[row.run_id, "completion_tokens"] > 0

    # 5. Re-scoring the batch with the server's model: a part for every run; a second pass is served from the cache.
    rescore = ["rescore", str(results), "--scorer", "openai/madbench-sim", "--api-base", server.url,
               "--api-key-env", KEY, "--send-context", "--label", "sim", "--quiet"]
    before = server.stats.requests
    r = madbench(*rescore, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert len(list((results / "scores" / "sim").glob("*.parquet"))) == 10 and server.stats.requests > before
    sent = server.stats.requests
    r = madbench(*rescore[:-3], "--label", "sim-again", "--quiet", env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert len(list((results / "scores" / "sim-again").glob("*.parquet"))) == 10
    assert server.stats.requests == sent  # every CRIT request was answered from the cache

    # 6. Statistics and the report finish on the batch.
    r = madbench("stats", str(results), env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    r = madbench("report", str(results), env=env)
    assert r.returncode == 0 and (results / "report.html").exists(), r.stderr[-3000:]
