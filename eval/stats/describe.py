"""Per-configuration summaries: mean ± SEM (SEM = s/√n, pandas' ddof=1), n finite and n failed."""

from __future__ import annotations

import pandas as pd

from madbench.eval.stats.frame import ok_runs


def summarise(runs: pd.DataFrame, configs: list[str], metrics: list[str]) -> list[dict]:
    out = []
    for config in configs:
        rows = runs[runs["config"] == config]
        failed = int((rows["status"] != "ok").sum()) if "status" in rows.columns else 0
        for metric in metrics:
            x = ok_runs(rows)[metric].astype(float).dropna()
            out.append({"config": config, "metric": metric, "n": int(len(x)), "mean": float(x.mean()) if len(x) else float("nan"),
                        "sem": float(x.sem()) if len(x) > 1 else float("nan"), "failed_runs": failed})
    return out
