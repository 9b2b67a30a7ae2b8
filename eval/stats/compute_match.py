"""Equal compute, checked per scenario: for each declared pair with an arm matched to another config's spend
(``self_consistency`` with ``match_generated_of``, on generated tokens, total tokens or cost: its ``match``), each
arm's generated (completion) tokens, total (prompt + completion) tokens, calls and dollars per scenario, and the ratio
control ÷ treatment of each (the baseline's spend over the debate's; 1.00 is equal). All three units are shown
whichever the arm was matched on: matching one leaves the others where they fall.

The unit is the scenario, as everywhere in ``madbench stats``: replicates are averaged within a scenario first.
Tokens count every answer, a cached one with its original tokens; dollars likewise are what the arm's answers cost
(the sum of calls.parquet's ``cost_usd``, which a cached answer keeps), not what this batch paid: arms that share
draws (mean and majority ask the same requests) each cost what they would alone.
"""

from __future__ import annotations

import pandas as pd

from madbench.debate.protocols.self_consistency import MATCH_UNITS

#: A run's spend, by name in this table (generated, total and cost are the units a run is matched on): its
#: runs.parquet columns.
SPEND = {"generated": ["completion_tokens"], "total": ["prompt_tokens", "completion_tokens"], "calls": ["calls"],
         "cost": ["cost_usd"]}
#: runs.parquet's column of a matched run's target in each unit (``Outcome.extras``): they mark the matched configs.
TARGETS = {unit: f"x_{key}" for unit, key in MATCH_UNITS.items()}


def matched_on(runs: pd.DataFrame) -> dict[str, str]:
    """Config → the unit its runs were matched on, for each config with a matched run."""
    out: dict[str, str] = {}
    for unit, column in TARGETS.items():
        if column in runs.columns:
            out |= dict.fromkeys(runs.loc[runs[column].notna(), "config"].astype(str), unit)
    return out


def matched_pairs(runs: pd.DataFrame, declared: list[tuple[str, str]] | None) -> list[tuple[str, str]]:
    """The declared (treatment, control) pairs of which an arm was matched (in any unit)."""
    matched = matched_on(runs)
    return [(t, c) for t, c in declared or [] if t in matched or c in matched]


def per_scenario_spend(runs: pd.DataFrame, config: str, calls: pd.DataFrame | None = None) -> pd.DataFrame:
    """Scenario id → mean spend per finished run of ``config`` (generated, total, calls, cost; cost from ``calls``'
    answers when given, unknown (NaN) for a run with a call of unknown cost, else the run's paid cost)."""
    ok = runs[(runs["config"] == config) & (runs["status"] == "ok")]
    cols = {k: ok[v].fillna(0).sum(axis=1) for k, v in SPEND.items()}
    if calls is not None:
        answered = calls.groupby("run_id")["cost_usd"].agg(lambda c: c.sum() if c.notna().all() else float("nan"))
        cols["cost"] = ok["run_id"].map(answered).where(ok["run_id"].isin(answered.index), 0.0).astype(float)
    # an unknown cost leaves its scenario's mean unknown, not the mean of the known replicates
    return pd.DataFrame(cols).groupby(ok["scenario_id"].astype(str)).agg(lambda x: x.mean(skipna=False))


def compute_match(runs: pd.DataFrame, pairs: list[tuple[str, str]], calls: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per pair and scenario both arms finished: the unit the pair's matched arm was matched on (the
    control's when both were), each arm's spend and ``ratio_<spend>`` = control ÷ treatment (undefined, NaN, where
    the treatment spent none: rule-based answers count no tokens)."""
    rows = []
    units = matched_on(runs)
    for treatment, control in pairs:
        t, c = per_scenario_spend(runs, treatment, calls), per_scenario_spend(runs, control, calls)
        for scenario in sorted(set(t.index) & set(c.index)):
            row = {"treatment": treatment, "control": control, "scenario_id": scenario,
                   "matched_on": units.get(control, units.get(treatment, ""))}
            for k in SPEND:
                a, b = float(c.at[scenario, k]), float(t.at[scenario, k])
                row |= {f"{k}_control": a, f"{k}_treatment": b, f"ratio_{k}": a / b if b > 0 else float("nan")}
            rows.append(row)
    return pd.DataFrame(rows)


def markdown(table: pd.DataFrame) -> str:
    """The table, and each pair's min and max ratio in each unit (the target: 1.00 ± 0.05 per scenario in the unit
    the arm was matched on)."""
    if table.empty:
        return ""
    lines = ["Equal compute per scenario (control ÷ treatment; generated = completion tokens, total = prompt + "
             "completion tokens, cost = the answers' dollars; each arm's every call, a debate's judge and CRIT calls "
             "included):",
             "| treatment | control | matched on | scenario | generated c / t | ratio generated | ratio total | "
             "ratio cost | ratio calls |", "|---|---|---|---|---|---|---|---|---|"]
    for r in table.itertuples(index=False):
        lines.append(f"| {r.treatment} | {r.control} | {r.matched_on} | {r.scenario_id} | {r.generated_control:,.0f} / "
                     f"{r.generated_treatment:,.0f} | {r.ratio_generated:.3f} | {r.ratio_total:.3f} | "
                     f"{r.ratio_cost:.3f} | {r.ratio_calls:.3f} |")
    for (t, c), part in table.groupby(["treatment", "control"], sort=False):
        spans = ", ".join(f"{u} {part[f'ratio_{u}'].min():.3f}–{part[f'ratio_{u}'].max():.3f}" for u in MATCH_UNITS)
        lines.append(f"{c} ÷ {t} (matched on {part['matched_on'].iloc[0]}): ratio min–max {spans} over "
                     f"{part['ratio_generated'].notna().sum()} scenario(s)")
    return "\n".join(lines) + "\n"
