"""Equal compute, checked per scenario: for each declared pair with an arm matched to the other's generated tokens
(``self_consistency`` with ``match_generated_of``), each arm's generated tokens, all tokens, calls and dollars per
scenario, and the ratio control ÷ treatment of each (the baseline's spend over the debate's; 1.00 is equal).

The unit is the scenario, as everywhere in ``madbench stats``: replicates are averaged within a scenario first.
Tokens count every answer, a cached one with its original tokens; dollars likewise are what the arm's answers cost
(the sum of calls.parquet's ``cost_usd``, which a cached answer keeps), not what this batch paid: arms that share
draws (mean and majority ask the same requests) each cost what they would alone.
"""

from __future__ import annotations

import pandas as pd

#: A run's spend, by name in this table: its runs.parquet columns.
SPEND = {"generated": ["completion_tokens"], "tokens": ["prompt_tokens", "completion_tokens"], "calls": ["calls"],
         "usd": ["cost_usd"]}
#: runs.parquet's column of a matched run's target (``Outcome.extras``): it marks the matched configs.
TARGET = "x_target_generated_tokens"


def matched_pairs(runs: pd.DataFrame, declared: list[tuple[str, str]] | None) -> list[tuple[str, str]]:
    """The declared (treatment, control) pairs of which an arm was matched on generated tokens."""
    if TARGET not in runs.columns or not declared:
        return []
    matched = set(runs.loc[runs[TARGET].notna(), "config"].astype(str))
    return [(t, c) for t, c in declared if t in matched or c in matched]


def per_scenario_spend(runs: pd.DataFrame, config: str, calls: pd.DataFrame | None = None) -> pd.DataFrame:
    """Scenario id → mean spend per finished run of ``config`` (generated, tokens, calls, usd; usd from ``calls``'
    answers when given, else the run's paid cost)."""
    ok = runs[(runs["config"] == config) & (runs["status"] == "ok")]
    cols = {k: ok[v].fillna(0).sum(axis=1) for k, v in SPEND.items()}
    if calls is not None:
        answered = calls["cost_usd"].fillna(0).groupby(calls["run_id"]).sum()
        cols["usd"] = ok["run_id"].map(answered).fillna(0.0)
    return pd.DataFrame(cols).groupby(ok["scenario_id"].astype(str)).mean()


def compute_match(runs: pd.DataFrame, pairs: list[tuple[str, str]], calls: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per pair and scenario both arms finished: each arm's spend and ``ratio_<spend>`` = control ÷
    treatment (undefined, NaN, where the treatment spent none: rule-based answers count no tokens)."""
    rows = []
    for treatment, control in pairs:
        t, c = per_scenario_spend(runs, treatment, calls), per_scenario_spend(runs, control, calls)
        for scenario in sorted(set(t.index) & set(c.index)):
            row = {"treatment": treatment, "control": control, "scenario_id": scenario}
            for k in SPEND:
                a, b = float(c.at[scenario, k]), float(t.at[scenario, k])
                row |= {f"{k}_control": a, f"{k}_treatment": b, f"ratio_{k}": a / b if b > 0 else float("nan")}
            rows.append(row)
    return pd.DataFrame(rows)


def markdown(table: pd.DataFrame) -> str:
    """The table, and each pair's min and max ratio of generated tokens (the target: 1.00 ± 0.05 per scenario)."""
    if table.empty:
        return ""
    lines = ["Equal compute per scenario (control ÷ treatment; generated = completion tokens, the matched quantity):",
             "| treatment | control | scenario | generated c / t | ratio generated | ratio tokens | ratio calls | "
             "ratio usd |", "|---|---|---|---|---|---|---|---|"]
    for r in table.itertuples(index=False):
        lines.append(f"| {r.treatment} | {r.control} | {r.scenario_id} | {r.generated_control:,.0f} / "
                     f"{r.generated_treatment:,.0f} | {r.ratio_generated:.3f} | {r.ratio_tokens:.3f} | "
                     f"{r.ratio_calls:.3f} | {r.ratio_usd:.3f} |")
    for (t, c), part in table.groupby(["treatment", "control"], sort=False):
        ratio = part["ratio_generated"]
        lines.append(f"{c} ÷ {t}: generated-token ratio min {ratio.min():.3f}, max {ratio.max():.3f} over "
                     f"{ratio.notna().sum()} scenario(s)")
    return "\n".join(lines) + "\n"
