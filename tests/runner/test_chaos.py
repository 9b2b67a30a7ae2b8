"""Chaos: corrupted cache entries and torn traces, a full disk, a provider outage and a dead worker node.

Each batch runs through the real runner and gateway against madbench's simulated provider over HTTP
(rule-based answers, so every call is valid and the runs are deterministic); the faults are real
(bytes changed on disk, a tmpfs that fills up, a provider answering 503, a raylet killed with SIGKILL).
"""

import json
import shutil
import sqlite3
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from madbench.debate.trace import decompress_trace, read_trace
from madbench.runner.cli import main
from madbench.sim.provider import SimConfig, SimProvider
from tests.runner.test_batch import ROOT, TICKERS, write_batch

pytestmark = pytest.mark.slow


#: The retries' backoff in these batches (the outage test sizes its outage from it).
RETRY = {"backoff_base_s": 0.2, "backoff_max_s": 2.0}


def sim_batch(tmp_path, pack, sim, retry=RETRY, **over) -> Path:
    model = {"model": "openai/madbench-sim", "api_base": sim.url, "send_context": True,
             "limits": {"max_concurrency": 16}, "retry": retry}
    return write_batch(tmp_path, pack, model=model, configs=[str(ROOT / "configs/debate/causal-debate-3.yaml")],
                       grid={"rounds": [1]}, cache_dir=str(tmp_path / "cache"), **over)


def run_here(batch: Path, capsys, *extra: str) -> tuple[int, str]:
    """`madbench run` in this process, on the session's Ray (a driver of its own and its Ray's start cost a test
    tens of CPU-seconds): its exit status and stderr."""
    capsys.readouterr()
    rc = main(["run", str(batch), "--quiet", *extra])
    return rc, capsys.readouterr().err


def weights_by_run(root: Path) -> dict[str, str]:
    runs = pd.read_parquet(root / "runs.parquet")
    assert runs.run_id.is_unique
    return dict(zip(runs.run_id, runs.weights, strict=True))


@pytest.fixture
def pack(make_pack):
    return make_pack(tickers=tuple(TICKERS))


