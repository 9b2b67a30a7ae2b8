"""One writer per results directory; no run lost to a run-id collision; no unbounded expansion."""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

import madbench.runner.batch as batch_mod
from madbench.runner.cli import main
from madbench.runner.lock import ResultsLock
from madbench.sim.provider import SimConfig, SimProvider
from tests.conftest import errors_only
from tests.runner.test_batch import ROOT, TICKERS, write_batch

KEY = "MADBENCH_HARDENING_TEST_KEY"


def one_line_error(capsys) -> str:
    err = errors_only(capsys.readouterr().err)
    assert err.count("\n") == 1, err
    return err


# -- 1. one writer per results directory


def test_a_held_lock_stops_a_second_driver_naming_the_holder(make_pack, tmp_path, capsys):
    batch = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)), replicates=1)
    root = tmp_path / "results" / "t"
    with ResultsLock(root, "madbench run"):
        t0 = time.monotonic()
        assert main(["run", str(batch), "--quiet"]) == 2
        assert time.monotonic() - t0 < 30
        err = one_line_error(capsys)
        assert f"host {socket.gethostname()}, pid {os.getpid()}, since " in err and str(root / ".lock") in err
        assert not (root / "manifest.json").exists()  # nothing written by the refused driver
        # A reader is not a writer: a dry run still works while the lock is held.
        assert main(["run", str(batch), "--dry-run", "--json"]) == 0
        capsys.readouterr()
    # Released: the lock file stays, empty, and can be taken again at once.
    assert (root / ".lock").read_text() == ""
    with ResultsLock(root):
        pass


def test_the_os_releases_the_lock_of_a_killed_holder(tmp_path):
    root = tmp_path / "r"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from runner.lock import ResultsLock; "
                               f"ResultsLock({str(root)!r}).acquire(); print('held', flush=True); time.sleep(600)"],
                              cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(Exception) as exc:
            ResultsLock(root).acquire()
        assert f"pid {holder.pid}" in str(exc.value)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    with ResultsLock(root) as lock:  # a stale lock from a killed driver is taken over
        assert f"pid {os.getpid()}" in lock.path.read_text()


def test_status_tells_a_running_batch_from_one_whose_driver_is_gone(tmp_path, capsys):
    from madbench.results import ManifestRun, write_manifest

    root = tmp_path / "r"
    runs = [ManifestRun(run_id=f"r{i}", scenario_id="s", config="c", replicate=i, status="pending", attempts=1,
                        in_flight_since="2025-01-01T00:00:00Z") for i in range(2)]
    write_manifest(root, {"name": "t"}, runs, "running")  # what a driver leaves behind at `kill -9`
    updated = json.loads((root / "manifest.json").read_text())["updated"]

    def status(*flags):
        assert main(["status", str(root), *flags]) == 0
        return capsys.readouterr().out

    driver = subprocess.Popen([sys.executable, "-c", "import time; from runner.lock import ResultsLock; "
                               f"ResultsLock({str(root)!r}).acquire(); print('held', flush=True); time.sleep(600)"],
                              cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert driver.stdout.readline().strip() == "held"
        assert "t: running (updated " in status() and "(2 in flight)" in status()
        live = json.loads(status("--json"))
        assert live["state"] == "running" and f"pid {driver.pid}" in live["driver"] and len(live["in_flight"]) == 2
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=30)
    out = status()
    assert out.startswith(f"batch t: stopped (driver gone: last update {updated}; run the same command to resume); 2 runs:")
    assert "(0 in flight)" in out and "in flight r0" not in out
    gone = json.loads(status("--json"))
    assert gone["state"].startswith("stopped (driver gone") and gone["driver"] is None and gone["in_flight"] == []
    with ResultsLock(root):  # taking the lock after status looked: status never holds it
        pass


def _sim_batch(tmp_path: Path, pack: Path, server: SimProvider) -> Path:
    scenarios = tmp_path / "scenarios.yaml"
    scenarios.write_text(yaml.safe_dump({"scenarios": [
        {"id": f"s{q}", "invest_quarter": q, "tickers": TICKERS, "constraints": {"max_weight": 0.6}}
        for q in ("2021Q2", "2021Q3", "2021Q4")]}))
    spec = {"name": "lock", "scenarios": {"file": str(scenarios)},
            "configs": [str(ROOT / "configs/debate/single-causal.yaml")],
            "model": {"model": "openai/madbench-sim", "api_base": server.url, "api_key_env": KEY, "send_context": True},
            "pack": str(pack), "results_dir": str(tmp_path / "results"), "cache_dir": str(tmp_path / "cache"),
            "max_in_flight": 1, "workers": 1, "retries": 0}
    path = tmp_path / "batch.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _madbench(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "madbench.runner.cli", *args], capture_output=True, text=True, timeout=600,
                          cwd=ROOT, env=env)


