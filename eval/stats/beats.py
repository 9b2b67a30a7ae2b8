"""Does a configuration beat the equal-weight (1/N) baseline? A sign test on scenario-level wins.

Per scenario s, the config's mean over its replicates x̄_s against the baseline's b̄_s (``units``): a win when
x̄_s > b̄_s, a loss when x̄_s < b̄_s; ties are dropped, as the sign test does. With k wins in n untied scenarios
(scipy.stats.binomtest, exact, two-sided):

  p_vs_half    H0: P(win) = 1/2, two-sided: does the config beat 1/N more or less often than a coin?
  p_vs_share   H0: P(win) = π₀ (default 1/3, the paper's "debate beats 1/N about a third of the time"), two-sided:
               is the observed share compatible with that claim?
  share CI     the exact (Clopper–Pearson) 95% interval of k/n.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from madbench.eval.stats.units import SCENARIO

#: The share of scenarios the paper reports debate beating 1/N in.
PAPER_SHARE = 1 / 3


def sign_test(wins: int, n: int, share: float = PAPER_SHARE) -> dict:
    """k wins of n against 1/2 and against ``share``, both two-sided, with the exact 95% CI of k/n."""
    from scipy import stats
    nan = float("nan")
    if not n:
        return {"wins": wins, "n": 0, "share": nan, "share_ci_low": nan, "share_ci_high": nan, "p_vs_half": nan,
                "share_h0": share, "p_vs_share": nan}
    half, stated = stats.binomtest(wins, n, 0.5), stats.binomtest(wins, n, share)
    ci = half.proportion_ci(0.95, method="exact")
    return {"wins": wins, "n": n, "share": wins / n, "share_ci_low": float(ci.low), "share_ci_high": float(ci.high),
            "p_vs_half": float(half.pvalue), "share_h0": share, "p_vs_share": float(stated.pvalue)}


def beats_baseline(runs: pd.DataFrame, configs: list[str], metric: str = "sharpe", baseline: str = "equal",
                   share: float = PAPER_SHARE) -> list[dict]:
    """One row per config: its scenario-level wins against ``<baseline>_<metric>`` (``runs``: finished runs)."""
    column = f"{baseline}_{metric}"
    if column not in runs.columns:
        return []
    if not 0 < share < 1:
        raise ValueError(f"the stated share must lie in (0, 1), got {share}")
    rows = []
    for config in configs:
        g = runs[runs["config"] == config]
        g = g[np.isfinite(g[metric].astype(float)) & np.isfinite(g[column].astype(float))]
        means = g.groupby(SCENARIO, sort=False)[[metric, column]].mean()
        x, base = means[metric].to_numpy(float), means[column].to_numpy(float)
        wins, ties = int((x > base).sum()), int((x == base).sum())
        rows.append({"config": config, "metric": metric, "baseline": baseline, "scenarios": len(means), "ties": ties,
                     **sign_test(wins, len(means) - ties, share)})
    return rows
