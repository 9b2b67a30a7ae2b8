"""A driver killed with SIGKILL leaves runner actors behind for a few seconds; they must neither pay for calls
nor commit runs once it is gone, and the resumed batch pays only for what was in flight at the kill.
Calls are counted at a real HTTP server (the simulated provider)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from madbench.debate.trace import read_trace
from madbench.sim.provider import SimConfig, SimProvider
from tests.runner.test_batch import ROOT
from tests.runner.test_chaos import run_here, sim_batch

pytestmark = pytest.mark.slow

MAX_IN_FLIGHT = 2
#: causal-debate-3's widest phase: its three agents propose (critique, revise) at once, so a run in flight at the kill
#: may have three calls in flight.
CALLS_PER_RUN = 3


@pytest.fixture
def pack(make_pack):
    from tests.runner.test_batch import TICKERS
    return make_pack(tickers=tuple(TICKERS))


def start_driver(batch: Path) -> subprocess.Popen:
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "madbench.runner.cli", "run", str(batch), "--quiet"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def wait_for_commits(root: Path, n: int, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while len(list((root / "runs").glob("*.json"))) < n if (root / "runs").exists() else True:
        assert time.monotonic() < deadline, "no run committed in time"
        time.sleep(0.1)


def test_orphaned_actors_stop_paying_and_committing_and_the_resume_pays_only_for_calls_in_flight(pack, tmp_path, ray_local,
                                                                                                   capsys):
    with SimProvider(SimConfig(latency_median_s=0.4, latency_sigma=0.2, seed=5)) as sim:
        # Four runs, two at a time: the kill comes as the second pair starts, its calls in flight.
        batch = sim_batch(tmp_path, pack, sim, max_in_flight=MAX_IN_FLIGHT, replicates=1)
        root = tmp_path / "results" / "t"
        before = sim.stats.requests
        driver = start_driver(batch)
        wait_for_commits(root, 2)
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
        at_kill = sim.stats.requests
        committed_at_kill = len(list((root / "runs").glob("*.json")))
        time.sleep(6)  # the window in which orphaned actors used to go on calling and committing
        after_grace = sim.stats.requests
        # Only calls already past the guard when the driver died may still arrive (at most those a run in flight
        # sends at once; without the guard, 20 calls arrived in this window).
        late = after_grace - at_kill
        assert late <= MAX_IN_FLIGHT * CALLS_PER_RUN, f"{late} calls paid after the driver was killed"
        assert len(list((root / "runs").glob("*.json"))) == committed_at_kill

        rc, err = run_here(batch, capsys)
        assert rc == 0, err[-2000:]
        paid = sim.stats.requests - before
    runs = pd.read_parquet(root / "runs.parquet")
    assert len(runs) == 4 and runs.run_id.is_unique and (runs.status == "ok").all()
    # An uninterrupted batch pays each distinct request of its runs once (the simulator answers every one validly,
    # and an identical request of another run is served from the cache). Every call is paid once, except those in
    # flight at the kill (their answers died with their actors): at most three for each run in flight.
    uninterrupted = len({e["key"] for run_id in runs.run_id for e in read_trace(root / "traces" / f"{run_id}.jsonl").events
                         if e["event"] == "llm_call"})
    assert uninterrupted > 8 and paid <= uninterrupted + MAX_IN_FLIGHT * CALLS_PER_RUN, (paid, uninterrupted)
