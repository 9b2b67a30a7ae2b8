"""Everything at once: two drivers started together, the driver killed with SIGKILL at two depths, and a
provider answering 30% 429, 5% 500, 5% stalls and 5% garbage. The batch must end with every run committed
exactly once, every table complete, every trace chain intact, and no answer paid for twice except those
in flight at a kill. Calls are counted at the server (a real HTTP server on 127.0.0.1)."""

import collections
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from madbench.debate.trace import read_trace
from tests.fault_server import Faults, FaultServer
from tests.runner.test_batch import QUARTERS, ROOT, TICKERS, write_batch
from tests.runner.test_chaos import run_here

pytestmark = pytest.mark.slow

MAX_IN_FLIGHT = 4
KILLS = 2


def chaos_batch(tmp_path: Path, pack: Path, server: FaultServer) -> Path:
    model = {"model": "openai/madbench-sim", "api_base": server.url, "send_context": True,
             "limits": {"max_concurrency": 16, "retry_after_cap_s": 1.0},
             "retry": {"backoff_base_s": 0.1, "backoff_max_s": 0.5, "max_rate_limit_retries": 50,
                       "max_transient_retries": 20, "timeout_s": 1.0}}
    # Four runs on two actors: two kills land between and inside them, and the resume has runs of its own left to do.
    return write_batch(tmp_path, pack, quarters=QUARTERS[:2], model=model,
                       configs=[str(ROOT / "configs/debate/causal-debate-3.yaml")], grid={"rounds": [1, 2]},
                       replicates=1, cache_dir=str(tmp_path / "cache"), max_in_flight=MAX_IN_FLIGHT, workers=2)


def driver(batch: Path) -> subprocess.Popen:
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "madbench.runner.cli", "run", str(batch), "--quiet"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def refused_and_running(a: subprocess.Popen, b: subprocess.Popen) -> tuple[subprocess.Popen, subprocess.Popen]:
    """Of two drivers started together, one is refused at once (exit 2, naming the holder): (the other, it)."""
    deadline = time.monotonic() + 180
    while a.poll() is None and b.poll() is None:
        assert time.monotonic() < deadline, "neither driver was refused"
        time.sleep(0.05)
    running, refused = (b, a) if a.poll() is not None else (a, b)
    err = refused.communicate()[1]
    assert refused.returncode == 2 and "another driver is writing" in err, err[-1500:]
    return running, refused


def committed(root: Path) -> int:
    return len(list((root / "runs").glob("*.json"))) if (root / "runs").exists() else 0


def test_two_drivers_two_kills_and_a_fault_mix_lose_nothing_and_pay_once(make_pack, tmp_path, ray_local, capsys):
    pack = make_pack(tickers=tuple(TICKERS))
    faults = Faults(rate_limit=0.30, server_error=0.05, timeout=0.05, invalid_json=0.05, retry_after="0", stall_s=1.2)
    with FaultServer(faults, seed=11, latency_s=0.02) as server:
        batch = chaos_batch(tmp_path, pack, server)
        root = tmp_path / "results" / "t"
        in_flight_at_kills = []
        for k in range(KILLS):
            first, second = refused_and_running(driver(batch), driver(batch))
            target, deadline = committed(root) + 1, time.monotonic() + 300
            while committed(root) < target and first.poll() is None:
                assert time.monotonic() < deadline, "no progress between kills"
                time.sleep(0.05)
            time.sleep(0.2 * k)  # kill at different depths: right after a commit, then inside the next runs
            if first.poll() is not None:
                break  # it finished first
            n = len(server.arrivals)
            os.kill(first.pid, signal.SIGKILL)
            first.wait()
            in_flight_at_kills.append(n)
        rc, err = run_here(batch, capsys)
        assert rc == 0, err[-2000:]

    runs = pd.read_parquet(root / "runs.parquet")
    assert len(runs) == 4 and runs.run_id.is_unique and (runs.status == "ok").all()
    calls, rounds = pd.read_parquet(root / "calls.parquet"), pd.read_parquet(root / "rounds.parquet")
    for run_id in runs.run_id:
        readout = read_trace(root / "traces" / f"{run_id}.jsonl")
        assert not readout.problems, readout.problems  # the hash chain is whole
        n_calls = sum(1 for e in readout.events if e["event"] == "llm_call")
        assert n_calls >= (calls.run_id == run_id).sum() > 0
        assert (rounds.run_id == run_id).sum() > 0
    assert outcome_counts(server)["rate_limit"] > 0 and outcome_counts(server)["invalid_json"] > 0

    # One replicate, so equal messages are one request (shared by both round counts' runs through the cache): a
    # billed answer (200) for the same messages twice is a call paid twice, and only a kill may cause one.
    paid = collections.Counter(h for outcome, h in server.answered if outcome == "ok")
    twice = sum(n - 1 for n in paid.values() if n > 1)
    assert twice <= MAX_IN_FLIGHT * len(in_flight_at_kills), (twice, len(in_flight_at_kills))


def outcome_counts(server: FaultServer) -> collections.Counter:
    return collections.Counter(server.outcomes)
