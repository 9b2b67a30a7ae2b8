"""`madbench bench hedging`: the paper's A7 batch (configs/batches/a7.yaml: a7 and a7-control on the 35 paper
scenarios, 70 runs) against the simulated provider with a latency tail, without hedged requests and with them.

Each mode runs the same runs with a fresh cache against a fresh simulator (same seed: the same latency draws in
admission order), through the real runner, limiter, budget and HTTP, at a priced model's name so that every request,
hedges included, is counted. It measures, per mode, the end-to-end wall time against the runs' critical paths (per
run, the sum over its phases of the phase's slowest call, from calls.parquet), the share of calls hedged, what was
spent (budget.json, calls.parquet, and the closed copies within it) against what the simulator billed, and then how
many runs' outcomes (status and weights) differ between the modes, and whether `madbench replay` of the hedged batch
finds any difference.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import time
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np
import pandas as pd

from madbench.bench.reliability import billed_usd
from madbench.data.errors import InputError
from madbench.data.market.pack import load_pack, resolve_evidence_dirs, resolve_pack_dir
from madbench.data.paths import CONFIGS_DIR
from madbench.gateway.hedging import HedgeSettings
from madbench.gateway.models import ModelSpec, RateLimits
from madbench.results import ResultsDir
from madbench.runner.batch import expand, load_batch, resolve_configs, resolve_scenarios
from madbench.runner.budget import read_budget
from madbench.runner.cli.common import add_pack_args, check_out, number
from madbench.runner.execute import run_batch
from madbench.runner.replay import replay
from madbench.runner.store import BatchLayout
from madbench.sim.provider import SimConfig, SimProvider

BATCH_FILE = CONFIGS_DIR / "batches" / "a7.yaml"
#: Priced in litellm's cost map (what bench kills prices the simulator's bill at), answered by the simulator.
PRICED_MODEL = "openai/gpt-4o-mini"
MODES = {"off": False, "on": True}


EXAMPLE = "madbench bench hedging --hedge both --in-flight 70"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--hedge", choices=["off", "on", "both"], default="both",
                        help="run the batch without hedged requests, with them, or both (default)")
    parser.add_argument("--runs", type=number(int, ge=1, le=70), default=70,
                        help="runs of the a7 batch (a7 and a7-control of each scenario in turn; default all 70)")
    parser.add_argument("--rpm", type=number(gt=0), default=500,
                        help="requests/min the simulated provider allows, and the gateway's limit (default 500)")
    parser.add_argument("--latency-median", type=number(ge=0, le=3600), default=8.0,
                        help="median latency in s, lognormal (default 8)")
    parser.add_argument("--latency-sigma", type=number(ge=0, le=10), default=0.5,
                        help="sigma of the lognormal latency (default 0.5)")
    parser.add_argument("--in-flight", type=number(int, ge=1, le=10_000),
                        help="runs in flight (default: the batch file's max_in_flight, 70)")
    defaults = HedgeSettings()
    parser.add_argument("--quantile", type=number(gt=0, lt=1), default=defaults.quantile,
                        help=f"the latency quantile past which a request is hedged (default {defaults.quantile:g})")
    parser.add_argument("--max-share", type=number(ge=0, le=1), default=defaults.max_share,
                        help=f"extra requests at most, as a share of requests (default {defaults.max_share:g})")
    parser.add_argument("--min-samples", type=number(int, ge=1, le=100_000), default=defaults.min_samples,
                        help=f"answers of the model seen before hedging starts (default {defaults.min_samples})")
    parser.add_argument("--min-delay", type=number(ge=0, le=3600), default=defaults.min_delay_s,
                        help=f"never hedge before this many seconds at the provider (default {defaults.min_delay_s:g})")
    parser.add_argument("--straggler-quantile", type=number(gt=0, lt=1),
                        help="past this quantile (or --quantile, if higher) a request may take the cap's reserve "
                             f"(default {defaults.straggler_quantile:g})")
    parser.add_argument("--reserve", type=number(ge=0, le=1), default=defaults.reserve,
                        help=f"the share of the cap kept for stragglers (default {defaults.reserve:g})")
    parser.add_argument("--keep", metavar="DIR", help="keep each mode's results, cache and replay under DIR")
    add_pack_args(parser)


def main(args: argparse.Namespace) -> int:
    if args.keep is not None:
        check_out(args.keep, "--keep")
    if args.straggler_quantile is not None and args.straggler_quantile < args.quantile:
        raise InputError("--straggler-quantile", f"{args.straggler_quantile:g} is below --quantile {args.quantile:g}",
                         "give a straggler quantile at least as high as the quantile")
    settings = HedgeSettings(quantile=args.quantile, max_share=args.max_share, min_samples=args.min_samples,
                             min_delay_s=args.min_delay, reserve=args.reserve,
                             **({} if args.straggler_quantile is None else {"straggler_quantile": args.straggler_quantile}))
    modes = list(MODES) if args.hedge == "both" else [args.hedge]
    out = bench_hedging(modes, args.runs, args.rpm, args.latency_median, args.latency_sigma, args.in_flight, settings,
                        args.pack, args.evidence, args.keep)
    print(json.dumps(out, indent=1))
    return 0


def critical_paths(calls: pd.DataFrame) -> pd.Series:
    """Each run's critical path in seconds: Σ over its steps of the step's slowest call, a step being one phase of one
    round under one label (its calls run concurrently; steps run one after another). The ledger's rows of untraced
    calls (``call_id`` set) are on no run's path."""
    traced = calls[calls["call_id"].isna()] if "call_id" in calls else calls
    steps = traced.groupby(["run_id", "phase", "round", "label"], dropna=False)["latency_s"].max()
    return steps.groupby(level="run_id").sum()


