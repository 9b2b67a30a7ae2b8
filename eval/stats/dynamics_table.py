"""Debate dynamics by configuration: the per-run columns of ``madbench.eval.dynamics`` averaged over finished runs.

Each cell is the mean over the config's runs that have the value (n runs with critiques beside it); a config
without critique rounds (staged protocols, a single agent) shows n/a, never 0. flips_per_run is the mean
number of flips (an agent closing at least half its L1 distance to a critic) per run, and new_evidence_share
the share of those flips whose revision cited evidence the agent had never cited before: n/a where there was no
flip to take a share of (``DYNAMICS_LEGEND``, printed with the table, says which n/a means what).

The oracle gap (best agent − aggregate, pp) grows with the number of agents by selection alone, so it is shown beside
its null (the expected best-of-k gap of k agents drawn from one normal distribution with the run's cross-agent SD) and
the excess over it, gap − null, which is 0 in expectation under that null whatever k: compare configs on the excess
(``madbench.eval.dynamics.oracle_gap``). A config of single-agent runs has no null: its excess is n/a, never 0.
"""

from __future__ import annotations

import pandas as pd

from madbench.eval.stats.frame import ok_runs

#: What an n/a in the table means.
DYNAMICS_LEGEND = ("n/a: no critique round; new_evidence_share n/a: no flips; "
                   "oracle_null_pct, oracle_excess_pct n/a: one agent (no best-of-k null)")
#: runs.parquet column → the table's column.
COLUMNS = {"shift_l1_mean": "shift_l1", "shift_js_mean": "shift_js", "sycophancy_mean": "sycophancy",
           "collapse_mean": "collapse", "debate_turnover": "turnover", "oracle_gap_pct": "oracle_gap_pct"}
#: runs.parquet column → the table's column, for columns a results format added later (n/a in older tables).
LATER_COLUMNS = {"oracle_gap_null_pct": "oracle_null_pct", "oracle_gap_excess_pct": "oracle_excess_pct"}


def dynamics_table(runs: pd.DataFrame, configs: list[str]) -> pd.DataFrame:
    """One row per config; empty when the runs table predates the dynamics columns."""
    if not {*COLUMNS, "flips", "flips_new_evidence"} <= set(runs.columns):
        return pd.DataFrame()
    ok = ok_runs(runs)
    rows = []
    for config in configs:
        g = ok[ok["config"] == config]
        flips, with_new = g["flips"].dropna().astype(float), g["flips_new_evidence"].dropna().astype(float)
        rows.append({"config": config, "runs_with_critiques": int(g["sycophancy_mean"].notna().sum()),
                     **{out: g[column].astype(float).mean() for column, out in COLUMNS.items()},
                     **{out: g[column].astype(float).mean() if column in g.columns else float("nan")
                        for column, out in LATER_COLUMNS.items()},
                     # NaN, not None: a float column prints n/a (None printed as "None" in an object column)
                     "flips_per_run": flips.mean() if len(flips) else float("nan"),
                     "new_evidence_share": with_new.sum() / flips.sum() if flips.sum() > 0 else float("nan")})
    return pd.DataFrame(rows)