def test_truncated_cache_entry_and_torn_trace_tail_are_repaired_and_the_run_resumed(pack, tmp_path, ray_local, capsys):
    with SimProvider() as sim:
        # Two runs on one actor: the repair concerns one run's trace and one cache entry; more runs (and a second
        # actor's start in both invocations) only added work.
        batch = sim_batch(tmp_path, pack, sim, replicates=1, quarters=("2021Q3", "2022Q1"), workers=1)
        rc, err = run_here(batch, capsys)
        assert rc == 0, err[-2000:]
        root = tmp_path / "results" / "t"
        reference = weights_by_run(root)
        victim = sorted(reference)[0]
        trace = root / "traces" / f"{victim}.jsonl"
        decompress_trace(trace)  # committed, so compressed: the crash is staged on the plain file of a run in flight
        events = [json.loads(line) for line in trace.read_text().splitlines()]
        key = next(e["key"] for e in events if e["event"] == "llm_call")
        # A crash before the commit point: the result file is gone and the trace's last line is damaged.
        (root / "runs" / f"{victim}.json").unlink()
        data = bytearray(trace.read_bytes())
        last = data.rstrip(b"\n").rfind(b"\n") + 1
        for i in range(last + 5, min(last + 40, len(data) - 1), 3):
            data[i] ^= 0x5A
        trace.write_bytes(bytes(data))
        # One of that run's cache entries is truncated on disk.
        with sqlite3.connect(tmp_path / "cache" / "responses" / "cache.db") as con:
            (value,) = con.execute("SELECT value FROM Cache WHERE key=?", (key,)).fetchone()
            con.execute("UPDATE Cache SET value=? WHERE key=?", (bytes(value)[: len(value) // 2], key))
        before = sim.stats.requests
        rc, err = run_here(batch, capsys)
        assert rc == 0, err[-2000:]
        assert sim.stats.requests - before == 1  # only the corrupted entry is recomputed; the rest replays from cache
    assert weights_by_run(root) == reference  # same allocations, no duplicate rows
    events = read_trace(trace).events  # committed again: compressed
    starts = [e for e in events if e["event"] == "run_start"]
    assert len(starts) == 2 and starts[1]["repaired"]  # the torn tail was reported, then cut off
    attempts = [a for e in events[events.index(starts[1]):] if e["event"] == "llm_call" and e["key"] == key for a in e["attempts"]]
    assert [a["kind"] for a in attempts][:1] == ["cache_corrupt"]
    assert (pd.read_parquet(root / "runs.parquet").status == "ok").all()


def _can_mount_tmpfs() -> bool:
    probe = Path(tempfile.mkdtemp(prefix="mbprobe"))
    ok = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(probe)], capture_output=True).returncode == 0
    if ok:
        subprocess.run(["umount", str(probe)], check=True)
    probe.rmdir()
    return ok


@pytest.mark.skipif(shutil.which("mount") is None or not _can_mount_tmpfs(),
                    reason="disk-full test: needs permission to mount a small tmpfs (root in CI)")
def test_disk_full_gives_a_clear_error_nothing_corrupt_and_resume_after_space_is_freed(pack, tmp_path, ray_local, capsys):
    small = Path(tempfile.mkdtemp(prefix="mbfull"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(small)], check=True)
    try:
        ballast = small / "ballast"
        ballast.write_bytes(b"\0" * (2_700_000))  # leaves a few hundred kB: a few runs fit, then the disk is full
        with SimProvider() as sim:
            # One actor: the full disk is the driver's and the committing actor's to report, a second only adds a start.
            batch = sim_batch(tmp_path, pack, sim, results_dir=str(small / "results"), workers=1)
            rc, err = run_here(batch, capsys)
            assert rc != 0
            assert "No space left on device" in err and "Traceback" not in err.splitlines()[-1]
            root = small / "results" / "t"
            committed = list((root / "runs").glob("*.json"))
            for f in committed:  # every committed result is whole
                json.loads(f.read_text())
            assert not list(root.rglob(".*.tmp"))  # no temporary file left behind
            ballast.unlink()
            rc, err = run_here(batch, capsys)
            assert rc == 0, err[-2000:]
        runs = pd.read_parquet(root / "runs.parquet")
        assert len(runs) == 8 and runs.run_id.is_unique and (runs.status == "ok").all()
    finally:
        subprocess.run(["umount", "-l", str(small)], check=False)


#: A short backoff for the outage test, so that a short outage already outlasts every retry.
OUTAGE_RETRY = {"backoff_base_s": 0.05, "backoff_max_s": 0.5}
#: Four times the retries' whole backoff (0.05 + 0.1 + 0.2 + 0.4 + 0.5 s): without the outage patience every call
#: in flight would give up well inside it.
OUTAGE_S = 5


def test_a_provider_outage_longer_than_every_retry_pauses_runs_and_fails_none(pack, tmp_path, ray_local, capsys):
    with SimProvider(SimConfig(latency_median_s=0.3, seed=3)) as sim:
        batch = sim_batch(tmp_path, pack, sim, retry=OUTAGE_RETRY, max_in_flight=2, replicates=1, workers=1)
        root = tmp_path / "results" / "t"

        def outage_after_first_commit():
            while not list((root / "runs").glob("*.json")) if (root / "runs").exists() else True:
                time.sleep(0.2)
            sim.outage(OUTAGE_S)

        th = threading.Thread(target=outage_after_first_commit, daemon=True)
        th.start()
        t = time.monotonic()
        rc, err = run_here(batch, capsys)
        assert rc == 0, err[-2000:]
        assert time.monotonic() - t > OUTAGE_S and sim.stats.outage_refusals > 0
    runs = pd.read_parquet(root / "runs.parquet")
    assert len(runs) == 4 and (runs.status == "ok").all()
    calls = pd.read_parquet(root / "calls.parquet")
    assert calls.retries.sum() > 0  # the outage was met, retried through, and recorded
