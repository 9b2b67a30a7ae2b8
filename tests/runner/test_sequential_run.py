"""A sequential batch end to end, offline: the a7 pair on eight synthetic scenarios with two looks stops at the first
(its paired t is far below the futility bound of a large planned effect), the runs past that look are `not_needed`,
a second `madbench run` starts none of them, and `--continue` runs them, recorded."""

import json
from pathlib import Path

import pytest
import yaml

from madbench.eval.stats.sequential_record import read_record
from madbench.results import read_manifest
from madbench.runner.cli import main

ROOT = Path(__file__).resolve().parents[2]
BATCH = ROOT / "configs" / "batches" / "a7-sequential.yaml"
QUARTERS = ("2021Q1", "2021Q2", "2021Q3", "2021Q4")


def small_batch(tmp_path: Path, pack: Path) -> Path:
    scen = tmp_path / "scenarios.yaml"
    scen.write_text(yaml.safe_dump({"scenarios": [
        {"id": f"s{q}-{k}", "invest_quarter": q, "tickers": ["AAA", "BBB", "CCC"],
         "constraints": {"max_weight": 0.6, "min_holdings": 2}} for q in QUARTERS for k in range(2)]}))
    spec = yaml.safe_load(BATCH.read_text())
    spec["configs"] = [str((BATCH.parent / c).resolve()) for c in spec["configs"]]
    spec |= {"scenarios": {"file": str(scen)}, "pack": str(pack), "evidence": [], "results_dir": str(tmp_path / "results"),
             "max_in_flight": 4, "workers": 1, "retries": 0}
    # a planned effect of d = 1: two looks at 4 and 8 pairs, the first with a futility bound near t = 1
    spec["sequential"] |= {"looks": 2, "effect": 1.0}
    path = tmp_path / "a7-sequential.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.mark.slow
def test_a_sequential_batch_stops_at_a_look_and_resume_honours_it(make_pack, tmp_path, capsys):
    batch = small_batch(tmp_path, make_pack())
    args = ["run", str(batch), "--model", "rules/auto", "--cache-dir", str(tmp_path / "cache"), "--quiet"]
    assert main(args) == 0
    out = capsys.readouterr().out
    root = tmp_path / "results" / "a7-sequential@rules-auto"
    record = read_record(root)
    assert [x.n for x in record.looks] == [4] and record.decision == "futility"
    statuses = [r.status for r in read_manifest(root).runs]
    assert statuses.count("not_needed") == 8 and statuses.count("ok") == 8, statuses
    assert read_manifest(root).state == "finished" and "8 not_needed" in out and "futility at look 1 of 2" in out
    # the looked-at pairs are the first four of the seeded schedule, complete
    assert record.looks[0].scenarios == record.order[:4]

    assert main(args) == 0  # resumed: the decision stands, nothing is started
    assert "0 submitted" in capsys.readouterr().out
    assert [r.status for r in read_manifest(root).runs].count("not_needed") == 8

    assert main(["stats", str(root), "--json"]) == 0
    seq = json.loads(capsys.readouterr().out)["sequential"]
    assert seq["decision"] == "futility" and seq["adjusted_p"] >= 0.05 and seq["not_needed_runs"] == 8

    assert main([*args, "--continue"]) == 0  # past the decision: the rest runs, and the record says so
    capsys.readouterr()
    record = read_record(root)
    assert [c.after_look for c in record.continued] == [1]
    assert [r.status for r in read_manifest(root).runs].count("ok") == 16
