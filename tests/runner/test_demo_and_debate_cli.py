"""The demo and the one-debate CLI on a synthetic pack (the local-model step is covered in tests/gateway)."""

import gzip
import json
import os
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

from madbench.debate.events import Divergence, MemoShown
from madbench.debate.trace import TraceWriter
from madbench.runner import demo
from madbench.runner.cli import main
from tests.conftest import requires_shared

SCENARIOS = {"scenarios": [
    {"id": "a", "invest_quarter": "2021Q3", "tickers": ["AAA", "BBB", "CCC"], "constraints": {"max_weight": 0.6}},
    {"id": "b", "invest_quarter": "2021Q4", "tickers": ["AAA", "CCC"], "constraints": {"max_weight": 1.0}},
]}


@requires_shared
@pytest.mark.slow
def test_demo_resumes_rules_35_runs_quickstart_on_the_simulated_provider_and_exits_0(finished_rules35, tmp_path, capsys,
                                                                                     monkeypatch):
    # The rules-35 batch itself was run once for the session (the README's example, through the same API the demo
    # calls); the demo finds it finished, runs nothing, runs the quickstart batch over HTTP on a simulated provider it
    # starts itself, and summarises and reports both. Without the `local` extra it says what the embedded model costs.
    monkeypatch.setattr(demo, "local_extra_installed", lambda: False)
    committed = {p.name: p.stat().st_mtime_ns for p in (finished_rules35 / "runs").glob("*.json")}
    assert main(["demo", "--out", str(tmp_path), "--cache-dir", str(tmp_path / "cache")]) == 0
    assert {p.name: p.stat().st_mtime_ns for p in (finished_rules35 / "runs").glob("*.json")} == committed
    runs = pd.read_parquet(tmp_path / "rules-35" / "runs.parquet")
    assert len(runs) == 105 and runs.run_id.is_unique and (runs.status == "ok").all()
    assert set(runs.config) == {"single-causal", "mean3-causal", "causal-debate-3"}
    sim_runs = pd.read_parquet(tmp_path / "quickstart@sim" / "runs.parquet")
    assert len(sim_runs) == 2 and (sim_runs.status == "ok").all()
    calls = pd.read_parquet(tmp_path / "quickstart@sim" / "calls.parquet")
    assert set(calls.model_used) == {"openai/madbench-sim"} and not calls.cached.any()
    assert (calls.completion_tokens > 0).all()  # answered over HTTP, not by the rules provider in-process
    summary = (tmp_path / "summary.md").read_text()
    assert "| rules-35 | causal-debate-3 | 35 |" in summary and "| baseline | equal | 35 |" in summary
    assert "| quickstart@sim | demo-local | 2 |" in summary and "107 of 107 runs ok" in summary
    out = capsys.readouterr().out
    assert "beats 1/N" in out and "the `local` extra is not installed" in out and "242 MB" in out
    served = re.search(r"stopped after (\d+) requests", out)
    assert served and int(served.group(1)) == len(calls)
    html = (tmp_path / "rules-35" / "report.html").read_text()
    assert "madbench report: rules-35" in html and "A: single-causal" in html
    assert (tmp_path / "quickstart@sim" / "report.html").is_file()
    # The local Ray this process started keeps its session under $MADBENCH_HOME (the session's own), not /tmp/ray.
    sessions = (Path(os.environ["MADBENCH_HOME"]) / "ray").glob("session_*")
    assert any(p.name.endswith(f"_{os.getpid()}") for p in sessions)


def test_debate_cli_prints_allocation_and_trace_show_renders(make_pack, tmp_path, capsys):
    pack = make_pack()
    scen = tmp_path / "s.yaml"
    scen.write_text(yaml.safe_dump(SCENARIOS))
    args = ["debate", "a", "--scenarios", str(scen), "--config", "configs/debate/causal-debate-3.yaml", "--model", "rules/auto",
            "--pack", str(pack), "--out", str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache")]
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


STORED = Path(__file__).parents[1] / "debate" / "data"


@pytest.mark.parametrize("name, markers", [
    ("a7", ["INTERVENTION_CHECK {", "early_stop {", "PID      r1", "CRIT     r1"]),
    ("causal-debate-3-rca", ["rca {", "judge    r2 judge", "FINAL    (judge)"]),
    ("desks", ["conviction {", "desk     r"]),
    ("tradingagents", ["reflection {", "portfolio_manager"]),
])
def test_trace_show_renders_every_typed_event_of_stored_traces(tmp_path, capsys, name, markers):
    trace = tmp_path / "trace.jsonl"
    trace.write_bytes(gzip.decompress((STORED / f"trace-v0.1-{name}.jsonl.gz").read_bytes()))
    n_events = len(trace.read_text().splitlines())
    assert main(["trace", "show", str(tmp_path)]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert len(shown) == n_events and shown[0].startswith("== run") and shown[-1] == "== end: ok"
    assert not [line for line in shown if line.startswith("!")]
    for marker in markers:
        assert any(marker in line for line in shown), marker
    assert main(["trace", "show", str(trace), "--responses"]) == 0
    assert len(capsys.readouterr().out.splitlines()) > n_events  # each call's response, indented under it


def test_trace_show_reports_an_event_that_matches_no_model(tmp_path, capsys):
    trace = tmp_path / "trace.jsonl"
    with TraceWriter(trace) as w:
        w.write(MemoShown(sha256="ab" * 32, as_of="2021-06-30", n_items=3, ids=[]))
        w.write(Divergence(phase="propose", round=0, jsd=0.25, cash_spread=None))
    lines = trace.read_text().splitlines(keepends=True)
    last = json.loads(lines[-1])
    trace.write_text(lines[0] + json.dumps({**last, "bogus": 1}, sort_keys=True) + "\n")  # the last line: the chain still holds
    assert main(["trace", "show", str(trace)]) == 2
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "   memo abababababab as of 2021-06-30, 3 evidence items"
    assert out[1].startswith("! ") and "event 1 ('divergence') matches no trace event model" in out[1] and "bogus: unknown key" in out[1]
