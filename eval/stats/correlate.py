"""Correlations of reasoning quality with performance (scipy.stats.pearsonr and spearmanr).

On scenario means (``units``: replicates averaged, one point per config × scenario): pooled over all of them,
within each ablation (batch) and within each condition (config); and on paired deltas, Δρ̄ = ρ̄_A − ρ̄_B against
ΔSharpe = Sharpe_A − Sharpe_B over shared scenarios, which removes the scenario's own difficulty.

A row is computed only when the data can carry it (``madbench.eval.stats.degenerate``: at least 3 pairs, a predictor
with at least 3 distinct values, a response that varies); otherwise its statistics are NaN and its ``note``
says why ("n/a: rho_bar is constant (0.900)"). ``not_computed`` groups those reasons for printing.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from madbench.eval.stats.degenerate import Degenerate, check_predictor
from madbench.eval.stats.paired import paired_arrays
from madbench.eval.stats.units import SCENARIO

NOTE_PREFIX = "n/a: "


def correlate(x: np.ndarray, y: np.ndarray, x_name: str = "x", y_name: str = "y") -> dict:
    """Pearson r and Spearman ρ with their two-sided p, and a ``note``: empty when computed, else why not.

    Not computed (NaN, never 0) with fewer than 3 pairs, a predictor ``x`` with fewer than 3 distinct values
    or a constant ``y`` (``madbench.eval.stats.degenerate``).
    """
    from scipy import stats
    x, y = np.asarray(x, float), np.asarray(y, float)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    nan = float("nan")
    try:
        check_predictor(x, y, x_name, y_name)
    except Degenerate as exc:
        return {"n": int(len(x)), "pearson_r": nan, "pearson_p": nan, "spearman_rho": nan, "spearman_p": nan,
                "note": f"{NOTE_PREFIX}{exc}"}
    pr, sr = stats.pearsonr(x, y), stats.spearmanr(x, y)
    return {"n": int(len(x)), "pearson_r": float(pr.statistic), "pearson_p": float(pr.pvalue),
            "spearman_rho": float(sr.statistic), "spearman_p": float(sr.pvalue), "note": ""}


def quality_correlations(runs: pd.DataFrame, xs: list[str], ys: list[str], groupings: dict[str, str | None]) -> list[dict]:
    """One row per (x, y, grouping, group). ``groupings`` maps a label to a column, or None for pooled."""
    rows = []
    for label, column in groupings.items():
        groups = [("all", runs)] if column is None else [(str(k), g) for k, g in runs.groupby(column, sort=False)]
        for name, g in groups:
            for x in xs:
                for y in ys:
                    if x in g.columns and y in g.columns:
                        rows.append({"x": x, "y": y, "scope": label, "group": name, **correlate(g[x], g[y], x, y)})
    return rows


def agent_rho_correlations(runs: pd.DataFrame, rounds: pd.DataFrame, ys: list[str]) -> list[dict]:
    """Per-role ρ in the final scored round against the run's performance, each averaged over a (config, scenario)'s
    replicates first (``units``: one point per config × scenario, never per replicate)."""
    last = rounds.loc[rounds.groupby("run_id")["round"].transform("max") == rounds["round"]]
    merged = last.merge(runs[["run_id", "config", SCENARIO, *ys]], on="run_id")
    means = merged.groupby(["role", "config", SCENARIO], sort=True)[["rho", *ys]].mean().reset_index()
    return [{"x": f"rho[{role}]", "y": y, "scope": "role", "group": role, **correlate(g["rho"], g[y], f"rho[{role}]", y)}
            for role, g in means.groupby("role", sort=True) for y in ys]


def delta_correlations(runs: pd.DataFrame, pairs: list[tuple[str, str]], x: str = "rho_bar", y: str = "sharpe") -> list[dict]:
    rows = []
    for a, b in pairs:
        xa, xb, _, _ = paired_arrays(runs, a, b, x)
        ya, yb, _, _ = paired_arrays(runs, a, b, y)
        if len(xa) != len(ya):  # pairs differ between the metrics: realign on rows where both are finite
            both = runs[runs[x].notna() & runs[y].notna()]
            xa, xb, _, _ = paired_arrays(both, a, b, x)
            ya, yb, _, _ = paired_arrays(both, a, b, y)
        rows.append({"x": f"Δ{x}", "y": f"Δ{y}", "scope": "paired", "group": f"{a} − {b}", **correlate(xa - xb, ya - yb, f"Δ{x}", f"Δ{y}")})
    return rows


def computed(rows: list[dict]) -> list[dict]:
    """The rows with statistics, without the (then empty) note."""
    return [{k: v for k, v in r.items() if k != "note"} for r in rows if not r.get("note")]


def not_computed(rows: list[dict]) -> list[str]:
    """One line per reason a row was not computed, naming where it applies and against which y, e.g.

    ``rho_bar takes only 2 distinct values (0.883, 0.900): pooled (all); within condition (a, b); against sharpe, total_return_pct [8 rows]``
    """
    grouped: dict[str, dict] = {}
    for r in rows:
        if not r.get("note"):
            continue
        g = grouped.setdefault(r["note"].removeprefix(NOTE_PREFIX), {"scopes": {}, "ys": [], "n": 0})
        groups = g["scopes"].setdefault(r["scope"], [])
        if r["group"] not in groups:
            groups.append(r["group"])
        if r["y"] not in g["ys"]:
            g["ys"].append(r["y"])
        g["n"] += 1
    lines = []
    for reason, g in grouped.items():
        where = "; ".join(f"{scope} ({', '.join(map(str, groups))})" for scope, groups in g["scopes"].items())
        lines.append(f"{reason}: {where}; against {', '.join(g['ys'])} [{g['n']} row{'s' if g['n'] != 1 else ''}]")
    return lines
