"""The researcher's path, walked through the `madbench` commands on one batch against a local
OpenAI-compatible server: preflight → run → status → interrupt → resume → re-score → stats → report.

The server is madbench's simulated provider on 127.0.0.1 (it answers debate turns with the rule-based
analysts and counts every request it receives), reached through litellm exactly as a hosted model is.

Only the interrupted run is a process of its own (Ctrl-C and exit code 130 are a process's); every other command is
`madbench`'s entry point called in this process, on this process's Ray (the suite's, or one it starts).
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

from madbench.runner.cli import main
from madbench.sim.provider import SimConfig, SimProvider

ROOT = Path(__file__).resolve().parents[2]
TICKERS = ["AAA", "BBB", "CCC", "DDD"]
KEY = "MADBENCH_PATH_TEST_KEY"
PLACEHOLDER = "sk-placeholder-for-the-local-server"
# Ray workers read a model's key from their own environment, which is that of the process that started Ray: in a
# suite, whichever test came first. Collection comes before every test, so the key is set here; the preflight step
# takes it away from this process only (the driver checks it before anything is sent).
os.environ.setdefault(KEY, PLACEHOLDER)
QUARTERS = ("2021Q2", "2021Q4", "2022Q2")
RUNS = 2 * len(QUARTERS)  # two configs


def madbench(capsys, *args: str) -> tuple[int, str, str]:
    """`madbench ARGS` in this process: its exit code, stdout and stderr."""
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


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
def test_the_researchers_path_through_the_cli(make_pack, tmp_path, capsys, monkeypatch):
    pack = make_pack(tickers=tuple(TICKERS))
    with SimProvider(SimConfig(latency_median_s=0.1, latency_sigma=0.2)) as server:
        _walk(tmp_path, pack, server, capsys, monkeypatch)


def _walk(tmp_path: Path, pack: Path, server: SimProvider, capsys, monkeypatch) -> None:
    results = tmp_path / "results" / "path"

    # 1. Preflight: a missing key and an unbacktestable scenario are named before any request is sent.
    bad = write_batch(tmp_path, pack, server, quarters=QUARTERS + ("2031Q1",))
    with monkeypatch.context() as m:
        m.delenv(KEY)
        code, _, err = madbench(capsys, "run", str(bad))
    assert code == 2, err
    assert f"environment variable {KEY}" in err and "scenario s2031Q1" in err
    assert server.stats.requests == 0 and not results.exists()

    # 2. Run with the key; status shows runs in flight; Ctrl-C exits 130 with runs pending.
    batch = write_batch(tmp_path, pack, server)
    env = {**os.environ, KEY: PLACEHOLDER}
    # Its output goes to files: a pipe nobody reads while the test polls could fill and stall the batch.
    log = tmp_path / "run.err"
    with open(log, "w") as err_file:
        proc = subprocess.Popen([sys.executable, "-m", "madbench.runner.cli", "run", str(batch)], cwd=ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=err_file, text=True)

    def status() -> tuple[int, dict | None]:
        code, out, _ = madbench(capsys, "status", str(results), "--json")
        return code, json.loads(out) if code == 0 else None

    def in_flight():
        assert proc.poll() is None, f"the batch exited {proc.returncode} before a run was in flight"
        code, s = status()
        return s if code == 0 and s["in_flight"] else None
    try:
        running = wait_for(in_flight, 300, "`madbench status` to show runs in flight")
        assert running["state"] == "running" and running["in_flight"][0]["step"]
        wait_for(lambda: len(list((results / "runs").glob("*.json"))) >= 2, 300, "two committed runs")
    except BaseException:  # a failed wait leaves no batch (nor its Ray) running behind the test
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        print(log.read_text()[-3000:], file=sys.stderr)  # the batch's own account, beside the failure
        raise
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=120)
    assert proc.returncode == 130, log.read_text()[-3000:]
    after = status()[1]
    assert after["state"] == "interrupted" and after["pending"] > 0 and after["in_flight"] == []

    # 3. The same command resumes and finishes every run.
    code, _, err = madbench(capsys, "run", str(batch), "--quiet")
    assert code == 0, err[-3000:]
    done = status()[1]
    assert (done["ok"], done["failed"], done["pending"]) == (RUNS, 0, 0)

    # 4. Every run's totals in runs.parquet are the sums of its rows in calls.parquet.
    runs, calls = pd.read_parquet(results / "runs.parquet"), pd.read_parquet(results / "calls.parquet")
    sums = calls.groupby("run_id")[["prompt_tokens", "completion_tokens"]].sum().join(calls.groupby("run_id").size().rename("n"))
    for row in runs.itertuples():
        assert row.calls == sums.loc[row.run_id, "n"], row.run_id
        assert row.prompt_tokens == sums.loc[row.run_id, "prompt_tokens"] > 0
        assert row.completion_tokens == sums.loc[row.run_id, "completion_tokens"] > 0

    # 5. Re-scoring the batch with the server's model: every run in the label's table; a second pass is served from the cache.
    rescore = ["rescore", str(results), "--scorer", "openai/madbench-sim", "--api-base", server.url,
               "--api-key-env", KEY, "--send-context", "--label", "sim", "--quiet"]
    before = server.stats.requests
    code, _, err = madbench(capsys, *rescore)
    assert code == 0, err[-3000:]
    assert pd.read_parquet(results / "scores" / "sim" / "scores.parquet").run_id.nunique() == RUNS
    assert server.stats.requests > before
    sent = server.stats.requests
    code, _, err = madbench(capsys, *rescore[:-3], "--label", "sim-again", "--quiet")
    assert code == 0, err[-3000:]
    assert pd.read_parquet(results / "scores" / "sim-again" / "scores.parquet").run_id.nunique() == RUNS
    assert server.stats.requests == sent  # every CRIT request was answered from the cache

    # 6. Statistics and the report finish on the batch.
    code, _, err = madbench(capsys, "stats", str(results))
    assert code == 0, err[-3000:]
    code, _, err = madbench(capsys, "report", str(results))
    assert code == 0 and (results / "report.html").exists(), err[-3000:]
