"""The report's leakage section (eval/report/leakage.py): the recorded audit, cut like the runs by post_cutoff,
beside the declared pair's named − blind difference on the same scenarios."""

from __future__ import annotations

import pandas as pd
import pytest

from madbench.data.atomic import atomic_write_text
from madbench.eval.report.leakage import leakage_parts
from madbench.results.leakage_record import RECORD, AuditRecord, audit_dir

PRE, POST = ["a1", "a2", "a3"], ["b1", "b2", "b3", "b4"]  # before and after the models' cutoff


def write_audit(root) -> None:
    scenarios = PRE + POST
    residue = pd.DataFrame({"scenario_id": scenarios, "quarter": "2022Q4", "name": [1, 0, 0, 0, 0, 0, 0], "year": 0,
                            "month": 0, "exact_level": 0, "term": 0, "amount": 0, "total": [1, 0, 0, 0, 0, 0, 0],
                            "macro_k": [4, 4, 5, 9, 9, 9, 9], "examples": ""})
    # the model names the quarter of every pre-cutoff memo and of no post-cutoff one
    identify = pd.DataFrame({"scenario_id": scenarios, "quarter": "2022Q4", "model": "openai/m", "assets": 4,
                             "asset_hits": [4, 4, 4, 0, 0, 0, 0], "quarter_hit": [True] * 3 + [False] * 4,
                             "asset_chance": 0.01, "quarter_chance": 0.03, "cached": False})
    audit_dir(root).mkdir(parents=True)
    residue.to_parquet(audit_dir(root) / "residue.parquet")
    identify.to_parquet(audit_dir(root) / "identify.parquet")
    record = AuditRecord(options={"macro": "regime"}, on_leak="warn", decision="warned", memos=7,
                         residue={"name": 1, "year": 0, "month": 0, "exact_level": 0, "term": 0, "amount": 0}, macro_k_min=4, macro_k_median=9,
                         reference="2018Q1-2025Q4 (32 quarters)", probes=[])
    atomic_write_text(audit_dir(root) / RECORD, record.model_dump_json())


def runs() -> pd.DataFrame:
    rows = []
    for s in PRE + POST:
        post = s in POST
        for config, sharpe in (("named", 1.0 if not post else 0.5), ("blind", 0.5)):
            rows.append({"config": config, "scenario_id": s, "replicate": 0, "status": "ok", "post_cutoff": post,
                         "sharpe": sharpe + (0.1 * int(s[1]) if config == "named" else 0.0)})
    return pd.DataFrame(rows)


def test_the_audit_and_the_difference_are_cut_by_post_cutoff_post_first(tmp_path):
    assert leakage_parts(tmp_path, runs(), ["named", "blind"], "holm", [("named", "blind")]) == (None, [])
    write_audit(tmp_path)
    record, parts = leakage_parts(tmp_path, runs(), ["named", "blind"], "holm", [("named", "blind")])
    assert record is not None and record.decision == "warned"
    assert [p["label"] for p in parts] == ["all scenarios", "post_cutoff = True", "post_cutoff = False"]
    everything, post, pre = parts
    assert (everything["scenarios"], post["scenarios"], pre["scenarios"]) == (7, 4, 3)
    assert pre["residue"]["name"] == 1 and post["residue"]["name"] == 0
    assert (pre["macro_k_min"], post["macro_k_min"], everything["macro_k_median"]) == (4, 9, 9)
    quarter = {p["label"]: p["probe"].set_index("target").loc["quarter"] for p in parts}
    assert quarter["post_cutoff = False"]["rate"] == 1.0 and bool(quarter["post_cutoff = False"]["above_chance"])
    assert quarter["post_cutoff = True"]["rate"] == 0.0 and not quarter["post_cutoff = True"]["above_chance"]
    assert quarter["all scenarios"]["hits"] == 3 and quarter["all scenarios"]["memos"] == 7
    sharpe = {p["label"]: p["pairs"].set_index("metric").loc["sharpe"] for p in parts}
    assert sharpe["post_cutoff = False"]["diff"] == pytest.approx(0.5 + 0.1 * 2)  # named − blind, the part's own
    assert sharpe["post_cutoff = True"]["diff"] == pytest.approx(0.1 * 2.5) and sharpe["post_cutoff = True"]["n"] == 4
    assert (sharpe["all scenarios"]["a"], sharpe["all scenarios"]["b"]) == ("named", "blind")