@pytest.mark.slow
def test_two_concurrent_drivers_one_writes_the_other_fails_at_once(make_pack, tmp_path):
    pack = make_pack(tickers=tuple(TICKERS))
    env = os.environ.copy() | {KEY: "sk-placeholder-for-the-local-server"}
    results = tmp_path / "results" / "lock"
    with SimProvider(SimConfig(latency_median_s=2.0, latency_sigma=0.1)) as server:
        batch = _sim_batch(tmp_path, pack, server)
        first = subprocess.Popen([sys.executable, "-m", "madbench.runner.cli", "run", str(batch), "--quiet"], cwd=ROOT, env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            t0 = time.monotonic()
            while not (results / "manifest.json").exists():
                assert first.poll() is None, first.communicate()[1][-3000:]
                assert time.monotonic() - t0 < 120, "the first driver never wrote its manifest"
                time.sleep(0.2)
            second = _madbench("run", str(batch), "--quiet", env=env)
            assert first.poll() is None, "the first driver finished before the second one started: slow the provider"
            assert second.returncode == 2, second.stderr[-3000:]
            assert f"pid {first.pid}" in second.stderr and f"host {socket.gethostname()}" in second.stderr
            assert "since " in second.stderr and errors_only(second.stderr).count("\n") == 1
            status = _madbench("status", str(results), "--json", env=env)  # a reader still works
            assert status.returncode == 0 and json.loads(status.stdout)["state"] == "running", status.stderr
        finally:
            first.send_signal(signal.SIGKILL)  # a killed driver: the OS drops its lock
            first.communicate(timeout=60)
    with ResultsLock(results):  # the OS dropped the killed driver's lock: the next driver may write
        pass
    after = json.loads(_madbench("status", str(results), "--json", env=env).stdout)
    assert after["failed"] == 0 and after["ok"] + after["pending"] == 3  # nothing the second driver did is in it


def test_a_second_driver_is_refused_before_its_checks(make_pack, tmp_path, capsys, monkeypatch):
    """The lock's holder is named at once: not after the checks a refused driver need not make, nor instead of them
    a problem of its own (here a missing key)."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    batch = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)), model="openai/gpt-4o-mini")
    with ResultsLock(tmp_path / "results" / "t", "madbench run"):
        assert main(["run", str(batch), "--quiet"]) == 2
    err = errors_only(capsys.readouterr().err)
    assert "another driver is writing" in err and f"pid {os.getpid()}" in err and err.count("\n") == 1
    assert main(["run", str(batch), "--quiet"]) == 2  # the lock let go: now its own problem is the one named
    assert "OPENAI_API_KEY" in capsys.readouterr().err


# -- 2. run-id collisions and replicates / ids validation


@pytest.mark.parametrize("over,message", [
    ({"replicates": 0}, "replicates: a count of replicates must be at least 1 (got 0)"),
    ({"replicates": -1}, "a count of replicates must be at least 1 (got -1)"),
    ({"replicates": True}, "replicates: Input should be a valid integer"),  # not 1
    ({"replicates": [0, True]}, "replicates[1]: Input should be a valid integer"),
    ({"replicates": []}, "an empty list of replicates runs nothing"),
    ({"replicates": [-5, -5]}, "sample indices must be non-negative (got -5, -5)"),
    ({"replicates": [3, 1, 3]}, "sample index 3 is listed more than once"),
    ({"scenarios": {"file": "scenarios.yaml", "ids": []}}, "`ids: []` selects no scenario"),
    ({"scenarios": {"file": "scenarios.yaml", "ids": ["s2021Q2", "s2021Q3", "s2021Q2"]}}, "`ids` lists s2021Q2 more than once"),
])
def test_replicates_and_ids_that_would_lose_or_skip_runs_are_rejected(make_pack, tmp_path, capsys, over, message):
    batch = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)), **over)
    assert main(["run", str(batch), "--dry-run"]) == 2
    assert message in one_line_error(capsys)


def test_two_configs_of_the_same_content_are_named_as_one_run(make_pack, tmp_path, capsys):
    original = yaml.safe_load((ROOT / "configs/debate/single-causal.yaml").read_text())
    copy = tmp_path / "single-causal-copy.yaml"
    copy.write_text(yaml.safe_dump(original | {"name": "single-causal-copy"}))
    batch = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)), replicates=1,
                        configs=[str(ROOT / "configs/debate/single-causal.yaml"), str(copy)])
    assert main(["run", str(batch), "--dry-run"]) == 2
    err = one_line_error(capsys)
    assert "two runs of the batch are one run" in err
    assert "scenario s2021Q2 × config single-causal × replicate 0" in err
    assert "scenario s2021Q2 × config single-causal-copy × replicate 0" in err
    assert "configs single-causal and single-causal-copy resolve to the same debate" in err


def test_scenarios_of_the_same_content_under_two_ids_are_two_runs(make_pack, tmp_path, capsys):
    batch = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)), replicates=[0, 7])
    scen = tmp_path / "scenarios.yaml"
    scen.write_text(yaml.safe_dump({"scenarios": [
        {"id": i, "invest_quarter": "2021Q2", "tickers": TICKERS, "constraints": {"max_weight": 0.6}} for i in ("a", "b")]}))
    assert main(["run", str(batch), "--dry-run", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"] == 2 * 2 * 2  # configs × scenarios × replicates


def test_run_ids_tell_scenario_ids_apart():
    from madbench.data.scenario import Scenario
    from madbench.debate.config_file import load_debate_config
    from madbench.runner.pipeline import run_id_for

    cfg = load_debate_config(ROOT / "configs/debate/single-causal.yaml")
    a = Scenario.model_validate({"id": "a", "invest_quarter": "2021Q2", "tickers": TICKERS})
    b = a.model_copy(update={"id": "b"})
    assert run_id_for(a, cfg, 0) != run_id_for(b, cfg, 0)
    assert run_id_for(a, cfg, 0) == run_id_for(a.model_copy(), cfg, 0)


# -- 6. bounded expansion


def test_a_billion_replicates_fail_fast_without_growing(make_pack, tmp_path, capsys):
    batch = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)), replicates=1_000_000_000)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    assert main(["run", str(batch), "--dry-run"]) == 2
    assert time.perf_counter() - t0 < 5
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0 < 100_000  # KiB: no list of a billion
    err = one_line_error(capsys)
    # Checked from the spec's counts before the scenario file is read: at least one scenario.
    assert "× at least 1 scenario(s) × 1,000,000,000 replicate(s) = at least 2,000,000,000 runs, over the limit of " \
           "100,000 runs" in err
    # Never advice that cannot be followed: past the ceiling, split the batch (no --max-runs allows it).
    assert "--max-runs" not in err and "split it into batches of at most 1,000,000 runs" in err


@pytest.mark.parametrize("max_runs", ["6000000000", "1000001"])
def test_max_runs_past_the_ceiling_is_refused_before_anything_is_built(make_pack, tmp_path, capsys, max_runs):
    batch = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)), replicates=1_000_000_000)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert main(["run", str(batch), "--dry-run", "--max-runs", max_runs]) == 2  # a MemoryError before the ceiling
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0 < 100_000
    err = one_line_error(capsys)
    assert f"--max-runs: {int(max_runs):,} is over the 1,000,000 runs any batch may have" in err
    assert "split the study into batches of at most 1,000,000 runs" in err
    # At the ceiling itself the flag is taken, and a batch over it is told to split, not to raise the flag.
    assert main(["run", str(batch), "--dry-run", "--max-runs", "1000000"]) == 2
    err = one_line_error(capsys)
    assert "over the limit of 1,000,000 runs" in err and "split it into batches" in err and "--max-runs 2" not in err


def test_a_huge_grid_fails_before_building_a_config(make_pack, tmp_path, capsys):
    batch = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)), replicates=1,
                        grid={"rounds": list(range(100)), "temperature": [0.1 * i for i in range(100)]})
    t0 = time.perf_counter()
    assert main(["run", str(batch), "--dry-run"]) == 2
    assert time.perf_counter() - t0 < 5
    assert "= 10,000 cells, over the limit of 1,000 (MAX_GRID_CELLS)" in one_line_error(capsys)


def test_an_empty_grid_list_is_an_error(make_pack, tmp_path, capsys):
    batch = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)), grid={"rounds": []})
    assert main(["run", str(batch), "--dry-run"]) == 2
    assert "grid.rounds: an empty list of values crosses to no run at all" in one_line_error(capsys)


def test_max_runs_lets_a_larger_batch_through(make_pack, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(batch_mod, "MAX_RUNS", 20)
    batch = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)), replicates=3)  # 2 configs × 4 scenarios × 3 = 24
    assert main(["run", str(batch), "--dry-run", "--json"]) == 2
    assert "= 24 runs, over the limit of 20 runs" in one_line_error(capsys)
    assert main(["run", str(batch), "--dry-run", "--json", "--max-runs", "23"]) == 2
    assert "over the limit of 23 runs" in one_line_error(capsys)
    assert main(["run", str(batch), "--dry-run", "--json", "--max-runs", "24"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"] == 24
