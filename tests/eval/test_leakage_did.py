"""The leakage estimate (eval/stats/leakage_did.py): the model's named − blind less the memoryless reference's, per
scenario, tested quarter-clustered and split by the model arm's post_cutoff."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from madbench.eval.stats.leakage_did import leakage_did, markdown, reference_name, write_leakage_did

NAMED, BLIND = "named", "blind"
DECLARED = [(NAMED, BLIND)]


def runs_table(model_gap, reference_gap, post, quarters, seed: int = 0) -> pd.DataFrame:
    """Four arms on len(model_gap) scenarios: blind at a random level, named ``model_gap`` above it; the reference
    arms likewise with ``reference_gap``; the model arm's post_cutoff ``post``, the reference's always True."""
    rng = np.random.default_rng(seed)
    rows = []
    for i, (gm, gr, p, q) in enumerate(zip(model_gap, reference_gap, post, quarters, strict=True)):
        base, ref = rng.normal(), rng.normal()
        for config, value, cut in ((NAMED, base + gm, p), (BLIND, base, p), (reference_name(NAMED), ref + gr, True),
                                   (reference_name(BLIND), ref, True)):
            rows.append({"config": config, "scenario_id": f"s{i}", "invest_quarter": q, "status": "ok",
                         "post_cutoff": cut, "sharpe": value, "total_return_pct": value * 10})
    return pd.DataFrame(rows)


def test_the_estimate_is_the_models_gap_less_the_references_per_scenario_and_per_cutoff_side():
    n = 12
    post = [i % 2 == 0 for i in range(n)]
    quarters = [f"202{i % 6}Q1" for i in range(n)]  # three quarters on each side
    noise = np.random.default_rng(3).normal(0, 0.05, n)
    model_gap = [(0.5 if not p else 0.2) + e for p, e in zip(post, noise, strict=True)]  # recall before the cutoff only
    reference_gap = [0.2] * n  # blinding's cost, the same on both sides
    table = leakage_did(runs_table(model_gap, reference_gap, post, quarters), DECLARED, ["sharpe"]).set_index("part")
    assert list(table.index) == ["all", "True", "False"]
    assert table.loc["all", "n"] == n and table.loc["True", "n"] == table.loc["False", "n"] == n // 2
    expected = {p: np.mean([m - r for m, r, q in zip(model_gap, reference_gap, post, strict=True) if str(q) == p])
                for p in ("True", "False")}
    for part, value in expected.items():
        assert table.loc[part, "did"] == pytest.approx(value)
        assert table.loc[part, "model_diff"] - table.loc[part, "reference_diff"] == pytest.approx(value)
    assert table.loc["True", "did_ci_low"] < 0 < table.loc["True", "did_ci_high"]  # nothing to recall after the cutoff
    assert table.loc["False", "did_ci_low"] > 0  # recall the reference does not explain
    assert table.loc["False", "n_clusters"] == 3  # the quarters of the pre-cutoff scenarios, not the scenarios


def test_the_reference_takes_its_scenarios_side_from_the_model_arm_not_its_own_always_true_cutoff():
    table = leakage_did(runs_table([0.1] * 4, [0.0] * 4, [False] * 4, ["2021Q1", "2021Q2"] * 2), DECLARED, ["sharpe"])
    assert list(table["part"]) == ["all", "False"]


def test_a_scenario_missing_an_arm_is_left_out_and_a_batch_without_reference_has_no_estimate(tmp_path):
    runs = runs_table([0.3] * 5, [0.1] * 5, [True] * 5, ["2025Q1", "2025Q2", "2025Q3", "2025Q4", "2025Q1"])
    runs.loc[(runs["config"] == reference_name(BLIND)) & (runs["scenario_id"] == "s0"), "status"] = "failed"
    table = leakage_did(runs, DECLARED, ["sharpe"])
    assert table.loc[table["part"] == "all", "n"].item() == 4
    model_only = runs[~runs["config"].str.endswith("+reference")]
    assert leakage_did(model_only, DECLARED).empty and markdown(leakage_did(model_only, DECLARED)) == ""
    assert write_leakage_did(model_only, DECLARED, tmp_path / "out") == "" and not (tmp_path / "out").exists()
    text = write_leakage_did(runs, DECLARED, tmp_path / "out")
    assert "| named − blind | sharpe | True | 4 |" in text and (tmp_path / "out" / "leakage_did.csv").is_file()
