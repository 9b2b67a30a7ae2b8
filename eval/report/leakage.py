"""The report's leakage section: a batch's recorded leakage audit beside its named − blind difference.

For a batch with ``leakage_audit:`` (``madbench.results.leakage_record``), once for all its scenarios and once per
value of ``post_cutoff`` (after every model's training cutoff first, ``eval.stats.split``): the residue counts and
the macro blocks' k-anonymity of the part's blind memos, the identification probe's hit rates there with their
Clopper-Pearson 95% intervals against chance, and the declared pairs' paired differences (treatment − control, for
the leakage batch named − blind) on the part's scenarios, and with a reference arm the leakage estimate there
(``eval.stats.leakage_did``: the model's named − blind less a memoryless run's). The audit's figures are what the
blinding let through; the difference is what the names and the calendar changed: a difference with a clean audit is
not recall through the blind arm, one beside a probe above chance may be.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from madbench.data.residue import RESIDUE_KINDS
from madbench.eval.stats.analysis import analyse
from madbench.eval.stats.identification import identify_summary
from madbench.eval.stats.leakage_did import leakage_did
from madbench.eval.stats.split import split_by
from madbench.results.leakage_record import AuditRecord, audit_dir, read_audit

PAIR_COLUMNS = ["metric", "a", "b", "n", "diff", "ci_low", "ci_high", "p", "p_adj", "p_unclustered", "n_clusters"]
PROBE_COLUMNS = ["model", "target", "memos", "trials", "hits", "rate", "cp_low", "cp_high", "chance", "above_chance"]
SPLIT = "post_cutoff"


def audit_part(residue: pd.DataFrame, identified: pd.DataFrame, scenarios: set[str]) -> dict:
    """The audit's figures on the memos of ``scenarios``: residue totals, macro k (min, median) and probe rows."""
    res = residue[residue["scenario_id"].isin(scenarios)]
    obs = identified[identified["scenario_id"].isin(scenarios)]
    probe = pd.concat([identify_summary(g).assign(model=m) for m, g in obs.groupby("model", sort=True)],
                      ignore_index=True) if len(obs) else pd.DataFrame(columns=[*PROBE_COLUMNS[:-1], "group"])
    probe = probe[probe["group"] == "all"].assign(above_chance=lambda d: d["cp_low"] > d["chance"])
    # an audit recorded before a residue kind existed has no column for it: the report shows the kinds it counted
    return {"memos": len(res), "residue": {k: int(res[k].sum()) for k in RESIDUE_KINDS if k in res.columns},
            "macro_k_min": int(res["macro_k"].min()) if len(res) else None,
            "macro_k_median": float(res["macro_k"].median()) if len(res) else None,
            "probe": probe[PROBE_COLUMNS].reset_index(drop=True)}


def leakage_parts(root: str | Path, runs: pd.DataFrame, compare: list[str], correction: str,
                  declared: list[tuple[str, str]] | None) -> tuple[AuditRecord | None, list[dict]]:
    """(the recorded audit, one dict per part: label, scenarios, the audit's figures and the paired table); no
    audit recorded: (None, [])."""
    record = read_audit(root)
    if record is None:
        return None, []
    residue = pd.read_parquet(audit_dir(root) / "residue.parquet")
    identified = pd.read_parquet(audit_dir(root) / "identify.parquet")
    runs = runs[runs["config"].isin(compare)]
    parts = [("all scenarios", runs)]
    if SPLIT in runs.columns:
        parts += [(f"{SPLIT} = {label}", part) for label, part in split_by(runs, SPLIT, str(root))]
    # the estimate pairs each scenario's four arms itself and splits them by the model arm's post_cutoff
    estimate = leakage_did(runs, declared)
    out = []
    for label, part in parts:
        scenarios = set(part["scenario_id"])
        present = set(part["config"])  # a reference arm's runs are all post-cutoff: no language model answered them
        analysis = analyse(part, f"{root} ({label})", [c for c in compare if c in present], None, correction, None,
                           declared)
        pairs = analysis.paired_frame()
        out.append({"label": label, "scenarios": len(scenarios), **audit_part(residue, identified, scenarios),
                    "pairs": pairs[[c for c in PAIR_COLUMNS if c in pairs.columns]] if len(pairs) else pairs,
                    "estimate": estimate[estimate["part"] == part_value(label)].drop(columns="part")})
    return record, out


def part_value(label: str) -> str:
    """The ``leakage_did`` part of a section label: "all" for all scenarios, else the post_cutoff value."""
    return "all" if label == "all scenarios" else label.removeprefix(f"{SPLIT} = ")