def expected_path_ratio(steps: list[int], runs: int, median_s: float, sigma: float, quantile: float | None,
                        max_share: float, draws: int = 400, seed: int = 0) -> dict[str, float]:
    """What the latency distribution alone allows: the slowest of ``runs`` runs' critical path over the median run's,
    by simulation. Each run makes ``steps`` calls step by step (a step's calls run at once and it ends with the
    slowest), each call's latency lognormal (``median_s``, ``sigma``), nothing queued; with ``quantile``, a call
    slower than that quantile of the distribution takes min(its latency, the quantile + a fresh latency) for as many
    such calls, picked at random, as ``max_share`` of the calls allows. The median and 10th and 90th percentiles
    over ``draws`` batches. A batch ends with its slowest run, so its end to end can be no nearer the median path."""
    rng = np.random.default_rng(seed)
    width = sum(steps)
    cut = None if quantile is None else median_s * math.exp(sigma * NormalDist().inv_cdf(quantile))
    ratios = []
    for _ in range(draws):
        latency = rng.lognormal(math.log(median_s), sigma, size=(runs, width))
        if cut is not None:
            slow = np.flatnonzero(latency.ravel() > cut)
            rng.shuffle(slow)
            picked = slow[: int(max_share * runs * width)]
            flat = latency.ravel()
            flat[picked] = np.minimum(flat[picked], cut + rng.lognormal(math.log(median_s), sigma, size=len(picked)))
        bounds = np.cumsum([0, *steps])
        paths = sum(latency[:, a:b].max(axis=1) for a, b in zip(bounds[:-1], bounds[1:], strict=True))
        ratios.append(float(paths.max() / np.median(paths)))
    q10, q50, q90 = np.quantile(ratios, [0.1, 0.5, 0.9])
    return {"median": round(float(q50), 2), "p10": round(float(q10), 2), "p90": round(float(q90), 2)}


def step_shape(calls: pd.DataFrame) -> list[int]:
    """The calls per step of the batch's typical run (the most common shape: its steps' sizes in order)."""
    traced = calls[calls["call_id"].isna()] if "call_id" in calls else calls
    sizes = traced.groupby(["run_id", "round", "phase", "label"], dropna=False, sort=False).size()
    shapes = sizes.groupby(level="run_id").agg(tuple)
    return list(shapes.value_counts().index[0])


def bench_hedging(modes: list[str], runs: int = 70, rpm: float = 500, median_s: float = 8.0, sigma: float = 0.5,
                  in_flight: int | None = None, settings: HedgeSettings | None = None, pack: str | None = None,
                  evidence: list[str] | None = None, keep: str | None = None) -> dict[str, Any]:
    """Run the a7 batch once per mode in ``modes`` (``off``, ``on``) and compare them (module docstring)."""
    settings = settings or HedgeSettings()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(keep) if keep else Path(tmp)
        measured = {mode: _one(mode, base / mode, runs, rpm, median_s, sigma, in_flight, settings, pack, evidence)
                    for mode in modes}
        out: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "load_1_5_15": [round(x, 2) for x in os.getloadavg()]},
                               "setting": {"runs": runs, "rpm": rpm, "latency_median_s": median_s, "sigma": sigma,
                                           "hedging": settings.model_dump()},
                               **{mode: m["summary"] for mode, m in measured.items()}}
        if "off" in measured and "on" in measured:
            off, on = (measured[m]["runs"].set_index("run_id") for m in ("off", "on"))
            both = off.merge(on, left_index=True, right_index=True, suffixes=("_off", "_on"), how="outer")
            changed = both[(both["status_off"] != both["status_on"]) | (both["weights_off"] != both["weights_on"])]
            out["runs_changed_in_outcome"] = int(len(changed))
        first = next(iter(measured.values()))
        shape = first["steps"]
        out["latency_alone_allows"] = {
            "steps": shape, "slowest_over_median_path_unhedged": expected_path_ratio(shape, runs, median_s, sigma, None, 0.0),
            "slowest_over_median_path_hedged": expected_path_ratio(shape, runs, median_s, sigma, settings.quantile,
                                                                   settings.max_share)}
        if "on" in measured:
            (base / "on" / "replay").mkdir(parents=True, exist_ok=True)
            result = replay(base / "on" / "results", cache_dir=base / "on" / "cache", scratch=base / "on" / "replay")
            out["replay_of_hedged"] = {"identical": result.identical, "differences": len(result.differences),
                                       "provider_requests": result.provider_requests}
    return out


