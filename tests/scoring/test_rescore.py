"""Re-scoring's pure parts: finding runs in both layouts, grading one run, failures per turn, agreement notes.
The job on Ray, through the CLI, is tested in tests/runner/test_rescore_job.py."""

import asyncio
import json
import shutil

import numpy as np
import pandas as pd
import pytest

from madbench.data.market.pack import load_pack
from madbench.data.scenario import Scenario
from madbench.debate.config_file import load_debate_config
from madbench.gateway import ModelRouting, ModelSpec, ResponseCache
from madbench.results import ScoreDirs, scorelog
from madbench.runner.cli import main
from madbench.runner.pipeline import run_debate
from madbench.runner.wiring import build_gateway
from madbench.scoring import rescore as rs
from madbench.scoring.agreement import pillar_agreement
from madbench.scoring.rescore import find_runs, read_scores, score_run
from madbench.scoring.rubric import load_rubric
from madbench.sim.provider import SimProvider
from tests.debate.test_engine import CONFIGS


@pytest.fixture
def finished(make_pack, tmp_path):
    """Two finished debates in the `madbench debate --out` layout: <out>/<run>/{trace.jsonl,result.json}."""
    pack = load_pack(make_pack(tickers=("AAA", "BBB", "CCC", "DDD")))
    cfg = load_debate_config(CONFIGS / "causal-debate-3.yaml").model_copy(update={"models": ModelRouting.single("rules/auto")})
    for q in ("2021Q3", "2021Q4"):
        s = Scenario(id=f"s-{q}", invest_quarter=q, tickers=["AAA", "BBB", "CCC", "DDD"], constraints={"max_weight": 0.6})
        assert asyncio.run(run_debate(s, pack, cfg, build_gateway(), tmp_path / "results")).status == "ok"
    return tmp_path / "results"


def as_batch(debates, root):
    """The same runs in a batch's layout: traces/<run>.jsonl and runs/<run>.json."""
    for run_dir in debates.iterdir():
        (root / "traces").mkdir(parents=True, exist_ok=True)
        (root / "runs").mkdir(exist_ok=True)
        shutil.copy(run_dir / "trace.jsonl", root / "traces" / f"{run_dir.name}.jsonl")
        shutil.copy(run_dir / "result.json", root / "runs" / f"{run_dir.name}.json")
    return root


def sim_spec(sim):
    return ModelSpec(model="openai/sim-scorer", api_base=sim.url, send_context=True)


def test_find_runs_reads_both_layouts_and_says_why_it_skips(finished, tmp_path):
    debate_runs, skipped = find_runs(finished)
    assert len(debate_runs) == 2 and not skipped and all(len(r.crit_events) == 6 for r in debate_runs)
    batch = as_batch(finished, tmp_path / "batch")
    runs, skipped = find_runs(batch)
    assert sorted(r.run_id for r in runs) == sorted(r.run_id for r in debate_runs) and not skipped
    assert all(r.trace.parent.name == "traces" for r in runs)
    a, b = sorted(r.run_id for r in runs)
    (batch / "runs" / f"{a}.json").unlink()  # not committed: still running, or interrupted
    result = json.loads((batch / "runs" / f"{b}.json").read_text())
    (batch / "runs" / f"{b}.json").write_text(json.dumps({**result, "status": "failed"}))
    with pytest.raises(Exception, match="no finished runs with traces found \\(2 skipped\\)"):
        find_runs(batch)
    (batch / "runs" / f"{b}.json").write_text(json.dumps(result))
    runs, skipped = find_runs(batch)
    assert [r.run_id for r in runs] == [b] and len(skipped) == 1 and "not committed" in skipped[0]


