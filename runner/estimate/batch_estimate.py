"""A batch's estimate: per config and in all, the expected and the worst case, and the batch's wall time."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from madbench.runner.estimate.assumptions import EXPECTED_RATES, Calibration, Rates, worst_rates
from madbench.runner.estimate.counting import estimate_run, run_shapes
from madbench.runner.estimate.pricing import cost
from madbench.runner.estimate.shapes import MemoInfo
from madbench.runner.estimate.tally import RunEstimate, batch_wall_s, merge


def mean(values: Iterable[float]) -> float:
    values = list(values)
    return sum(values) / len(values) if values else 0.0


def estimate_batch(runs: list, memos: dict[str, MemoInfo], max_in_flight: int, calib: Calibration | None = None,
                   rates: Rates | None = None) -> dict[str, Any]:
    """Per config and for the whole batch: runs, calls, tokens, cost (expected and worst), minutes per scenario
    (one run's critical path, mean over the config's runs) and batch wall time (``batch_wall_s``).

    ``runs`` are ``madbench.runner.batch.RunSpec``s; ``memos`` maps scenario id → ``MemoInfo``."""
    rates = rates or (calib.rates if calib else EXPECTED_RATES)
    worst = worst_rates(rates)
    per_config: dict[str, dict[str, Any]] = {}
    total = {"expected": RunEstimate(), "worst": RunEstimate()}
    all_paths: list[float] = []
    cache: dict[tuple[str, str], tuple[RunEstimate, RunEstimate]] = {}
    for r in runs:
        key = (r.config.content_hash(), r.scenario.id)
        if key not in cache:
            memo = memos[r.scenario.id]
            shapes = run_shapes(r.config, r.scenario, memo, calib)
            cache[key] = (estimate_run(r.config, r.scenario, memo, rates, calib, shapes),
                          estimate_run(r.config, r.scenario, memo, worst, calib, shapes))
        exp, wst = cache[key]
        c = per_config.setdefault(r.config.name, {"runs": 0, "expected": RunEstimate(), "worst": RunEstimate(),
                                                  "paths": [], "worst_paths": []})
        c["runs"] += 1
        merge(c["expected"], exp)
        merge(c["worst"], wst)
        c["paths"].append(exp.path_s)
        c["worst_paths"].append(wst.path_s)
        merge(total["expected"], exp)
        merge(total["worst"], wst)
        all_paths.append(exp.path_s)
    out_configs = []
    for name, c in per_config.items():
        wall, bottleneck = batch_wall_s(c["paths"], max_in_flight, c["expected"].limits)
        out_configs.append({"config": name, "runs": c["runs"], **_summary(c["expected"], c["worst"], c["runs"]),
                            "minutes_per_scenario": round(mean(c["paths"]) / 60, 2),
                            "minutes_per_scenario_worst": round(mean(c["worst_paths"]) / 60, 2),
                            "wall_s_alone": round(wall, 1), "bottleneck_alone": bottleneck})
    wall, bottleneck = batch_wall_s(all_paths, max_in_flight, total["expected"].limits)
    return {"configs": out_configs, "total": {"runs": len(runs), **_summary(total["expected"], total["worst"], len(runs))},
            "batch_wall_s": round(wall, 1), "bottleneck": bottleneck,
            "models_without_price": sorted(total["expected"].unpriced | total["worst"].unpriced),
            "by_model": _by_model(total["expected"]), "rates": rates.__dict__, "worst_rates": worst.__dict__}


def _summary(exp: RunEstimate, worst: RunEstimate, runs: int) -> dict[str, Any]:
    ce, cw, cb, cbw = cost(exp), cost(worst), cost(exp, "cost_batch_usd"), cost(worst, "cost_batch_usd")
    return {"calls": round(exp.calls, 1), "calls_worst": round(worst.calls, 1), "attempts": round(exp.attempts, 1),
            "prompt_tokens": round(exp.prompt_tokens), "completion_tokens": round(exp.completion_tokens),
            "prompt_tokens_worst": round(worst.prompt_tokens), "completion_tokens_worst": round(worst.completion_tokens),
            "cost_usd": None if ce is None else round(ce, 4), "cost_usd_worst": None if cw is None else round(cw, 4),
            "cost_batch_usd": None if cb is None else round(cb, 4),
            "cost_batch_usd_worst": None if cbw is None else round(cbw, 4),
            "cost_per_scenario_usd": None if ce is None or not runs else round(ce / runs, 4),
            "cost_known_part_usd": round(sum(line.cost_usd for line in exp.lines.values()), 4),
            "cost_known_part_usd_worst": round(sum(line.cost_usd for line in worst.lines.values()), 4),
            "models_without_price": sorted(exp.unpriced | worst.unpriced)}


def _by_model(e: RunEstimate) -> list[dict[str, Any]]:
    rows = []
    for (model, kind), line in sorted(e.lines.items()):
        rows.append({"model": model, "kind": kind, "calls": round(line.calls, 1),
                     "prompt_tokens": round(line.prompt_tokens), "completion_tokens": round(line.completion_tokens),
                     "cost_usd": None if model in e.unpriced else round(line.cost_usd, 4)})
    return rows
