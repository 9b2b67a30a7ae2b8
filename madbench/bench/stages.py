"""`madbench bench memo|backtest|gateway|runner`: measured figures for the data, backtest, gateway and runner stages
(each benchmark's options and entry point are its own module: memos.py, backtests.py, gateway_overhead.py,
runner_overhead.py).

Benchmarks measure; they assert nothing. Targets (this project's, on a 2-core
machine): 35 paper memos in under 10 s with the pack loaded once; 10,000
single-quarter backtests over 20-ticker universes in under 5 s; gateway
overhead under 10 ms median per uncached call and under 1 ms per cache hit.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

from madbench.bench.throughput import peak_rss_mb
from madbench.data.market.calendar import quarter_range
from madbench.data.market.pack import load_pack, resolve_pack_dir
from madbench.data.memo import build_memo
from madbench.data.paths import CONFIGS_DIR
from madbench.data.scenario import load_scenarios
from madbench.data.scenario_gen import eligible_tickers
from madbench.eval.backtest import backtest, evaluate, holding_window, simulate
from madbench.gateway import LLMRequest, Message, ModelSpec, RateLimits, ResponseCache
from madbench.runner.batch import expand, load_batch, resolve_configs, resolve_scenarios
from madbench.runner.execute import init_ray, run_batch
from madbench.runner.pipeline import run_debate
from madbench.runner.store import BatchLayout
from madbench.runner.wiring import build_gateway
from madbench.sim.provider import SimProvider


def bench_memo(pack_dir, evidence, scenarios_path, repeats: int = 3) -> dict:

    t0 = time.perf_counter()
    pack = load_pack(pack_dir, evidence)
    load_s = time.perf_counter() - t0
    scenarios = load_scenarios(scenarios_path)
    runs = []
    for _ in range(repeats):
        t = time.perf_counter()
        memos = [build_memo(s, pack) for s in scenarios]
        runs.append(time.perf_counter() - t)
    return {"scenarios": len(scenarios), "pack_load_s": round(load_s, 3), "memos_s_median": round(statistics.median(runs), 3),
            "memos_s_runs": [round(x, 3) for x in runs], "evidence_items": sum(len(m.items) for m in memos),
            "target_s": 10.0}


def bench_backtest(pack_dir, n: int = 10_000, tickers: int = 20, windows: int = 100, seed: int = 0) -> dict:
    """n backtests: ``windows`` random (quarter, 20-ticker universe) draws x n/windows weight vectors each.

    Reports the vectorised path (one matrix product per window) and, on a
    sample, the per-call path that `madbench backtest` takes.
    """

    pack = load_pack(pack_dir)
    rng = np.random.default_rng(seed)
    quarters = quarter_range("2019Q1:2025Q4")
    per = n // windows
    t0 = time.perf_counter()
    done = 0
    setups = []
    for _ in range(windows):
        q = quarters[rng.integers(len(quarters))]
        universe = list(rng.choice(eligible_tickers(pack, q), size=tickers, replace=False))
        setups.append((q, universe, rng.dirichlet(np.ones(tickers), size=per)))
    t_setup = time.perf_counter() - t0
    t0 = time.perf_counter()
    for q, universe, W in setups:
        win = holding_window(pack, q, universe)
        curves, cash0 = simulate(win, W)
        evaluate(win, curves, W, cash0, 100_000.0)
        done += len(W)
    vec_s = time.perf_counter() - t0
    sample = 500
    t0 = time.perf_counter()
    for i in range(sample):
        q, universe, W = setups[i % windows]
        backtest(holding_window(pack, q, universe), dict(zip(universe, W[i % per], strict=True)))
    per_call_s = (time.perf_counter() - t0) / sample
    return {"backtests": done, "tickers": tickers, "windows": windows, "vectorised_s": round(vec_s, 3),
            "per_backtest_us_vectorised": round(vec_s / done * 1e6, 1), "per_call_ms_single": round(per_call_s * 1e3, 3),
            "single_call_path_for_10000_s": round(per_call_s * 10_000, 2), "setup_s": round(t_setup, 3), "target_s": 5.0}


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def bench_gateway(n: int = 200, cache_dir=None) -> dict:
    """Gateway overhead per uncached call to a local stub and per cache hit, against raw httpx in the same run.

    Overhead is the gateway's wall time minus the provider call it wraps (the
    limiter, cache, key and validation work); the end-to-end figures include
    litellm's own request building, which a raw httpx call does not pay.
    """



    os.environ.setdefault("MADBENCH_BENCH_KEY", "bench-placeholder-key")

    async def run(url: str, cache: ResponseCache):
        spec = ModelSpec(model="openai/sim", api_base=url, api_key_env="MADBENCH_BENCH_KEY", limits=RateLimits(max_concurrency=1))
        gw = build_gateway(cache=cache)
        reqs = [LLMRequest(model=spec.model, messages=[Message(role="user", content=f"benchmark prompt {i}")]) for i in range(n)]
        validate = lambda content, s: json.loads(content)  # noqa: E731
        await gw.complete(LLMRequest(model=spec.model, messages=[Message(role="user", content="warm-up")]), spec, validate)
        raw_ms = []
        async with httpx.AsyncClient() as client:
            for r in reqs[: n // 2]:
                t = time.perf_counter()
                resp = await client.post(f"{url}/chat/completions", json={"model": "sim", "messages": [m.model_dump() for m in r.messages]},
                                         headers={"Authorization": "Bearer x"})
                json.loads(resp.json()["choices"][0]["message"]["content"])
                raw_ms.append((time.perf_counter() - t) * 1e3)
        uncached, overhead = [], []
        for r in reqs:
            c = await gw.complete(r, spec, validate)
            uncached.append(c.latency_s * 1e3)
            overhead.append(c.overhead_s * 1e3)
        hits = []
        for r in reqs:
            c = await gw.complete(r, spec, validate)
            assert c.cached
            hits.append(c.latency_s * 1e3)
        return raw_ms, uncached, overhead, hits

    with tempfile.TemporaryDirectory() as tmp, SimProvider() as sim, ResponseCache(Path(cache_dir or tmp)) as cache:
        raw_ms, uncached, overhead, hits = asyncio.run(run(sim.url, cache))
    r = lambda x: round(x, 3)  # noqa: E731
    return {
        "calls": n,
        "raw_httpx_ms": {"p50": r(_pct(raw_ms, 0.5)), "p95": r(_pct(raw_ms, 0.95))},
        "gateway_uncached_ms": {"p50": r(_pct(uncached, 0.5)), "p95": r(_pct(uncached, 0.95))},
        "gateway_overhead_uncached_ms": {"p50": r(_pct(overhead, 0.5)), "p95": r(_pct(overhead, 0.95))},
        "end_to_end_minus_raw_ms_p50": r(_pct(uncached, 0.5) - _pct(raw_ms, 0.5)),
        "cache_hit_ms": {"p50": r(_pct(hits, 0.5)), "p95": r(_pct(hits, 0.95))},
        "targets_ms": {"overhead_uncached_p50": 10.0, "cache_hit_p50": 1.0},
    }


def bench_runner(in_flight: int = 200) -> dict:
    """Runner overhead per run on rules-35 (no LLM latency) and peak memory with many runs in flight.

    Overhead per run = (runner with 1 actor and 1 run in flight − the same runs called directly with
    run_debate in one process) / runs: actor start-up, Ray scheduling, the result store, Parquet parts,
    the manifest and compaction. Starting Ray itself (once per batch) is reported apart.
    Peak memory is the summed RSS of the driver and every Ray process, sampled every 0.2 s.
    """


    path = CONFIGS_DIR / "batches" / "rules-35.yaml"
    spec, base = load_batch(path)
    pack_dir = resolve_pack_dir(None)
    pack = load_pack(pack_dir)
    runs = expand(spec, resolve_scenarios(spec, base, pack, str(path)), resolve_configs(spec, base, str(path)))
    out: dict = {"runs": len(runs)}
    with tempfile.TemporaryDirectory() as tmp:
        gw = build_gateway()
        t = time.perf_counter()
        for r in runs:
            asyncio.run(run_debate(r.scenario, pack, r.config, gw, Path(tmp) / "direct", r.sample_index))
        direct = time.perf_counter() - t
        t = time.perf_counter()
        init_ray(None)
        out["ray_init_s"] = round(time.perf_counter() - t, 2)
        serial = spec.model_copy(update={"workers": 1, "max_in_flight": 1})
        t = time.perf_counter()
        run_batch(serial, runs, BatchLayout(Path(tmp) / "serial"), str(pack_dir), [], str(Path(tmp) / "c1"), quiet=True)
        runner_serial = time.perf_counter() - t
        wide = spec.model_copy(update={"workers": 2, "max_in_flight": in_flight})
        with peak_rss_mb() as peak:
            t = time.perf_counter()
            run_batch(wide, runs, BatchLayout(Path(tmp) / "wide"), str(pack_dir), [], str(Path(tmp) / "c2"), quiet=True)
            runner_wide = time.perf_counter() - t
    out |= {"direct_s": round(direct, 2), "runner_serial_s": round(runner_serial, 2),
            "overhead_per_run_ms": round((runner_serial - direct) / len(runs) * 1e3, 1),
            "runner_in_flight": in_flight, "runner_wide_s": round(runner_wide, 2), "peak_rss_mb": round(peak[0], 1),
            "targets": {"overhead_per_run_ms": 50, "peak_rss_mb": 4096}}
    return out
