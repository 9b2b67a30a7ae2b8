"""The dry run's estimate (runner/estimate/): its call counts against real offline runs, its formulas, its
prices, and its calibration from a pilot batch against a larger batch on the simulated provider."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from madbench.data.market.pack import load_pack
from madbench.data.market.write import write_pack
from madbench.data.memo import build_memo
from madbench.data.scenario import Scenario
from madbench.debate.config import InterventionConfig
from madbench.debate.config_file import load_debate_config
from madbench.debate.grading import RCAVerdict
from madbench.debate.trace import read_trace
from madbench.gateway import ModelRouting
from madbench.gateway.models import ModelSpec, RateLimits
from madbench.gateway.providers.litellm_provider import LiteLLMProvider
from madbench.runner import estimate as E
from madbench.runner.cli import main
from madbench.runner.pipeline import run_debate
from madbench.runner.wiring import build_gateway
from madbench.scoring.rule_answers import answer
from madbench.sim.provider import SimProvider
from tests.conftest import synthetic_tables

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs" / "debate"
TICKERS = ["AAA", "BBB", "CCC", "DDD"]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    pack = load_pack(write_pack(tmp_path_factory.mktemp("pack") / "p", synthetic_tables(tickers=tuple(TICKERS))))
    scenario = Scenario(id="syn-2021Q3", invest_quarter="2021Q3", tickers=TICKERS,
                        constraints={"max_weight": 0.6, "min_holdings": 2})
    return pack, scenario, E.MemoInfo.from_memo(build_memo(scenario, pack))


def offline(name: str, **update):
    cfg = load_debate_config(CONFIGS / name)
    return cfg.model_copy(update={"models": ModelRouting.single("rules/auto"), **update})


def run_and_count(world, cfg, tmp_path, rule_answer=answer):
    """Run ``cfg`` offline, ``rules/…`` models answered by ``rule_answer``; (result, its llm_call events, the
    interventions that fired)."""
    pack, scenario, _ = world
    result = asyncio.run(run_debate(scenario, pack, cfg, build_gateway(rule_answer=rule_answer), tmp_path))
    assert result.status == "ok", result.error
    events = read_trace(tmp_path / result.run_id / "trace.jsonl").events
    return result, [e for e in events if e["event"] == "llm_call"], [e for e in events if e["event"] == "intervention"]


# -- the formulas ------------------------------------------------------------------------------------

def test_the_retry_formulas():
    assert E.expected_retries(0.5, 2) == pytest.approx(0.75)              # 0.5 + 0.25
    assert E.expected_retries(1.0, 3) == 3 and E.expected_retries(0.0, 3) == 0
    assert E.expected_max_retries(0.5, 1, 3) == pytest.approx(1 - 0.5 ** 3)  # P(any of three fails once)
    assert E.expected_max_retries(1.0, 2, 4) == 2
    assert E.expected_attempts(0.5, 0.5, 2) == pytest.approx(0.75)        # fires, then fires again half the time
    assert E.straggler_factor(1, 0.3) == 1 and E.straggler_factor(4, 0.3) == pytest.approx(1 + 0.3 * 1.0294)
    worst = E.worst_rates(E.EXPECTED_RATES)
    assert (worst.rca_fail, worst.js_fire, worst.cc_refire, worst.rounds_fraction) == (1, 1, 1, 1)


def test_the_batch_wall_time_is_bound_by_latency_or_by_a_rate_limit():
    usage = {"k": E.LimitUsage(RateLimits(rpm=60, max_concurrency=4), attempts=600, tokens=1e6, busy_s=100)}
    wall, why = E.batch_wall_s([60.0] * 8, 4, usage)
    assert why == "rpm of k" and wall == pytest.approx(E.BATCH_STARTUP_S + 600 / (60 * 0.98 / 60))
    wall, why = E.batch_wall_s([60.0] * 8, 4, {})
    assert why.startswith("latency") and wall == pytest.approx(E.BATCH_STARTUP_S + 120)  # 8 runs of 60 s, 4 at a time
    # the bound names the model as a reader knows it, not the internal key provider|model|api_base
    usage = {"rules|rules/macro|": E.LimitUsage(RateLimits(max_concurrency=1), busy_s=1e4, label="rules/macro")}
    assert E.batch_wall_s([1.0], 4, usage)[1] == "max_concurrency of rules/macro"
    spec = ModelSpec(model="openai/x", api_base="http://127.0.0.1:8000/v1")
    assert E.limit_label(spec) == "openai/x at http://127.0.0.1:8000/v1" and E.limit_label(ModelSpec(model="rules/auto")) == "rules/auto"


# -- call counts against real offline runs -----------------------------------------------------------

@pytest.mark.parametrize("name", ["single-causal.yaml", "mean3-causal.yaml", "causal-debate-3.yaml", "a10.yaml",
                                  "paper-debate3-causal-rca.yaml", "enriched-debate-4x5.yaml"])
def test_paper_protocol_call_count_equals_an_offline_run(world, tmp_path, name):
    cfg = offline(name)
    result, calls, fired = run_and_count(world, cfg, tmp_path)
    _, scenario, memo = world
    rounds = E.Rates(rounds_fraction=result.rounds_run / cfg.rounds if cfg.rounds else 1.0)
    assert not fired  # on this scenario no intervention fires: the estimate with nothing firing is exact
    assert E.estimate_run(cfg, scenario, memo, rounds).calls == len(calls)
    assert E.estimate_run(cfg, scenario, memo, E.worst_rates(E.NO_FIRING)).calls >= len(calls)
    assert E.estimate_run(cfg, scenario, memo, E.EXPECTED_RATES).calls >= len(calls)


def picky(name: str, context: dict):
    """The rule-based answers, but about half of the RCA checks (by a hash of the task) call the revision inconsistent."""
    if name == "rca" and int(hashlib.sha256(json.dumps(context, sort_keys=True).encode()).hexdigest(), 16) % 2:
        return RCAVerdict(verdict="inconsistent", reason="test: inconsistent", feedback="Make it consistent.")
    return answer(name, context)


@pytest.mark.parametrize("retries", [1, 2])
def test_every_intervention_firing_is_counted(world, tmp_path, retries):
    """JS collapse, CRIT-causal and RCA all fire; with the rates this run itself shows, the estimate gives its
    calls (exactly when each intervention retries once: the expectation is then linear in the rates)."""
    interventions = [InterventionConfig(name="js_collapse", threshold=1.0, min_js_prop=0.0, max_retries=retries),
                     InterventionConfig(name="crit_causal", p4_threshold=1.0, max_retries=retries),
                     InterventionConfig(name="rca", max_retries=retries)]
    cfg = offline("causal-debate-3.yaml", interventions=interventions)
    cfg = cfg.model_copy(update={"models": cfg.models.model_copy(update={"phases": {"rca": "rules/rca"}})})
    result, calls, fired = run_and_count(world, cfg, tmp_path, rule_answer=picky)
    assert {f["name"] for f in fired} == {"js_collapse", "crit_causal", "rca"}
    _, scenario, memo = world
    rates, sources = E.observed_rates([{"run_id": "r", "config": cfg, "rounds_run": result.rounds_run}], {"r": calls})
    assert 0 < rates.rca_fail < 1 and rates.js_fire > 0 and rates.cc_fire > 0 and sources["rca_fail"].startswith("pilot")
    estimated = E.estimate_run(cfg, scenario, memo, rates).calls
    if retries == 1:
        assert estimated == pytest.approx(len(calls))
    else:
        assert estimated == pytest.approx(len(calls), rel=0.25)
    assert E.estimate_run(cfg, scenario, memo, E.worst_rates(rates)).calls >= len(calls)
    assert E.estimate_run(cfg, scenario, memo, E.NO_FIRING).calls < len(calls)


@pytest.mark.parametrize("name", ["adversarial.yaml", "desks.yaml", "tradingagents.yaml"])
def test_staged_protocol_call_count_equals_an_offline_run(world, tmp_path, name):
    cfg = offline(name)
    _, calls, _ = run_and_count(world, cfg, tmp_path)
    _, scenario, memo = world
    assert E.estimate_run(cfg, scenario, memo, E.EXPECTED_RATES).calls == len(calls)
    kinds = {E.kind_of(c["phase"], c["label"]) for c in calls}
    shapes = E.staged_steps(cfg, scenario, memo)
    assert {s.kind for step in shapes for s in step.shapes} == kinds  # the same stages, by name


# -- tokens, prices, time ----------------------------------------------------------------------------

def routed(cfg, judge_model="openai/gpt-5"):
    return cfg.model_copy(update={"models": ModelRouting(
        tiers={"agents": "openai/gpt-5-mini", "strong": "openai/gpt-5", "judge": judge_model}, default="agents",
        phases={"crit": "strong", "rca": "strong", "judge": "judge"})})


def test_each_phase_is_priced_at_its_own_model_and_unknown_models_are_reported(world):
    _, scenario, memo = world
    cfg = routed(offline("paper-debate3-causal-rca.yaml"))
    e = E.estimate_run(cfg, scenario, memo, E.EXPECTED_RATES)
    assert {m for m, _ in e.lines} == {"openai/gpt-5-mini", "openai/gpt-5"}
    assert {k for m, k in e.lines if m == "openai/gpt-5"} == {"crit", "rca", "judge"}
    provider = LiteLLMProvider()
    crit = e.lines["openai/gpt-5", "crit"]
    per_call = provider.cost("openai/gpt-5", round(crit.prompt_tokens / crit.calls), round(crit.completion_tokens / crit.calls))
    assert crit.cost_usd == pytest.approx(crit.calls * per_call, rel=1e-3)
    assert e.cost_usd == pytest.approx(sum(line.cost_usd for line in e.lines.values()))
    # reasoning models are billed their reasoning: a gpt-5-mini proposal costs more than its visible answer
    assert e.lines["openai/gpt-5-mini", "propose"].completion_tokens / 3 > E.ANSWER_TOKENS["propose"].base
    unknown = E.estimate_run(routed(cfg, "openai/no-such-model-here"), scenario, memo, E.EXPECTED_RATES)
    assert unknown.cost_usd is None and unknown.unpriced == {"openai/no-such-model-here"}


def test_prompts_grow_with_the_memo_and_the_context(world):
    _, scenario, memo = world
    cfg = offline("enriched-debate-4x5.yaml")
    shapes = E.paper_shapes(cfg, scenario, memo)
    propose = shapes.propose["macro"].prompt
    assert propose > E.tokens_of(memo.chars)  # the memo plus the prompt template
    assert shapes.critique["macro"].prompt > propose + 2 * E.ANSWER_TOKENS["propose"].base  # three peers' outputs
    assert shapes.judge.prompt > propose + 3 * E.ANSWER_TOKENS["revise"].base  # four final revisions
    bigger = E.MemoInfo(memo.chars * 2, memo.ids, memo.slice_chars, memo.line_chars)
    assert E.paper_shapes(cfg, scenario, bigger).propose["macro"].prompt == pytest.approx(propose + E.tokens_of(memo.chars))


def test_the_critical_path_counts_phases_not_agents(world):
    _, scenario, memo = world
    cfg = routed(offline("enriched-debate-4x5.yaml"))
    e = E.estimate_run(cfg, scenario, memo, E.NO_FIRING)
    one = E.estimate_run(cfg.model_copy(update={"agents": cfg.agents[:2]}), scenario, memo, E.NO_FIRING)
    # 1 propose + 5 x (critique, revise, CRIT) + judge = 17 sequential steps; more agents only add stragglers
    assert e.calls == 65 and e.path_s < one.path_s * 1.3
    mini = E.speed_of("openai/gpt-5-mini")
    assert e.path_s > 17 * mini.overhead_s


# -- the CLI -----------------------------------------------------------------------------------------

def write_batch(tmp_path: Path, pack_dir: Path, scenarios: list[dict], configs: list[str], name: str, model,
                **over) -> Path:
    scen = tmp_path / f"{name}-scenarios.yaml"
    scen.write_text(yaml.safe_dump({"scenarios": scenarios}))
    spec = {"name": name, "scenarios": {"file": str(scen)}, "configs": configs, "model": model, "pack": str(pack_dir),
            "results_dir": str(tmp_path / "results"), "cache_dir": str(tmp_path / "cache"), "max_in_flight": 4,
            "workers": 1, "retries": 0} | over
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_dry_run_prints_a_table_and_json(make_pack, tmp_path, capsys):
    scenarios = [{"id": f"s{q}", "invest_quarter": q, "tickers": TICKERS, "constraints": {"max_weight": 0.6}}
                 for q in ("2021Q2", "2021Q3")]
    configs = [str(CONFIGS / "single-causal.yaml"), str(CONFIGS / "causal-debate-3.yaml")]
    batch = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)), scenarios, configs, "t", "rules/auto")
    assert main(["run", str(batch), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "causal-debate-3" in out and "min/scenario" in out and "wall time" in out and "$/scenario" in out
    assert main(["run", str(batch), "--dry-run", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    by = {c["config"]: c for c in d["configs"]}
    assert d["runs"] == 4 and by["single-causal"]["calls"] == 2 * 2
    # causal-debate-3: 3 + 2 x 9 + 1 = 22 calls when JS collapse never fires; expected: half the rounds re-revise
    assert by["causal-debate-3"]["calls"] == 2 * (22 + 2 * 0.5 * 3) and by["causal-debate-3"]["calls_worst"] == 2 * 28
    assert d["expected_calls"] == 2 * 2 + 2 * 25 and d["estimated_cost_usd"] == 0 and d["models_without_price"] == []
    # rule-based answers record no tokens (every llm_call of a rules/auto run says 0), so none are estimated
    assert all(c[k] == 0 for c in [*d["configs"], d["total"]] for k in ("prompt_tokens", "completion_tokens",
                                                                         "prompt_tokens_worst", "completion_tokens_worst"))
    assert all(row["prompt_tokens"] == row["completion_tokens"] == 0 and row["cost_usd"] == 0 for row in d["by_model"])
    assert "|" not in d["bottleneck"]  # a model's name, never the internal key provider|model|api_base


def test_rule_based_calls_are_estimated_at_the_tokens_their_runs_record(world, tmp_path):
    """A rules/auto run records 0 tokens on every call; a model on a real provider gets the estimate's tokens."""
    cfg = offline("causal-debate-3.yaml")
    _, calls, _ = run_and_count(world, cfg, tmp_path)
    recorded = {(c.get("prompt_tokens"), c.get("completion_tokens")) for c in calls}
    assert recorded == {(0, 0)}
    _, scenario, memo = world
    e = E.estimate_run(cfg, scenario, memo, E.EXPECTED_RATES)
    assert e.calls > 0 and e.prompt_tokens == e.completion_tokens == 0 and e.cost_usd == 0
    assert all(u.tokens == 0 for u in e.limits.values())
    assert E.paper_shapes(cfg, scenario, memo).propose["macro"].prompt > 0  # the prompt is still sized, just not counted
    llm = E.estimate_run(routed(cfg), scenario, memo, E.EXPECTED_RATES)
    assert llm.prompt_tokens > 0 and llm.completion_tokens > 0


