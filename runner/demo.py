"""`madbench demo`: the main job on the embedded defaults.

Today it runs the stages that exist: for every committed scenario it builds the
point-in-time memo and backtests the baselines (1/N, inverse volatility,
minimum variance, SPY), then writes the memos and a baselines table. Debates,
scoring and the Ray runner plug in here as they land.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd

from eval.atomic import atomic_write, atomic_write_text

DEFAULT_SCENARIOS = Path(__file__).resolve().parents[1] / "configs" / "scenarios" / "market-35.yaml"


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
    table = pd.DataFrame(rows)
    atomic_write(out / "baselines.parquet", lambda p: table.to_parquet(p, index=False))
    summary = table.groupby("config")[["total_return_pct", "excess_return_pct", "sharpe", "max_drawdown_pct"]].agg(["mean", "sem"])
    print(f"pack {pack_dir}; {len(scenarios)} scenarios from {scen_path}")
    print(f"load {t_load - t0:.2f} s, {len(memos)} memos {t_memo - t_load:.2f} s, baselines {t_bt - t_memo:.2f} s")
    print("baselines, mean (sem) over scenarios:")
    for cfg, r in summary.iterrows():
        cells = ", ".join(f"{m} {r[(m, 'mean')]:+.3f} ({r[(m, 'sem')]:.3f})" for m in ("total_return_pct", "excess_return_pct", "sharpe", "max_drawdown_pct"))
        print(f"  {cfg:<17} {cells}")
    eq = table[table.config == "baseline:equal"].set_index("scenario_id")["sharpe"]
    spy = table[table.config == "baseline:spy"].set_index("scenario_id")["sharpe"]
    print(f"1/N beats SPY on Sharpe in {int((eq > spy).sum())} of {int(np.isfinite(eq - spy).sum())} scenarios")
    print(f"wrote {out / 'baselines.parquet'} and {len(memos)} memos in {out / 'memos'}")
    print("note: debates, CRIT scoring and the Ray batch runner are not built yet; this demo runs the data and backtest stages.")
    return 0
