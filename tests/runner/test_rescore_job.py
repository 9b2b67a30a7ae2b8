"""`madbench rescore` on a batch, as the README runs it: Ray actors, the shared cache, per-run failures, dry run."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
import yaml

from madbench.data.market.write import write_pack
from madbench.debate.grading import PILLARS
from madbench.results import ScoreDirs, scorelog
from madbench.runner.cli import main
from madbench.scoring.rescore import find_runs
from madbench.sim.provider import SimConfig, SimProvider
from tests.conftest import synthetic_tables
from tests.runner.test_batch import ROOT, TICKERS

pytestmark = pytest.mark.slow

QUARTERS = ("2021Q2", "2021Q3", "2021Q4")
TURNS = 6  # causal-debate-3: 3 agents x 2 rounds graded


@pytest.fixture(scope="session")  # made once, on the one worker that runs its tests (conftest)
def batch_results(tmp_path_factory):
    """A finished 3-run batch on the rule-based analysts (made once; each test works on a copy)."""
    base = tmp_path_factory.mktemp("batch")
    pack = write_pack(base / "pack", synthetic_tables(tickers=tuple(TICKERS)))
    scen = base / "scenarios.yaml"
    scen.write_text(yaml.safe_dump({"scenarios": [
        {"id": f"s{q}", "invest_quarter": q, "tickers": TICKERS, "constraints": {"max_weight": 0.6}} for q in QUARTERS]}))
    spec = {"name": "t", "scenarios": {"file": str(scen)}, "configs": [str(ROOT / "configs/debate/causal-debate-3.yaml")],
            "model": "rules/auto", "pack": str(pack), "results_dir": str(base / "results"),
            "cache_dir": str(base / "cache"), "workers": 2}  # never the user's cache
    (base / "batch.yaml").write_text(yaml.safe_dump(spec))
    assert main(["run", str(base / "batch.yaml"), "--quiet"]) == 0
    return base / "results" / "t"


@pytest.fixture
def results(batch_results, tmp_path):
    root = tmp_path / "t"
    shutil.copytree(batch_results, root)
    return root


def graded(root, label):
    """The runs the label's table holds rows of."""
    return sorted(set(pd.read_parquet(root / "scores" / label / "scores.parquet").run_id))


def files(root, label):
    """What the label's folder holds once its pass has ended: a few files, none per run."""
    return sorted(p.name for p in (root / "scores" / label).iterdir())


def sim_args(sim, cache, *extra):
    return ["--scorer", "openai/sim-scorer", "--api-base", sim.url, "--send-context", "--cache-dir", str(cache), *extra]


