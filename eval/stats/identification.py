"""Hit rates of the leakage audit's identification probe (``madbench leakage audit``), with 95% intervals.

The unit of inference is the memo: the quarter's hit rate is hits of memos, its 95% interval Wilson's and
Clopper-Pearson's; the assets of one memo are recognised together or not at all, so the assets' interval uses the
Korn-Graubard effective sample size over memos (``proportion.clustered_effective_n``). Chance is a uniform guess
among the candidates; ``recognised`` is the share beyond it, (rate - chance) / (1 - chance), with the interval's
ends mapped the same way.
"""

from __future__ import annotations

import pandas as pd

from madbench.eval.stats.proportion import (
    chance_corrected,
    clopper_pearson_interval,
    clustered_effective_n,
    wilson_interval,
)


def _row(group: str, target: str, hits: float, n: float, n_eff: float, chance: float, memos: int) -> dict:
    rate = hits / n if n else float("nan")
    x = rate * n_eff
    w, cp = wilson_interval(x, n_eff), clopper_pearson_interval(x, n_eff)
    return {"group": group, "target": target, "memos": memos, "trials": int(n), "hits": int(hits), "rate": rate,
            "chance": chance, "wilson_low": w[0], "wilson_high": w[1], "cp_low": cp[0], "cp_high": cp[1],
            "recognised": chance_corrected(rate, chance), "recognised_low": chance_corrected(cp[0], chance),
            "recognised_high": chance_corrected(cp[1], chance)}


def identify_summary(obs: pd.DataFrame) -> pd.DataFrame:
    """Hit rates with 95% intervals, for the assets and for the quarter: all memos, then per quarter."""
    rows = []
    groups = [("all", obs)] + [(q, g) for q, g in obs.groupby("quarter", sort=True)]
    for name, g in groups:
        sizes, hits = g["assets"].astype(int).tolist(), g["asset_hits"].astype(int).tolist()
        rows.append(_row(name, "asset", sum(hits), sum(sizes), clustered_effective_n(hits, sizes),
                         float(g["asset_chance"].iloc[0]), len(g)))
        rows.append(_row(name, "quarter", int(g["quarter_hit"].sum()), len(g), len(g), float(g["quarter_chance"].iloc[0]),
                         len(g)))
    return pd.DataFrame(rows)