# -- calibration from a pilot --------------------------------------------------------------------------

def calibration_scenarios(tickers: list[str], quarters: tuple[str, ...], sizes: tuple[int, ...], offset: int) -> list[dict]:
    out = []
    for i, q in enumerate(quarters):
        for j, size in enumerate(sizes):
            k = (i + j + offset) % len(tickers)
            universe = (tickers[k:] + tickers[:k])[:size]
            out.append({"id": f"s{q}-{j}-{offset}", "invest_quarter": q, "tickers": universe,
                        "constraints": {"max_weight": 0.6 if size >= 3 else 1.0}})
    return out


@pytest.mark.slow
def test_a_pilot_calibrates_the_estimate_of_a_larger_batch_within_25_percent(make_pack, tmp_path, capsys):
    """A 3-run pilot and a 6-run batch of other scenarios (3 to 5 tickers, other quarters) against the simulated
    provider (``send_context``: real prompts, counted tokens). The pilot's calibration estimates the larger
    batch's calls, prompt tokens and completion tokens within 25% of its calls.parquet. (Each universe size
    once in the pilot, and in each of the larger batch's quarters: the fewest runs that spread both over them.)"""
    tickers = ["AAA", "BBB", "CCC", "DDD", "EEE"]
    pack = make_pack(tickers=tuple(tickers))
    cfg = yaml.safe_load((CONFIGS / "causal-debate-3.yaml").read_text())
    cfg["name"] = "debate-rca"
    cfg["interventions"] = cfg["interventions"] + [{"name": "rca", "max_retries": 2}]
    (tmp_path / "debate-rca.yaml").write_text(yaml.safe_dump(cfg))
    configs = [str(tmp_path / "debate-rca.yaml")]
    with SimProvider() as sim:
        # A self-hosted endpoint takes no key: nothing in the environment, which Ray workers started earlier in the
        # same test session would not see anyway.
        model = {"model": "openai/madbench-sim", "api_base": sim.url, "send_context": True}
        pilot = write_batch(tmp_path, pack, calibration_scenarios(tickers, ("2021Q3",), (3, 4, 5), 0), configs,
                            "pilot", model)
        big = write_batch(tmp_path, pack, calibration_scenarios(tickers, ("2021Q2", "2022Q1"), (3, 4, 5), 1), configs,
                          "big", model)
        assert main(["run", str(pilot), "--quiet"]) == 0
        capsys.readouterr()
        assert main(["run", str(big), "--dry-run", "--json", "--calibrate-from", str(tmp_path / "results" / "pilot")]) == 0
        estimate = json.loads(capsys.readouterr().out)
        assert main(["run", str(big), "--quiet"]) == 0
    capsys.readouterr()
    calls = pd.read_parquet(tmp_path / "results" / "big" / "calls.parquet")
    assert estimate["calibration"]["runs"] == 3 and estimate["runs"] == 6
    actual = {"calls": len(calls), "prompt_tokens": calls.prompt_tokens.sum(), "completion_tokens": calls.completion_tokens.sum()}
    errors = {k: estimate["total"][k] / v - 1 for k, v in actual.items()}
    print("calibration error (estimate / actual - 1):", {k: f"{v:+.1%}" for k, v in errors.items()})
    assert all(abs(e) <= 0.25 for e in errors.values()), errors


