"""The demo and the one-debate CLI on a synthetic pack (the local-model step is covered in tests/runner/gateway)."""

import json

import pandas as pd
import yaml

from runner.cli import main

SCENARIOS = {"scenarios": [
    {"id": "a", "invest_quarter": "2021Q3", "tickers": ["AAA", "BBB", "CCC"], "constraints": {"max_weight": 0.6}},
    {"id": "b", "invest_quarter": "2021Q4", "tickers": ["AAA", "CCC"], "constraints": {"max_weight": 1.0}},
]}


def test_demo_runs_memos_baselines_and_rule_debates(make_pack, tmp_path, capsys):
    pack = make_pack()
    scen = tmp_path / "s.yaml"
    scen.write_text(yaml.safe_dump(SCENARIOS))
    assert main(["demo", "--pack", str(pack), "--scenarios", str(scen), "--out", str(tmp_path / "out"), "--no-local"]) == 0
    table = pd.read_parquet(tmp_path / "out" / "results.parquet")
    assert set(table.config) == {"baseline:equal", "baseline:ivol", "baseline:minvar", "baseline:spy", "causal-debate-3:rules"}
    debates = table[table.config == "causal-debate-3:rules"]
    assert sorted(debates.scenario_id) == ["a", "b"] and debates.rho_bar.notna().all()
    assert len(list((tmp_path / "out" / "debates").glob("*/trace.jsonl"))) == 2
    assert "1/N beats causal-debate-3:rules" in capsys.readouterr().out


def test_debate_cli_prints_allocation_and_trace_show_renders(make_pack, tmp_path, capsys):
    pack = make_pack()
    scen = tmp_path / "s.yaml"
    scen.write_text(yaml.safe_dump(SCENARIOS))
    args = ["debate", "a", "--scenarios", str(scen), "--config", "configs/debate/causal-debate-3.yaml", "--model", "rules/auto",
            "--pack", str(pack), "--out", str(tmp_path / "runs")]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "final allocation (judge)" in out and "rho_bar: 0." in out and "JSD: propose" in out and "metrics: return" in out
    assert main([*args, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    run_dir = tmp_path / "runs" / result["run_id"]
    assert main(["trace", "show", str(run_dir)]) == 0
    shown = capsys.readouterr().out
    for marker in ("== run", "propose", "critique", "revise", "CRIT", "PID", "JSD", "FINAL    (judge)", "BACKTEST", "== end: ok"):
        assert marker in shown, marker
    assert main(["trace", "show", str(tmp_path)]) == 2
