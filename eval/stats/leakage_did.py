"""The leakage estimate: named − blind for a model, less named − blind for a memoryless reference on the same memos.

Blinding takes names away, and with them information a model without any memory uses too (the macro levels a blind
memo gives as bands, tie-breaks on tickers): the model's named − blind difference is recall plus that cost. A
reference arm (``leakage_audit.reference`` in a batch, ``runner/leakage_reference.py``) runs the same named and
blind configs on a rule-based model, which remembers nothing, so its named − blind is the cost alone. Per scenario

    did_s = (named_s − blind_s)_model − (named_s − blind_s)_reference

and the estimate is the mean of did_s with the scenario-level paired test of ``paired.paired_test`` (the model's
difference against the reference's, quarter-clustered: CR2 with Satterthwaite df, ``clustered.py``), reported
per ``post_cutoff`` part. A scenario's part is its model arm's ``post_cutoff`` (a reference run answers no language
model, so its own is always True and says nothing): after the cutoff recall is impossible and the estimate should
cover 0; before it, a positive one is recall the blinding took away.

A scenario counts when all four arms have a finite metric (replicates averaged within an arm first).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from madbench.eval.stats.paired import paired_test
from madbench.eval.stats.units import QUARTER, SCENARIO

#: What the reference arm of a config is called: the config's name and this suffix (a grid's ``+key=value`` style).
REFERENCE_SUFFIX = "+reference"
SPLIT = "post_cutoff"
METRICS = ("sharpe", "total_return_pct")
COLUMNS = ["treatment", "control", "metric", "part", "n", "n_clusters", "model_diff", "model_ci_low", "model_ci_high",
           "reference_diff", "reference_ci_low", "reference_ci_high", "did", "did_ci_low", "did_ci_high", "did_p",
           "did_p_unclustered", "note"]


def reference_name(config: str) -> str:
    return config + REFERENCE_SUFFIX


def reference_pairs(runs: pd.DataFrame, declared: list[tuple[str, str]] | None) -> list[tuple[str, str]]:
    """The declared (treatment, control) pairs whose reference arms both ran."""
    present = set(runs["config"].astype(str))
    return [(t, c) for t, c in declared or [] if {t, c, reference_name(t), reference_name(c)} <= present]


def arm_means(runs: pd.DataFrame, config: str, metric: str) -> pd.Series:
    """Scenario → the mean of ``metric`` over ``config``'s finished runs (replicates averaged)."""
    rows = runs[(runs["config"] == config) & runs[metric].notna()]
    if "status" in rows.columns:
        rows = rows[rows["status"] == "ok"]
    return rows.groupby(SCENARIO)[metric].mean()


def scenario_parts(runs: pd.DataFrame, configs: list[str]) -> pd.Series:
    """Scenario → its part: "True"/"False" when the model arm's runs agree on ``post_cutoff``, else "null"."""
    rows = runs[runs["config"].isin(configs)]
    if SPLIT not in rows.columns:
        return pd.Series("null", index=pd.Index(rows[SCENARIO].unique(), name=SCENARIO))

    def part(values: pd.Series) -> str:
        seen = {None if pd.isna(v) else bool(v) for v in values}
        return str(seen.pop()) if len(seen) == 1 and None not in seen else "null"
    return rows.groupby(SCENARIO)[SPLIT].agg(part)


def did_frame(runs: pd.DataFrame, treatment: str, control: str, metric: str) -> pd.DataFrame:
    """One row per scenario with all four arms: model and reference named − blind, their difference, quarter, part."""
    arms = {"mt": treatment, "mc": control, "rt": reference_name(treatment), "rc": reference_name(control)}
    means = pd.DataFrame({k: arm_means(runs, c, metric) for k, c in arms.items()}).dropna()
    out = pd.DataFrame({"model_diff": means["mt"] - means["mc"], "reference_diff": means["rt"] - means["rc"]})
    out["did"] = out["model_diff"] - out["reference_diff"]
    out["part"] = scenario_parts(runs, [treatment, control]).reindex(out.index).fillna("null")
    quarters = runs.drop_duplicates(SCENARIO).set_index(SCENARIO)[QUARTER] if QUARTER in runs.columns else None
    out[QUARTER] = quarters.reindex(out.index) if quarters is not None else None
    return out.reset_index()