@pytest.mark.slow
def test_score_run_twice_second_from_cache_and_a_failing_turn_fails_the_run(finished, tmp_path):
    runs, _ = find_runs(finished)
    run = runs[0]
    bad_turn = json.dumps(run.crit_events[2].task["argument"], sort_keys=True)
    broken = {"on": False}

    def corrupt(context, content):
        return "{}" if broken["on"] and json.dumps(context.get("argument"), sort_keys=True) == bad_turn else content

    rubric = load_rubric("uniform")
    with SimProvider(answer_filter=corrupt) as sim, ResponseCache(tmp_path / "cache") as cache:
        first = asyncio.run(score_run(run, "sim", sim_spec(sim), rubric, build_gateway(cache=cache)))
        assert not first.failed and len(first.rows) == 6 and sim.stats.requests == 6 and first.totals["cached"] == 0
        again = asyncio.run(score_run(run, "sim-again", sim_spec(sim), rubric, build_gateway(cache=cache)))
        assert sim.stats.requests == 6 and again.totals["cached"] == 6  # no request: all from the cache
        assert [r["rho"] for r in again.rows] == [r["rho"] for r in first.rows] and {r["label"] for r in again.rows} == {"sim-again"}

        broken["on"] = True
        other = runs[1]
        bad_turn = json.dumps(other.crit_events[2].task["argument"], sort_keys=True)
        failed = asyncio.run(score_run(other, "sim", sim_spec(sim), rubric, build_gateway(cache=cache)))
    assert failed.failed and failed.rows == [] and len(failed.errors) == 1
    assert failed.reason.startswith("GatewayFailure: openai/sim-scorer: answer still invalid after 2 feedback retries")
    assert failed.totals["failed"] == 1 and failed.totals["cached"] == 0
    scores = finished / "scores"
    log = scorelog.LabelLog(scores, "sim")
    log.failed(other.run_id, 1, rs.failure_record("sim", other, failed, "openai/sim-scorer", "uniform"))
    log.graded(run.run_id, 1, first.rows)
    log.close()
    [record] = scorelog.failures(ScoreDirs(scores), "sim").values()
    assert record["run_id"] == other.run_id and record["failed_turns"][0]["agent_id"] == other.crit_events[2].agent
    assert len(read_scores(scores, "sim")) == 6  # the failure record holds no rows


def test_agreement_tables_say_why_a_statistic_is_undefined(finished):
    runs, _ = find_runs(finished)
    scores = finished / "scores"
    assert rs.extract_original(runs, scores) == 2 and rs.extract_original(runs, scores) == 0  # never rewritten
    original = read_scores(scores, "original")
    copy = original.assign(label="copy")
    log = scorelog.LabelLog(scores, "copy")
    for run_id, rows in copy.groupby("run_id"):
        log.graded(str(run_id), 1, rows.to_dict("records"))
    log.close()
    pillars, audit = rs.agreement_tables(scores)
    assert set(pillars.label_a) == {"original"} and set(pillars.label_b) == {"copy"}
    assert (scores / "agreement.parquet").exists() and (scores / "audit_agreement.parquet").exists()
    assert set(audit.label) == {"original", "copy"}
    for row in pillars.itertuples():
        assert (np.isnan(row.pearson) or np.isnan(row.icc2_1)) == bool(row.note), row


def test_pillar_agreement_notes():
    keys = {"run_id": ["r"] * 4, "round": [1] * 4, "agent_id": list("abcd")}
    a = pd.DataFrame({**keys, "p": [0.9] * 4, "q": [0.1, 0.4, 0.6, 0.9]})
    b = pd.DataFrame({**keys, "p": [0.9] * 4, "q": [0.2, 0.35, 0.7, 0.8]})
    table = pillar_agreement(a, b, ["p", "q"], names=("original", "llm")).set_index("pillar")
    assert np.isnan(table.loc["p", "pearson"]) and np.isnan(table.loc["p", "icc2_1"])
    assert table.loc["p", "note"] == "both give 0.900 on all 4 turns: no variance, nothing to agree on"
    assert table.loc["q", "note"] == ""
    one = pillar_agreement(a, b.assign(p=[0.1, 0.5, 0.9, 0.3]), ["p"], names=("original", "llm")).iloc[0]
    assert one.note == "original gives 0.900 on all 4 turns: correlations undefined" and not np.isnan(one.icc2_1)
    two = pillar_agreement(a.head(2), b.head(2), ["q"]).iloc[0]
    assert np.isnan(two.pearson) and not np.isnan(two.icc2_1) and two.note == "2 turns in common: correlations need 3"
    none = pillar_agreement(a, b.assign(run_id="other"), ["q"]).iloc[0]
    assert none.n == 0 and none.note == "no turns in common"


def test_rescore_cli_reports_a_missing_directory_in_one_line(tmp_path, capsys):
    assert main(["rescore", str(tmp_path / "nothing-here"), "--scorer", "rules"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert main(["rescore", str(tmp_path), "--scorer", "rules", "--label", "original"]) == 2
    assert main(["rescore", str(tmp_path), "--scorer", "gpt"]) == 2


@pytest.mark.slow
def test_rescore_cli_on_debate_directories_prints_agreement(finished, tmp_path, capsys):
    assert main(["rescore", str(finished), "--scorer", "rules", "--rubric", "role-aware", "--cache-dir", str(tmp_path / "c"),
                 "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "agreement per pillar: original (rules/crit, non-LLM)" in out and "| logical_validity |" in out
    assert "scorer counts vs deterministic audit" in out and "scored 2 (12 turns)" in out
    assert pd.read_parquet(finished / "scores" / "rules_crit.role-aware" / "scores.parquet").run_id.nunique() == 2