def _one(mode: str, folder: Path, runs: int, rpm: float, median_s: float, sigma: float, in_flight: int | None,
         settings: HedgeSettings, pack: str | None, evidence: list[str] | None) -> dict[str, Any]:
    """One mode's batch: its summary and its runs table."""
    root, cache = folder / "results", folder / "cache"
    load_before = os.getloadavg()
    with SimProvider(SimConfig(latency_median_s=median_s, latency_sigma=sigma, rpm=rpm, seed=1)) as sim:
        model = ModelSpec(model=PRICED_MODEL, api_base=sim.url, send_context=True,
                          limits=RateLimits(rpm=rpm, max_concurrency=10_000))
        spec, batch, pack_dir, evidence_dirs = _batch(runs, model, in_flight, pack, evidence)
        spec = spec.model_copy(update={"hedging": settings.model_copy(update={"enabled": MODES[mode]})})
        t0 = time.monotonic()
        stats = run_batch(spec, batch, BatchLayout(root), pack_dir, evidence_dirs, str(cache), quiet=True)
        wall = time.monotonic() - t0
        arrivals = list(sim.stats.arrivals)
        first = arrivals[0] if arrivals else t0
        time.sleep(1.0)  # the simulator's handlers of closed requests bill them as they notice
        billed, abandoned, requests, refused = billed_usd(sim), sim.stats.abandoned, sim.stats.requests, sim.stats.rejected_429
    results = ResultsDir(root)
    calls, table = results.calls, results.runs
    paths = critical_paths(calls)
    fresh = calls[~calls["cached"].astype(bool) & calls["call_id"].isna()]
    hedged = fresh[fresh["hedged"].fillna(False).astype(bool)]
    e2e_after_start = t0 + wall - first
    return {"runs": table[["run_id", "status", "weights"]], "steps": step_shape(calls), "summary": {
        "load_1_5_15_before": [round(x, 2) for x in load_before],
        "load_1_5_15_after": [round(x, 2) for x in os.getloadavg()],
        "runs": len(table), "ok_runs": int((table["status"] == "ok").sum()), "state": stats.state,
        "wall_s": round(wall, 1), "from_first_request_s": round(e2e_after_start, 1),
        "critical_path_median_s": round(float(paths.median()), 1), "critical_path_max_s": round(float(paths.max()), 1),
        "wall_over_median_path": round(wall / float(paths.median()), 2),
        "after_start_over_median_path": round(e2e_after_start / float(paths.median()), 2),
        "after_start_over_slowest_path": round(e2e_after_start / float(paths.max()), 2),
        "calls": len(fresh), "requests": requests, "refused_429": refused,
        "hedged_calls": len(hedged), "hedged_share": round(len(hedged) / len(fresh), 4) if len(fresh) else 0.0,
        "hedges_won": int(hedged["hedge_won"].fillna(False).astype(bool).sum()),
        "closed_by_client": abandoned,
        "spent_usd": round(read_budget(root, None).spent_usd, 6), "paid_calls_cost_usd": round(float(calls.loc[~calls["cached"].astype(bool), "cost_usd"].sum()), 6),
        "outraced_cost_usd": round(float(calls["outraced_cost_usd"].fillna(0).sum()), 6),
        "simulator_billed_usd": round(billed, 6),
    }}


def _batch(runs: int, model: ModelSpec, in_flight: int | None, pack: str | None, evidence: list[str] | None):
    """The a7 batch on ``model``: its spec, its first ``runs`` runs (the two configs alternating), pack and evidence."""
    spec, base = load_batch(BATCH_FILE)
    spec = spec.model_copy(update={"name": "bench-hedging", "model": model, "max_cost_usd": None, "retries": 0,
                                   "max_in_flight": in_flight or spec.max_in_flight})
    pack_dir = resolve_pack_dir(pack or (str(base / spec.pack) if spec.pack else None))
    evidence_dirs = resolve_evidence_dirs(evidence or [str(base / e) for e in spec.evidence])
    scenarios = resolve_scenarios(spec, base, load_pack(pack_dir, evidence_dirs), str(BATCH_FILE))
    batch = expand(spec, scenarios, resolve_configs(spec, base, str(BATCH_FILE)), str(BATCH_FILE))
    batch.sort(key=lambda r: (r.scenario.id, r.config.name))
    return spec, batch[:runs], str(pack_dir), [str(e) for e in evidence_dirs]
