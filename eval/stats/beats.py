"""Binomial test of "beats 1/N": k of n scenarios with Sharpe above the equal-weight baseline,
against H0: P(beat) = 0.5, one-sided (scipy.stats.binomtest)."""

from __future__ import annotations

import numpy as np
import pandas as pd


def beats_baseline(runs: pd.DataFrame, configs: list[str], metric: str = "sharpe", baseline: str = "equal") -> list[dict]:
    from scipy import stats
    column = f"{baseline}_{metric}"
    if column not in runs.columns:
        return []
    rows = []
    for config in configs:
        g = runs[runs["config"] == config]
        x, base = g[metric].astype(float).to_numpy(), g[column].astype(float).to_numpy()
        keep = np.isfinite(x) & np.isfinite(base)
        k, n = int((x[keep] > base[keep]).sum()), int(keep.sum())
        p = float(stats.binomtest(k, n, 0.5, alternative="greater").pvalue) if n else float("nan")
        rows.append({"config": config, "metric": metric, "baseline": baseline, "wins": k, "n": n,
                     "share": k / n if n else float("nan"), "p_one_sided": p})
    return rows