def test_the_dry_run_gives_the_synchronous_and_the_provider_batch_cost_side_by_side(make_pack, tmp_path, capsys):
    scenarios = [{"id": "s1", "invest_quarter": "2021Q3", "tickers": TICKERS, "constraints": {"max_weight": 0.6}}]
    model = {"model": "openai/gpt-4o-mini", "api_base": "http://127.0.0.1:9/v1"}  # priced; nothing is called
    batch = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)), scenarios, [str(CONFIGS / "causal-debate-3.yaml")],
                        "b", model)
    assert main(["run", str(batch), "--dry-run", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    sync, in_batch = d["estimated_cost_usd"], d["estimated_batch_cost_usd"]
    lines = [line for line in d["by_model"] if line["model"] == "openai/gpt-4o-mini"]
    # gpt-4o-mini's batch prices in litellm's cost map are half its synchronous ones
    assert sync > 0 and in_batch == pytest.approx(sync / 2, rel=0.01) and d["execution"] == "sync"
    assert sum(line["cost_usd"] for line in lines) == pytest.approx(sync, abs=1e-3)  # each rounded to 4 places
    assert main(["run", str(batch), "--dry-run", "--provider-batch"]) == 0
    out = capsys.readouterr().out
    assert f"synchronous {E.usd(sync)}, provider batch {E.usd(in_batch)}" in out and "runs in provider batch mode" in out
    assert E.usd(0.0272) == "$0.0272" and E.usd(13.9) == "$13.90"  # a small batch's cents are not rounded away


def test_a_cap_between_the_batch_and_the_sync_cost_is_enough_in_provider_batch_mode(make_pack, tmp_path, capsys):
    scenarios = [{"id": "s1", "invest_quarter": "2021Q3", "tickers": TICKERS, "constraints": {"max_weight": 0.6}}]
    model = {"model": "openai/gpt-4o-mini", "api_base": "http://127.0.0.1:9/v1"}
    pack = make_pack(tickers=tuple(TICKERS))
    probe = write_batch(tmp_path, pack, scenarios, [str(CONFIGS / "causal-debate-3.yaml")], "probe", model)
    assert main(["run", str(probe), "--dry-run", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    cap = round((d["worst_batch_cost_usd"] + d["estimated_cost_usd"]) / 2, 6)
    assert d["worst_batch_cost_usd"] < cap < d["estimated_cost_usd"]
    capped = write_batch(tmp_path, pack, scenarios, [str(CONFIGS / "causal-debate-3.yaml")], "capped", model, max_cost_usd=cap)
    assert main(["run", str(capped), "--dry-run"]) == 0
    assert "exceeds" in capsys.readouterr().err  # synchronously it would stop at the cap
    assert main(["run", str(capped), "--dry-run", "--provider-batch"]) == 0
    assert "max_cost_usd" not in capsys.readouterr().err  # at batch prices it fits, worst case included