def test_readme_rules_rescore_of_a_batch_writes_one_table_per_label_and_agreement(results, tmp_path, capsys):
    ok = sorted(r["run_id"] for r in json.loads((results / "manifest.json").read_text())["runs"] if r["status"] == "ok")
    assert len(ok) == 3
    argv = ["rescore", str(results), "--scorer", "rules", "--rubric", "role-aware", "--cache-dir", str(tmp_path / "c")]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    label = "rules_crit.role-aware"
    assert graded(results, label) == graded(results, "original") == ok
    assert files(results, label) == ["scorer.json", "scores.parquet"] and files(results, "original") == ["scores.parquet"]
    assert f"rescore {label}: 3/3 runs (scored 3, failed 0" in err  # the progress line
    assert "scored 3 (18 turns), already scored 0, failed 0" in out
    assert "agreement per pillar: original (rules/crit, non-LLM) vs rules_crit.role-aware (rules/crit, non-LLM)" in out
    assert "| logical_validity |" in out and "scorer counts vs deterministic audit" in out
    table = pd.read_parquet(results / "scores" / "agreement.parquet")
    assert set(table.pillar) == {*PILLARS, "rho"}
    assert (table.n == 3 * TURNS).all()
    # The same rule-based scorer grades the pillars identically: where a statistic is undefined, the table says why.
    undefined = table[table.pearson.isna()]
    assert (undefined.note.str.len() > 0).all() and "nan" not in out.lower()
    assert (results / "scores" / "audit_agreement.parquet").exists()
    scores = pd.read_parquet(results / "scores" / label / "scores.parquet")
    assert len(scores) == 3 * TURNS and (scores.rubric == "role-aware").all()
    # A second pass scores nothing and says so.
    assert main([*argv, "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert "scored 0 (0 turns), already scored 3, failed 0" in out and "rescore rules_crit" not in err


def test_llm_scorer_over_http_then_a_cached_pass_makes_no_request(results, tmp_path, capsys):
    cache = tmp_path / "cache"
    with SimProvider() as sim:
        assert main(["rescore", str(results), *sim_args(sim, cache, "--label", "sim", "--quiet")]) == 0
        first = sim.stats.requests
        assert first == 3 * TURNS
        # another label, the same requests: every answer from the shared cache, none at the server
        assert main(["rescore", str(results), *sim_args(sim, cache, "--label", "sim-again")]) == 0
        assert sim.stats.requests == first
    out, err = capsys.readouterr()
    assert "scorer calls: 18 (18 from cache, 0 provider attempts, 0 failed)" in out
    assert "rescore sim-again: 3/3 runs (scored 3, failed 0, in flight 0) | 18 calls, 18 cache hits" in err
    a = pd.read_parquet(results / "scores" / "sim" / "scores.parquet").sort_values(["run_id", "round", "agent_id"])
    b = pd.read_parquet(results / "scores" / "sim-again" / "scores.parquet").sort_values(["run_id", "round", "agent_id"])
    assert len(a) == len(b) == 3 * TURNS and a.is_llm.all() and (a.scorer == "openai/sim-scorer").all()
    assert a.rho.tolist() == b.rho.tolist()
    assert "agreement per pillar: original (rules/crit, non-LLM) vs sim-again (openai/sim-scorer, LLM)" in out


def test_a_run_whose_answers_stay_invalid_is_recorded_and_only_it_is_retried(results, tmp_path, capsys):
    runs, _ = find_runs(results)
    bad = runs[1]
    bad_arguments = {json.dumps(e.task["argument"], sort_keys=True) for e in bad.crit_events}
    broken = {"on": True}

    def corrupt(context, content):
        mine = json.dumps(context.get("argument"), sort_keys=True) in bad_arguments
        return "this is not JSON" if broken["on"] and mine else content

    cache = tmp_path / "cache"
    with SimProvider(answer_filter=corrupt) as sim:
        assert main(["rescore", str(results), *sim_args(sim, cache, "--label", "sim", "--quiet")]) == 1
        out, _ = capsys.readouterr()
        others = sorted(r.run_id for r in runs if r is not bad)
        assert graded(results, "sim") == others
        [line] = (results / "scores" / "sim" / "failed.jsonl").read_text().splitlines()  # one record a line
        record = json.loads(line)
        assert record["run_id"] == bad.run_id and record["attempts"] == 1
        assert record["reason"].startswith("GatewayFailure: openai/sim-scorer: answer still invalid after 2 feedback retries")
        assert len(record["failed_turns"]) == TURNS and record["turns"] == TURNS
        assert "failed runs: 1" in out and f"1 x {record['reason']}" in out and bad.run_id in out
        assert "scored 2 (12 turns), already scored 0, failed 1" in out
        assert sim.stats.requests == 2 * TURNS + 3 * TURNS  # the bad run's turns: an answer and two feedback retries each

        # A re-run retries only the failed run (still broken: exit 1 again, nothing else is sent).
        before = sim.stats.requests
        assert main(["rescore", str(results), *sim_args(sim, cache, "--label", "sim", "--quiet")]) == 1
        assert sim.stats.requests - before == 3 * TURNS and "already scored 2, failed 1" in capsys.readouterr().out
        assert json.loads((results / "scores" / "sim" / "failed.jsonl").read_text())["attempts"] == 2

        broken["on"] = False  # the provider recovers
        before = sim.stats.requests
        assert main(["rescore", str(results), *sim_args(sim, cache, "--label", "sim", "--quiet")]) == 0
        assert sim.stats.requests - before == TURNS
    assert "scored 1 (6 turns), already scored 2, failed 0" in capsys.readouterr().out
    assert graded(results, "sim") == sorted(r.run_id for r in runs)
    assert files(results, "sim") == ["scorer.json", "scores.parquet"]  # no run left failed: no failed.jsonl


def test_dry_run_counts_tasks_and_cached_calls_and_calls_nothing(results, tmp_path, capsys):
    cache = tmp_path / "cache"
    with SimProvider() as sim:
        assert main(["rescore", str(results), *sim_args(sim, cache, "--label", "sim", "--dry-run")]) == 0
        before = json.loads(capsys.readouterr().out)
        assert sim.stats.requests == 0 and not (results / "scores").exists()  # nothing called, nothing written
        assert not cache.exists()  # not even an empty cache created
        assert before["runs_to_score"] == 3 and before["crit_tasks"] == before["expected_calls"] == 3 * TURNS
        assert before["cached_calls"] == 0 and before["estimated_cost_usd"] is None  # openai/sim-scorer has no price
        assert "not in litellm's cost map" in before["cost_note"]
        # scored for real under another label: the same requests are now in the cache
        assert main(["rescore", str(results), *sim_args(sim, cache, "--label", "warm", "--quiet")]) == 0
        capsys.readouterr()
        requests = sim.stats.requests
        assert main(["rescore", str(results), *sim_args(sim, cache, "--label", "sim", "--dry-run")]) == 0
        after = json.loads(capsys.readouterr().out)
        assert sim.stats.requests == requests
    assert after["cached_calls"] == after["expected_calls"] == 3 * TURNS and after["uncached_calls"] == 0
    # a model in litellm's cost map is priced (offline), without any request
    assert main(["rescore", str(results), "--scorer", "openai/gpt-4o-mini", "--rpm", "500", "--cache-dir", str(cache),
                 "--dry-run"]) == 0
    priced = json.loads(capsys.readouterr().out)
    assert priced["uncached_calls"] == 3 * TURNS and priced["estimated_cost_usd"] > 0
    assert priced["expected_prompt_tokens"] > 1000 * 3 * TURNS / 10


def test_a_rescore_killed_with_kill_minus_9_then_run_again_gives_the_uninterrupted_table(results, tmp_path, capsys):
    reference = tmp_path / "reference"
    shutil.copytree(results, reference)
    # Answers take a while (18 turns, one at a time), so the kill lands mid-pass; each pass its own cache, so the killed
    # one really waits for its answers.
    with SimProvider(SimConfig(latency_median_s=0.4, latency_sigma=0.1)) as sim:
        assert main(["rescore", str(reference), *sim_args(sim, tmp_path / "ref-cache", "--label", "sim", "--quiet")]) == 0
        argv = ["rescore", str(results), *sim_args(sim, tmp_path / "cache", "--label", "sim", "--quiet", "--workers", "1",
                                                   "--max-in-flight", "1", "--concurrency", "1")]
        proc = subprocess.Popen([sys.executable, "-m", "madbench.runner.cli", *argv], env={**os.environ, "PYTHONPATH": str(ROOT)},
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        dirs = ScoreDirs(results / "scores")
        deadline = time.monotonic() + 240
        while not scorelog.index(dirs, "sim").graded:  # the first run graded: its line written whole
            assert proc.poll() is None and time.monotonic() < deadline, "the pass ended before it could be killed"
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and its whole local Ray, at once
        proc.wait()
        logged = scorelog.index(dirs, "sim").graded
        assert 1 <= len(logged) < 3 and not dirs.table("sim").exists()  # killed before its compaction
        assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"scored {3 - len(logged)} ({(3 - len(logged)) * TURNS} turns), already scored {len(logged)}, failed 0" in out
    for label in ("original", "sim"):  # every run once, none lost: the very bytes of the uninterrupted pass
        assert (results / "scores" / label / "scores.parquet").read_bytes() == \
            (reference / "scores" / label / "scores.parquet").read_bytes(), label
    assert files(results, "sim") == ["scorer.json", "scores.parquet"]  # the killed pass's log folded in and removed
