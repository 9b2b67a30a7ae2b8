"""`madbench demo`: the main job on the embedded defaults (offline pack, committed scenarios, local model).

1. For every committed scenario: the point-in-time memo and the baselines (1/N, inverse volatility,
   minimum variance, SPY).
2. The 3-role causal debate with the JS intervention (``configs/debate/causal-debate-3.yaml``) on every
   scenario, with the rule-based analysts (non-LLM; seconds for all 35).
3. One proposal by the embedded language model on the smallest scenario, through the full gateway
   (``configs/debate/demo-local.yaml``), to show the offline LLM path end to end. Skip with --no-local.

The Ray batch runner replaces the loops here when it lands.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import numpy as np
import pandas as pd

from eval.atomic import atomic_write, atomic_write_text

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SCENARIOS = ROOT / "configs" / "scenarios" / "market-35.yaml"
DEBATE_CONFIG = ROOT / "configs" / "debate" / "causal-debate-3.yaml"
LOCAL_CONFIG = ROOT / "configs" / "debate" / "demo-local.yaml"


def run_demo(args) -> int:
    from debate.memo import build_memo
    from debate.scenario import load_scenarios
    from eval.baselines import baseline_metrics
    from eval.market.pack import load_pack, resolve_evidence_dirs, resolve_pack_dir

    t0 = time.perf_counter()
    pack_dir = resolve_pack_dir(args.pack)
    pack = load_pack(pack_dir, resolve_evidence_dirs(args.evidence))
    scen_path = Path(args.scenarios) if args.scenarios else DEFAULT_SCENARIOS
    scenarios = load_scenarios(scen_path)
    t_load = time.perf_counter()
    memos = [build_memo(s, pack, where=f"{scen_path}: scenarios[{i}]") for i, s in enumerate(scenarios)]
    t_memo = time.perf_counter()
    rows = []
    for s in scenarios:
        for name, m in baseline_metrics(pack, s.quarter, s.tickers).items():
            rows.append({"scenario_id": s.id, "invest_quarter": s.invest_quarter, "n_tickers": len(s.tickers),
                         "config": f"baseline:{name}", **m.model_dump(exclude={"null_reasons"})})
    t_bt = time.perf_counter()
    out = Path(args.out)
    for memo in memos:
        atomic_write_text(out / "memos" / f"{memo.scenario_id}.txt", memo.text)
    print(f"pack {pack_dir}; {len(scenarios)} scenarios from {scen_path}")
    print(f"load {t_load - t0:.2f} s, {len(memos)} memos {t_memo - t_load:.2f} s, baselines {t_bt - t_memo:.2f} s")

    rows += _rule_debates(scenarios, pack, out, scen_path)
    table = pd.DataFrame(rows)
    atomic_write(out / "results.parquet", lambda p: table.to_parquet(p, index=False))
    _summary(table)
    print(f"wrote {out / 'results.parquet'}, debate runs in {out / 'debates'} and {len(memos)} memos in {out / 'memos'}")
    if not args.no_local:
        _local_model_turn(scenarios, pack, out, scen_path, args.cache_dir)
    print("next: the Ray batch runner, statistics and the report replace these loops as they land.")
    return 0


def _rule_debates(scenarios, pack, out: Path, scen_path: Path) -> list[dict]:
    from debate.config import load_debate_config
    from debate.run import run_debate
    from runner.gateway import Gateway, ModelRouting
    config = load_debate_config(DEBATE_CONFIG)
    config = config.model_copy(update={"name": "causal-debate-3:rules", "models": ModelRouting.single("rules/auto")})
    gateway = Gateway()
    t = time.perf_counter()
    rows = []
    for s in scenarios:
        r = asyncio.run(run_debate(s, pack, config, gateway, out / "debates", where=f"{scen_path}: {s.id}", with_baselines=False))
        if r.status != "ok":
            print(f"  debate on {s.id} failed: {r.error}")
            continue
        rows.append({"scenario_id": s.id, "invest_quarter": s.invest_quarter, "n_tickers": len(s.tickers),
                     "config": config.name, "run_id": r.run_id, "rho_bar": r.rho_bar,
                     **{k: v for k, v in r.metrics.items() if k != "null_reasons"}})
    print(f"{len(rows)} rule-based causal-debate-3 runs (non-LLM) in {time.perf_counter() - t:.1f} s")
    return rows


def _summary(table: pd.DataFrame) -> None:
    metrics = ["total_return_pct", "excess_return_pct", "sharpe", "max_drawdown_pct"]
    summary = table.groupby("config")[metrics].agg(["mean", "sem"])
    print("mean (sem) over scenarios:")
    for cfg, r in summary.iterrows():
        print(f"  {cfg:<22} " + ", ".join(f"{m} {r[(m, 'mean')]:+.3f} ({r[(m, 'sem')]:.3f})" for m in metrics))
    eq = table[table.config == "baseline:equal"].set_index("scenario_id")["sharpe"]
    for other in ("baseline:spy", "causal-debate-3:rules"):
        o = table[table.config == other].set_index("scenario_id")["sharpe"]
        both = np.isfinite(eq - o)
        print(f"1/N beats {other} on Sharpe in {int((eq > o)[both].sum())} of {int(both.sum())} scenarios")


def _local_model_turn(scenarios, pack, out: Path, scen_path: Path, cache_dir) -> None:
    import importlib.util

    from debate.config import load_debate_config
    from debate.run import run_debate
    from runner.gateway import Gateway, ResponseCache, resolve_cache_dir
    if importlib.util.find_spec("llama_cpp") is None:
        print("local model: the `local` extra is not installed (see README); skipped")
        return
    scenario = min(scenarios, key=lambda s: (len(s.tickers), s.id))
    config = load_debate_config(LOCAL_CONFIG)
    print(f"local model: one proposal on {scenario.id} ({len(scenario.tickers)} tickers) by local/gemma3-270m "
          "(a base model: this proves the offline path, its content is not meaningful) ...", flush=True)
    t = time.perf_counter()
    with ResponseCache(resolve_cache_dir(cache_dir)) as cache:
        r = asyncio.run(run_debate(scenario, pack, config, Gateway(cache=cache), out / "debates", where=f"{scen_path}: {scenario.id}"))
    if r.status != "ok":
        print(f"local model: run {r.run_id} failed: {r.error} (trace: {out / 'debates' / r.run_id / 'trace.jsonl'})")
        return
    held = ", ".join(f"{t_} {w:.2f}" for t_, w in r.weights.items() if w > 0)
    print(f"local model: {held} | return {r.metrics['total_return_pct']:.2f}% | rho_bar {r.rho_bar:.3f} (rules/crit) | "
          f"{r.totals['calls']} calls ({r.totals['cached']} cached), {r.totals['completion_tokens']} tokens, "
          f"{time.perf_counter() - t:.0f} s | trace {out / 'debates' / r.run_id}")
