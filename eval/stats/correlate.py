"""Correlations of reasoning quality with performance (scipy.stats.pearsonr and spearmanr).

Pooled over all runs, within each ablation (batch) and within each condition
(config); and on paired deltas, Δρ̄ = ρ̄_A − ρ̄_B against ΔSharpe = Sharpe_A − Sharpe_B
over shared scenarios, which removes the scenario's own difficulty.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from eval.stats.paired import paired_arrays


def correlate(x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """Pearson r and Spearman ρ with their two-sided p; NaN when n < 3 or either side is constant."""
    from scipy import stats
    x, y = np.asarray(x, float), np.asarray(y, float)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    nan = float("nan")
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return {"n": int(len(x)), "pearson_r": nan, "pearson_p": nan, "spearman_rho": nan, "spearman_p": nan}
    pr, sr = stats.pearsonr(x, y), stats.spearmanr(x, y)
    return {"n": int(len(x)), "pearson_r": float(pr.statistic), "pearson_p": float(pr.pvalue),
            "spearman_rho": float(sr.statistic), "spearman_p": float(sr.pvalue)}


def quality_correlations(runs: pd.DataFrame, xs: list[str], ys: list[str], groupings: dict[str, str | None]) -> list[dict]:
    """One row per (x, y, grouping, group). ``groupings`` maps a label to a column, or None for pooled."""
    rows = []
    for label, column in groupings.items():
        groups = [("all", runs)] if column is None else [(str(k), g) for k, g in runs.groupby(column, sort=False)]
        for name, g in groups:
            for x in xs:
                for y in ys:
                    if x in g.columns and y in g.columns:
                        rows.append({"x": x, "y": y, "scope": label, "group": name, **correlate(g[x], g[y])})
    return rows


def agent_rho_correlations(runs: pd.DataFrame, rounds: pd.DataFrame, ys: list[str]) -> list[dict]:
    """Per-role ρ in the final scored round against the run's performance."""
    last = rounds.loc[rounds.groupby("run_id")["round"].transform("max") == rounds["round"]]
    merged = last.merge(runs[["run_id", *ys]], on="run_id")
    return [{"x": f"rho[{role}]", "y": y, "scope": "role", "group": role, **correlate(g["rho"], g[y])}
            for role, g in merged.groupby("role", sort=True) for y in ys]


def delta_correlations(runs: pd.DataFrame, pairs: list[tuple[str, str]], x: str = "rho_bar", y: str = "sharpe") -> list[dict]:
    rows = []
    for a, b in pairs:
        xa, xb, _, _ = paired_arrays(runs, a, b, x)
        ya, yb, _, _ = paired_arrays(runs, a, b, y)
        if len(xa) != len(ya):  # pairs differ between the metrics: realign on rows where both are finite
            both = runs[runs[x].notna() & runs[y].notna()]
            xa, xb, _, _ = paired_arrays(both, a, b, x)
            ya, yb, _, _ = paired_arrays(both, a, b, y)
        rows.append({"x": f"Δ{x}", "y": f"Δ{y}", "scope": "paired", "group": f"{a} − {b}", **correlate(xa - xb, ya - yb)})
    return rows