def _test(a: np.ndarray, b: np.ndarray, quarters: pd.Series, metric: str) -> dict:
    clusters = None if quarters.isna().any() else quarters.to_numpy()
    return paired_test(a, b, metric=metric, clusters=clusters)


def part_row(frame: pd.DataFrame, treatment: str, control: str, metric: str, part: str) -> dict:
    """The three tests on one part's scenarios: the model's named − blind, the reference's, and their difference."""
    q = frame[QUARTER]
    zero = np.zeros(len(frame))
    model = _test(frame["model_diff"].to_numpy(), zero, q, metric)
    ref = _test(frame["reference_diff"].to_numpy(), zero, q, metric)
    did = _test(frame["model_diff"].to_numpy(), frame["reference_diff"].to_numpy(), q, metric)
    return {"treatment": treatment, "control": control, "metric": metric, "part": part, "n": len(frame),
            "n_clusters": did["n_clusters"], "model_diff": model["diff"], "model_ci_low": model["ci_low"],
            "model_ci_high": model["ci_high"], "reference_diff": ref["diff"], "reference_ci_low": ref["ci_low"],
            "reference_ci_high": ref["ci_high"], "did": did["diff"], "did_ci_low": did["ci_low"],
            "did_ci_high": did["ci_high"], "did_p": did["p"], "did_p_unclustered": did["p_unclustered"],
            "note": did["note"]}


def leakage_did(runs: pd.DataFrame, declared: list[tuple[str, str]] | None,
                metrics: tuple[str, ...] | list[str] = METRICS) -> pd.DataFrame:
    """Per declared pair with a reference arm, per metric: one row for all scenarios, then one per ``post_cutoff``
    part (True first: the part recall cannot explain). Empty when no pair has a reference arm."""
    rows = []
    for treatment, control in reference_pairs(runs, declared):
        for metric in [m for m in metrics if m in runs.columns]:
            frame = did_frame(runs, treatment, control, metric)
            if frame.empty:
                continue
            rows.append(part_row(frame, treatment, control, metric, "all"))
            for part in sorted(frame["part"].unique(), key=lambda p: ("True", "False", "null").index(p)):
                rows.append(part_row(frame[frame["part"] == part], treatment, control, metric, part))
    return pd.DataFrame(rows, columns=COLUMNS)


def markdown(table: pd.DataFrame) -> str:
    """The DiD table as ``madbench stats`` prints it; "" when there is none."""
    if table.empty:
        return ""

    def ci(r, k: str) -> str:
        value = r[k if k == "did" else f"{k}_diff"]
        return f"{value:+.3f} [{r[k + '_ci_low']:+.3f}, {r[k + '_ci_high']:+.3f}]"
    lines = ["## Leakage estimate: difference in differences", "",
             "(named − blind)_model − (named − blind)_reference per scenario, the reference a memoryless rule-based run "
             "of the same memos; 95% intervals; p quarter-clustered (CR2). post_cutoff True: recall is impossible.", "",
             "| pair | metric | post_cutoff | n | quarters | named − blind, model | named − blind, reference | "
             "estimate (DiD) | p |", "|---|---|---|---|---|---|---|---|---|"]
    for r in table.to_dict(orient="records"):
        p = "–" if r["did_p"] != r["did_p"] else f"{r['did_p']:.3f}"
        note = f" ({r['note']})" if r["note"] else ""
        lines.append(f"| {r['treatment']} − {r['control']} | {r['metric']} | {r['part']} | {r['n']} | {r['n_clusters']} | "
                     f"{ci(r, 'model')} | {ci(r, 'reference')} | {ci(r, 'did')} | {p}{note} |")
    return "\n".join(lines) + "\n"


def write_leakage_did(runs: pd.DataFrame, declared: list[tuple[str, str]] | None, out: Path) -> str:
    """`madbench stats`' leakage estimate of a batch with a reference arm: written to OUT/leakage_did.csv, and its
    markdown returned; "" (nothing written) for any other batch."""
    table = leakage_did(runs, declared)
    if table.empty:
        return ""
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "leakage_did.csv", index=False)
    return markdown(table) + f"CSV table: {out / 'leakage_did.csv'}\n"
