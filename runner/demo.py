"""`madbench demo`: the main job on the embedded defaults (offline pack, committed scenarios, local model).

It runs two ready batches through the Ray runner (``madbench.runner.api.run``), exactly as `madbench run` would:

* ``rules-35``: the rule-based analysts (non-LLM) on the 35 committed scenarios — a single agent, the
  3-role mean and the 3-role causal debate — a full-size batch in well under a minute;
* ``quickstart``: the embedded language model on the two smallest scenarios (a few minutes on 2 cores;
  skip with --no-local);

then prints and writes a summary of ``runs.parquet`` and a self-contained ``report.html`` per batch. Both batches resume: a second demo is a no-op.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from madbench.data.atomic import atomic_write_text
from madbench.data.markdown import markdown_table
from madbench.data.paths import PROJECT_ROOT
from madbench.eval.report.page import build_report
from madbench.results import BatchDirs, ResultsDir, read_manifest
from madbench.runner import api
from madbench.runner.api import BatchRun

ROOT = PROJECT_ROOT
BATCHES = ROOT / "configs" / "batches"
METRICS = ["total_return_pct", "excess_return_pct", "sharpe", "max_drawdown_pct", "rho_bar"]


def run_demo(out: str | Path, no_local: bool, pack: str | None, evidence: list[str] | None, cache_dir: str | None,
             show: Callable[[BatchRun], int]) -> int:
    """Run the demo batches with ``api.run`` and ``show`` each outcome (the CLI prints it as `madbench run` does,
    and hands its printer in so that this module does not import the CLI that imports it), then summarise them
    and write their reports."""
    out = Path(out)
    batches = ["rules-35"]
    if no_local:
        print("demo: --no-local given; the embedded model's batch is skipped")
    elif importlib.util.find_spec("llama_cpp") is None:
        print("demo: the `local` extra is not installed (see README), so the embedded model's batch is skipped")
    else:
        batches.append("quickstart")
    codes = []
    for name in batches:
        print(f"\n== batch {name} ({BATCHES / (name + '.yaml')})", flush=True)
        codes.append(show(api.run(BATCHES / f"{name}.yaml", results_dir=str(out), pack=pack, evidence=evidence,
                                  cache_dir=cache_dir, progress=True)))
    summary = summarise([out / b for b in batches])
    atomic_write_text(out / "summary.md", summary)
    reports = [build_report(out / b) for b in batches]
    print("\n" + summary)
    print(f"\nwrote {out / 'summary.md'} and the reports {', '.join(map(str, reports))} (open in a browser; offline)")
    print(f"runs, rounds and calls tables in {', '.join(str(out / b) for b in batches)}; "
          f"statistics: madbench stats {out / batches[0]}")
    return max(codes)  # non-zero when a batch had failed or pending runs (their reasons were printed above)


def summarise(roots: list[Path]) -> str:
    runs = pd.concat([ResultsDir(r).runs for r in roots if BatchDirs(r).table("runs").exists()], ignore_index=True)
    ok = runs[runs.status == "ok"]
    # Count against the manifests: a run that crashed has no row in runs.parquet, but it is not ok.
    planned = sum(len(read_manifest(r).runs) for r in roots if BatchDirs(r).manifest.exists())
    lines = [f"# madbench demo: {len(ok)} of {planned} runs ok", "",
             "Mean (SEM) over scenarios. Rule-based runs are non-LLM; the local model is a 270M base model.", ""]
    rows = []
    for (batch, config), g in ok.groupby(["batch", "config"], sort=False):
        row = {"batch": batch, "config": config, "runs": len(g)}
        for m in METRICS:
            x = g[m].astype(float)
            row[m] = f"{x.mean():+.3f} ({x.sem():.3f})" if x.notna().sum() > 1 else (f"{x.mean():+.3f}" if x.notna().any() else "n/a")
        eq = g["equal_sharpe"].astype(float)
        both = np.isfinite(eq) & np.isfinite(g["sharpe"].astype(float))
        row["beats 1/N (Sharpe)"] = f"{int((g['sharpe'][both] > eq[both]).sum())}/{int(both.sum())}"
        rows.append(row)
    base = ok.drop_duplicates("scenario_id")
    for name in ("equal", "spy"):
        row = {"batch": "baseline", "config": name, "runs": len(base)}
        for m in METRICS:
            col = f"{name}_{m}"
            row[m] = f"{base[col].mean():+.3f} ({base[col].sem():.3f})" if col in base else "n/a"
        row["beats 1/N (Sharpe)"] = ""
        rows.append(row)
    lines.append(markdown_table(pd.DataFrame(rows)))
    return "\n".join(lines)
