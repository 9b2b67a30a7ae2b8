"""`madbench bench throughput` (and the measurement behind `madbench bench cache`): the real runner and gateway against the
simulated provider.

The provider (madbench/sim/provider.py) enforces RPM/TPM itself and answers 429 with
Retry-After, with lognormal latency; its answers come from the rule-based analysts,
so every call is valid for its schema. The batch is N runs of a 3-agent, 1-round
debate with CRIT and a judge on the committed market scenarios (13 calls a run, more when an
intervention fires).

Efficiency is the sustained rate (median of the 60-s windows) over the limit; the ramp-down at the end,
when fewer runs remain than the limit can feed, shows in wall time against the ideal instead, along
with the overall rate (all requests over the whole wall time).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import psutil

from madbench.bench.pack_option import add_pack_only
from madbench.data.errors import InputError
from madbench.data.market.pack import load_pack, resolve_pack_dir
from madbench.data.paths import PROJECT_ROOT
from madbench.data.scenario import load_scenarios
from madbench.gateway.models import ModelSpec, RateLimits
from madbench.results import ResultsDir
from madbench.runner.api_records import BatchOutcome
from madbench.runner.batch import BatchSpec, expand, resolve_configs, resolve_scenarios
from madbench.runner.cli.common import number
from madbench.runner.execute import init_ray, run_batch
from madbench.runner.store import BatchLayout
from madbench.sim.provider import SimConfig, SimProvider

ROOT = PROJECT_ROOT
SCENARIOS = ROOT / "configs" / "scenarios" / "market-35.yaml"
DEBATE = ROOT / "configs" / "debate" / "causal-debate-3.yaml"


@contextmanager
def peak_rss_mb():
    """Yield a one-item list holding the peak summed RSS (MB) of this process and every Ray process, sampled at 5 Hz."""
    peak, stop = [0.0], threading.Event()

    def sample():
        while not stop.is_set():
            total = 0
            for p in psutil.process_iter(["cmdline", "memory_info"]):
                cmd = " ".join(p.info["cmdline"] or [])
                if p.pid == os.getpid() or "ray" in cmd or "raylet" in cmd or "gcs_server" in cmd:
                    total += p.info["memory_info"].rss if p.info["memory_info"] else 0
            peak[0] = max(peak[0], total / 2**20)
            stop.wait(0.2)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    try:
        yield peak
    finally:
        stop.set()
        th.join()


def _runs(n: int, model, in_flight: int, pack_dir: str, scenarios: Path):
    per = len(load_scenarios(scenarios))
    spec = BatchSpec(name="bench", scenarios={"file": str(scenarios)}, configs=[str(DEBATE)], grid={"rounds": [1]},
                     model=model, replicates=max(1, math.ceil(n / per)), max_in_flight=in_flight, workers=2, retries=0)
    pack = load_pack(pack_dir)
    runs = expand(spec, resolve_scenarios(spec, ROOT, pack, "bench"), resolve_configs(spec, ROOT, "bench"))
    runs.sort(key=lambda r: (r.sample_index, r.scenario.id))  # spread the N runs over scenarios first
    return spec, runs[:n]


def _model(url: str, rpm: float | None, tpm: float | None, concurrency: int, max_requests: int | None = None):
    return ModelSpec(model="openai/madbench-sim", api_base=url, send_context=True,
                     limits=RateLimits(rpm=rpm, tpm=tpm, max_concurrency=max_requests or max(8, 3 * concurrency)))


def _batch(spec, runs, root: Path, cache: Path, pack_dir: str, **over) -> BatchOutcome:
    return run_batch(spec.model_copy(update=over), runs, BatchLayout(root), pack_dir, [], str(cache), quiet=True)


def _pct(xs, q: float) -> float:
    return float(np.percentile(xs, q * 100)) if len(xs) else float("nan")


def sustained_rpm(admitted: list[float], window_s: float = 60.0) -> float:
    """Median admitted requests over every full 60-s window (1-s steps) of the batch: the rate the provider
    saw in steady state, apart from the ramp-down when fewer runs remain than the limit can feed."""
    t = np.sort(np.asarray(admitted))
    if len(t) < 2 or t[-1] - t[0] < window_s:
        return float("nan")
    starts = np.arange(t[0], t[-1] - window_s, 1.0)
    counts = np.searchsorted(t, starts + window_s) - np.searchsorted(t, starts)
    return float(np.median(counts)) * 60.0 / window_s


def bench_throughput(runs: int = 100, rpm: float = 600, tpm: float | None = None, latency_median: float = 2.0,
                     concurrency: int = 32, serial_runs: int = 3, pack: str | None = None, scenarios: str | None = None) -> dict:

    pack_dir = str(resolve_pack_dir(pack))
    scen = Path(scenarios) if scenarios else SCENARIOS
    init_ray(None)
    out: dict = {"runs": runs, "limit_rpm": rpm, "limit_tpm": tpm, "latency_median_s": latency_median, "concurrency": concurrency}
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        # 1. The batch at the given concurrency, with a fresh provider (its sliding window starts empty).
        with SimProvider(SimConfig(latency_median_s=latency_median, rpm=rpm, tpm=tpm, seed=1)) as sim, peak_rss_mb() as peak:
            spec, batch = _runs(runs, _model(sim.url, rpm, tpm, concurrency), concurrency, pack_dir, scen)
            t = time.perf_counter()
            stats = _batch(spec, batch, tmp / "wide", tmp / "cache-wide", pack_dir)
            wall = time.perf_counter() - t
            requests, rejected = sim.stats.requests, sim.stats.rejected_429
            sustained = sustained_rpm(sim.stats.admitted)
        calls, runs_table = ResultsDir(tmp / "wide").calls, ResultsDir(tmp / "wide").runs
        admitted = requests - rejected
        # 2. One run at a time (the paper's authors' way; agents within a phase still concurrent) on the first
        #    serial_runs runs, extrapolated to all.
        with SimProvider(SimConfig(latency_median_s=latency_median, rpm=rpm, tpm=tpm, seed=2)) as sim:
            spec1, first = _runs(serial_runs, _model(sim.url, rpm, tpm, 1), 1, pack_dir, scen)
            t = time.perf_counter()
            _batch(spec1, first, tmp / "serial", tmp / "cache-serial", pack_dir, workers=1, max_in_flight=1)
            serial_per_run = (time.perf_counter() - t) / serial_runs
        # 3. One request at a time (no concurrency at all, agents included), on the same runs.
        with SimProvider(SimConfig(latency_median_s=latency_median, rpm=rpm, tpm=tpm, seed=3)) as sim:
            spec1, first = _runs(serial_runs, _model(sim.url, rpm, tpm, 1, max_requests=1), 1, pack_dir, scen)
            t = time.perf_counter()
            _batch(spec1, first, tmp / "one-call", tmp / "cache-one-call", pack_dir, workers=1, max_in_flight=1)
            one_call_per_run = (time.perf_counter() - t) / serial_runs
    llm = calls[~calls["cached"]]
    tokens = float((llm["prompt_tokens"].fillna(0) + llm["completion_tokens"].fillna(0)).sum())
    ideal = max(len(llm) / (rpm / 60.0), serial_per_run, tokens / (tpm / 60.0) if tpm else 0.0)
    rpm_achieved = admitted / wall * 60.0
    out |= {
        "ok_runs": int((runs_table["status"] == "ok").sum()), "failed_runs": int((runs_table["status"] != "ok").sum()),
        "calls": int(len(calls)), "http_requests": requests, "answered_429": rejected,
        "efficiency": round(sustained / rpm, 3), "requests_per_min": round(sustained, 1),
        "overall_requests_per_min": round(rpm_achieved, 1), "overall_efficiency": round(rpm_achieved / rpm, 3),
        "share_429": round(rejected / requests, 4) if requests else 0.0,
        "wall_s": round(wall, 1), "ideal_s": round(ideal, 1), "wall_over_ideal": round(wall / ideal, 3),
        "serial_runs_measured": serial_runs, "serial_s_per_run": round(serial_per_run, 2),
        "serial_s_estimated": round(serial_per_run * runs, 1), "speedup_vs_serial": round(serial_per_run * runs / wall, 1),
        "one_request_at_a_time_s_per_run": round(one_call_per_run, 2),
        "speedup_vs_one_request_at_a_time": round(one_call_per_run * runs / wall, 1),
        "overhead_p50_ms": round(_pct(llm["overhead_ms"], 0.5), 2), "overhead_p95_ms": round(_pct(llm["overhead_ms"], 0.95), 2),
        "peak_rss_mb": round(peak[0], 1), "batch_wall_s": round(stats.wall_s, 1),
        "targets": {"efficiency": 0.90, "share_429": 0.02, "speedup_vs_serial": 20, "peak_rss_mb": 4096},
    }
    return out


def bench_cache(runs: int = 100, pack: str | None = None, scenarios: str | None = None) -> dict:
    """Fill a cache with a finished batch (fast provider), then replay it into a new results dir: time and HTTP calls."""

    pack_dir = str(resolve_pack_dir(pack))
    scen = Path(scenarios) if scenarios else SCENARIOS
    init_ray(None)
    with tempfile.TemporaryDirectory() as tmp_dir, SimProvider(SimConfig()) as sim:
        tmp = Path(tmp_dir)
        spec, batch = _runs(runs, _model(sim.url, None, None, 32), 32, pack_dir, scen)
        t = time.perf_counter()
        _batch(spec, batch, tmp / "first", tmp / "cache", pack_dir)
        fill = time.perf_counter() - t
        before = sim.stats.requests
        t = time.perf_counter()
        _batch(spec, batch, tmp / "replay", tmp / "cache", pack_dir)
        replay = time.perf_counter() - t
        http = sim.stats.requests - before
        first = ResultsDir(tmp / "first").runs.set_index("run_id")
        again = ResultsDir(tmp / "replay").runs.set_index("run_id")
        calls = ResultsDir(tmp / "replay").calls
    same = bool((first.loc[again.index, "weights"] == again["weights"]).all())
    return {"runs": runs, "fill_s": round(fill, 1), "fill_http_calls": before, "replay_s": round(replay, 1),
            "replay_http_calls": http, "replay_calls_from_cache": int(calls["cached"].sum()), "replay_calls": int(len(calls)),
            "same_allocations": same, "targets": {"replay_s": 60, "replay_http_calls": 0}}


EXAMPLE = "madbench bench throughput --runs 20 --rpm 600 --json"
#: The headline figures `--json` prints.
HEADLINE = ["efficiency", "requests_per_min", "limit_rpm", "share_429", "wall_s", "ideal_s", "speedup_vs_serial",
            "overhead_p50_ms", "overhead_p95_ms", "peak_rss_mb"]


def positive_runs(runs: int) -> None:
    """--runs of 0 or less is one line naming the option (before the pack or Ray are touched)."""
    if runs < 1:
        raise InputError("--runs", f"must be ≥ 1, got {runs}", "give a positive count")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=number(int, le=1_000_000), default=100,
                        help="runs of a 3-agent, 1-round debate with CRIT and a judge (default 100)")
    parser.add_argument("--rpm", type=number(gt=0), default=600, help="requests/min the simulated provider allows (default 600)")
    parser.add_argument("--tpm", type=number(gt=0), help="tokens/min the simulated provider allows (default: none)")
    parser.add_argument("--latency-median", type=number(ge=0, le=3600), default=2.0,
                        help="median provider latency in s, lognormal (default 2)")
    parser.add_argument("--concurrency", type=number(int, ge=1, le=10_000), default=32, help="runs in flight (default 32)")
    parser.add_argument("--serial-runs", type=number(int, ge=1, le=10_000), default=3,
                        help="runs measured one at a time for the speed-up (default 3)")
    parser.add_argument("--scenarios", default=str(SCENARIOS),
                        help="scenario file the runs are drawn from (default configs/scenarios/market-35.yaml)")
    parser.add_argument("--json", action="store_true", help="print only the headline JSON record")
    add_pack_only(parser)


def main(args: argparse.Namespace) -> int:
    positive_runs(args.runs)
    out = bench_throughput(args.runs, args.rpm, args.tpm, args.latency_median, args.concurrency, args.serial_runs,
                           args.pack, args.scenarios)
    print(json.dumps({k: out[k] for k in HEADLINE} if args.json else out, indent=1))
    return 0
