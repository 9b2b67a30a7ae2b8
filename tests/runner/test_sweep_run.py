"""A sweep batch end to end, offline: the sweep-demo grid (eight arms and a control) on twelve synthetic scenarios
with three looks decides arms at a look, reports the runs each dropped arm did not need, puts the path figure in its
report, and a second `madbench run` starts none of them; a badly declared `sweep:` is one line, exit 2."""

import json
from pathlib import Path

import pytest
import yaml

from madbench.eval.stats.sweep_record import read_record
from madbench.results import read_manifest
from madbench.runner.cli import main
from tests.runner.test_option_checks import exit_code, one_line

ROOT = Path(__file__).resolve().parents[2]
BATCH = ROOT / "configs" / "batches" / "sweep-demo.yaml"
QUARTERS = ("2021Q1", "2021Q2", "2021Q3", "2021Q4")


def small_batch(tmp_path: Path, pack: Path, **sweep) -> Path:
    scen = tmp_path / "scenarios.yaml"
    scen.write_text(yaml.safe_dump({"scenarios": [
        {"id": f"s{q}-{k}", "invest_quarter": q, "tickers": ["AAA", "BBB", "CCC"],
         "constraints": {"max_weight": 0.6, "min_holdings": 2}} for q in QUARTERS for k in range(3)]}))
    spec = yaml.safe_load(BATCH.read_text())
    spec["configs"] = [str((BATCH.parent / c).resolve()) for c in spec["configs"]]
    spec |= {"scenarios": {"file": str(scen)}, "pack": str(pack), "evidence": [], "results_dir": str(tmp_path / "results"),
             "max_in_flight": 8, "workers": 1, "retries": 0}
    # three looks at 4, 8 and 12 scenarios; a large planned effect puts the futility bound near t = 1 at the first
    spec["sweep"] |= {"looks": 3, "effect": 2.0} | sweep
    path = tmp_path / "sweep-demo.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.mark.slow
def test_a_sweep_drops_arms_at_a_look_and_a_rerun_starts_none_of_their_runs(make_pack, tmp_path, capsys):
    batch = small_batch(tmp_path, make_pack())
    args = ["run", str(batch), "--model", "rules/auto", "--cache-dir", str(tmp_path / "cache"), "--quiet"]
    assert main(args) == 0
    out = capsys.readouterr().out
    root = tmp_path / "results" / "sweep-demo@rules-auto"
    record = read_record(root)
    assert len(record.arms) == 8 and record.looks and record.looks[0].scenarios == record.order[:4]
    early = {a: r for a, r in record.results.items() if r.look < 3}
    assert early, "no arm was decided before the last look"
    for arm, r in early.items():  # each arm decided early has its later runs not needed, and none of them ran
        assert len(record.not_needed[arm]) == 12 - r.n
    statuses = [m.status for m in read_manifest(root).runs]
    not_needed = sum(len(v) for v in record.not_needed.values())
    assert statuses.count("not_needed") == not_needed > 0 and statuses.count("ok") + not_needed == 9 * 12
    assert f"{not_needed} not_needed" in out and "adjusted for the arms and looks" in out

    assert main(args) == 0  # resumed: the decisions stand, nothing is started
    assert "0 submitted" in capsys.readouterr().out
    assert [m.status for m in read_manifest(root).runs].count("not_needed") == not_needed

    assert main(["stats", str(root), "--json"]) == 0
    sweep = json.loads(capsys.readouterr().out)["sweep"]
    assert {a["arm"] for a in sweep["arms"]} == set(record.arms)
    assert sweep["not_needed_runs"] == not_needed and all(
        a["adjusted_p"] >= 0.05 for a in sweep["arms"] if a["decision"] != "efficacy")
    assert main(["report", str(root)]) == 0
    html = (root / "report.html").read_text()
    assert "Sweep: every arm against the control" in html and "futility bound (non-binding)" in html


@pytest.mark.parametrize("sweep, problem", [
    ({"control": "no-such-config"}, "sweep.control: 'no-such-config' is no config of the batch"),
    ({"arms": ["a7+rounds=1", "nope"]}, "sweep.arms: nope is no config of the batch"),
    ({"alpha": 0.7}, "sweep.alpha"),
    ({"metric": "sharp"}, "is no numeric column of runs.parquet"),
])
def test_a_badly_declared_sweep_is_one_line(make_pack, tmp_path, capsys, sweep, problem):
    batch = small_batch(tmp_path, make_pack(), **sweep)
    assert exit_code(["run", str(batch), "--model", "rules/auto", "--dry-run"]) == 2
    assert problem in one_line(capsys)
    assert not (tmp_path / "results").exists()


def test_a_sweep_with_a_sequential_design_is_one_line(make_pack, tmp_path, capsys):
    batch = small_batch(tmp_path, make_pack())
    spec = yaml.safe_load(batch.read_text())
    spec["sequential"] = {"pair": "a7+rounds=1", "effect": 0.5}
    batch.write_text(yaml.safe_dump(spec))
    assert exit_code(["run", str(batch), "--dry-run"]) == 2
    assert "not both: keep one of `sweep:` and `sequential:`" in one_line(capsys)


def test_the_dry_run_plans_a_sweeps_runs_under_the_null_and_one_better_arm(make_pack, tmp_path, capsys):
    batch = small_batch(tmp_path, make_pack())
    assert main(["run", str(batch), "--model", "rules/auto", "--dry-run", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)["sweep"]
    assert plan["max_runs"] == 9 * 12 and plan["looks"] == [4, 8, 12] and len(plan["arms"]) == 8
    for cell in ("h0", "h1"):
        assert 0 < plan[cell]["expected_runs"] < plan["max_runs"]
        assert plan[cell]["expected_cost_usd"] == 0  # rule-based runs cost nothing
    assert plan["h1"]["power"] is not None and plan["h0"]["power"] is None
    assert main(["run", str(batch), "--model", "rules/auto", "--dry-run"]) == 0
    assert "under the global null (no arm better)" in capsys.readouterr().out
