"""Per-configuration summaries over scenarios (``madbench.eval.stats.units``): the mean and SEM of the scenario
means x̄_s (SEM = s/√n, pandas' ddof = 1, n = scenarios with a finite value), the finished runs behind them, the mean
within-scenario SD of the replicates (NaN without replicates) and the failed runs."""

from __future__ import annotations

import pandas as pd

from madbench.eval.stats.frame import ok_runs
from madbench.eval.stats.units import SCENARIO, within_sd


def summarise(runs: pd.DataFrame, configs: list[str], metrics: list[str]) -> list[dict]:
    out = []
    for config in configs:
        rows = runs[runs["config"] == config]
        failed = int((rows["status"] != "ok").sum()) if "status" in rows.columns else 0
        ok = ok_runs(rows)
        for metric in metrics:
            finite = ok[ok[metric].notna()]
            x = finite[metric].astype(float).groupby(finite[SCENARIO], sort=False).mean()
            out.append({"config": config, "metric": metric, "n": int(len(x)), "n_runs": int(len(finite)),
                        "mean": float(x.mean()) if len(x) else float("nan"),
                        "sem": float(x.sem()) if len(x) > 1 else float("nan"),
                        "within_sd": within_sd(finite[metric], finite[SCENARIO]), "failed_runs": failed})
    return out
