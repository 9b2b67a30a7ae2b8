"""Re-scoring finished runs: a second scorer label beside the original, from the cache the second time."""

import asyncio

import pytest

from debate.config_file import load_debate_config
from madbench_data.market.pack import load_pack
from madbench_data.scenario import Scenario
from madbench_gateway import Gateway, ModelRouting, ModelSpec, ResponseCache
from runner.cli import main
from runner.pipeline import run_debate
from runner.sim.provider import SimProvider
from scoring.rescore import extract_original, find_runs, read_scores, rescore_runs
from scoring.rubric import load_rubric
from tests.debate.test_engine import CONFIGS


@pytest.fixture
def finished(make_pack, tmp_path):
    pack = load_pack(make_pack(tickers=("AAA", "BBB", "CCC", "DDD")))
    cfg = load_debate_config(CONFIGS / "causal-debate-3.yaml").model_copy(update={"models": ModelRouting.single("rules/auto")})
    for q in ("2021Q3", "2021Q4"):
        s = Scenario(id=f"s-{q}", invest_quarter=q, tickers=["AAA", "BBB", "CCC", "DDD"], constraints={"max_weight": 0.6})
        assert asyncio.run(run_debate(s, pack, cfg, Gateway(), tmp_path / "results")).status == "ok"
    return tmp_path / "results"


def test_rescore_twice_second_pass_from_cache_and_labels_side_by_side(finished, tmp_path, monkeypatch):
    monkeypatch.setenv("SIM_KEY", "sim-placeholder-key")
    runs, skipped = find_runs(finished)
    assert len(runs) == 2 and not skipped and all(len(r.crit_events) == 6 for r in runs)
    scores = finished / "scores"
    assert extract_original(runs, scores) == 2
    with SimProvider() as sim, ResponseCache(tmp_path / "cache") as cache:
        spec = ModelSpec(model="openai/sim-scorer", api_base=sim.url, api_key_env="SIM_KEY", send_context=True)
        first = asyncio.run(rescore_runs(runs, scores, "sim", spec, load_rubric("uniform"), Gateway(cache=cache)))
        calls = sim.stats.requests
        gw = Gateway(cache=cache)
        second = asyncio.run(rescore_runs(runs, scores, "sim-again", spec, load_rubric("uniform"), gw))
        assert sim.stats.requests == calls == 12  # the second pass made no HTTP call
    assert first["turns"] == second["turns"] == 12 and gw.totals.cached == 12
    original, a, b = (read_scores(scores, lbl) for lbl in ("original", "sim", "sim-again"))
    assert len(original) == len(a) == len(b) == 12
    assert a.is_llm.all() and not original.is_llm.any()
    assert (a.rho.to_numpy() == b.rho.to_numpy()).all()
    # resumable and never overwritten: a third pass with an existing label scores nothing
    again = asyncio.run(rescore_runs(runs, scores, "sim", "rules/crit", load_rubric("uniform"), Gateway()))
    assert again["runs_skipped_existing"] == 2 and again["turns"] == 0


def test_rescore_cli_prints_agreement(finished, tmp_path, capsys):
    assert main(["rescore", str(finished), "--scorer", "rules", "--rubric", "role-aware", "--cache-dir", str(tmp_path / "c")]) == 0
    out = capsys.readouterr().out
    assert "agreement per pillar: original (rules/crit, non-LLM)" in out and "| logical_validity |" in out
    assert "scorer counts vs deterministic audit" in out
    assert (finished / "scores" / "rules_crit.role-aware").is_dir()
    assert main(["rescore", str(tmp_path / "nothing-here"), "--scorer", "rules"]) == 2
