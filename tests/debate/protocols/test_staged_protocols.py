"""The staged protocols (adversarial, desks, tradingagents) end to end, their checks and the desks' ceiling."""

import asyncio
import json
import re

import pytest

from madbench.data.scenario import Constraints, Scenario
from madbench.debate.protocols.desks import calibrate_conviction, conviction_allocation, directional_consensus, signal_convergence
from madbench.debate.protocols.staged import memo_slice, slice_of
from madbench.debate.stage_schemas import TickerSignal
from madbench.debate.trace import read_trace
from madbench.gateway import ModelSpec
from madbench.runner.pipeline import run_debate
from madbench.runner.wiring import build_gateway
from madbench.sim.provider import SimProvider
from tests.debate.test_engine import TICKERS, config, world  # noqa: F401  (fixture)

PROTOCOLS = ["adversarial", "desks", "tradingagents"]


def events(root, run_id, kind=None):
    evs = read_trace(root / run_id / "trace.jsonl").events
    return [e for e in evs if kind is None or e["event"] == kind]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_each_protocol_completes_on_the_rule_based_answers_with_a_readable_trace(world, tmp_path, protocol):  # noqa: F811
    pack, scenario = world
    result = asyncio.run(run_debate(scenario, pack, config(f"{protocol}.yaml"), build_gateway(), tmp_path))
    assert result.status == "ok", result.error
    assert abs(sum(result.weights.values()) + result.cash - 1) < 1e-6 and set(result.weights) == set(TICKERS)
    assert max(result.weights.values()) <= 0.6 + 1e-9
    turns = events(tmp_path, result.run_id, "turn")
    stages = {t["phase"] for t in turns}
    expected = {"adversarial": {"planner", "bull_thesis", "bear_attack", "bull_rebuttal", "bear_changes", "risk_auditor", "cio"},
                "desks": {"desk", "bull", "bear", "debate_map", "research_manager", "synthesiser"},
                "tradingagents": {"analyst", "bull", "bear", "trader", "risk", "portfolio_manager"}}[protocol]
    assert stages == expected
    assert all(t["is_llm"] is False for t in turns)  # rule-based answers are labelled as such
    assert result.extras and result.metrics["total_return_pct"] is not None
    crit = events(tmp_path, result.run_id, "crit")
    if protocol == "adversarial":  # the thesis has a claim graph: audited and CRIT-scored
        assert len(crit) == 1 and crit[0]["agent"] == "bull" and result.rho_bar == crit[0]["score"]["rho"]
        assert crit[0]["audit"]["claims"] >= 1
    final = events(tmp_path, result.run_id, "final")[0]
    assert final["weights"] == result.weights and final["method"].startswith(protocol)


def test_desk_prompts_hold_only_their_own_slice(world, tmp_path):  # noqa: F811
    """Isolation is structural: every evidence ID in a desk's prompt belongs to that desk's slice."""
    pack, scenario = world
    with SimProvider(record_bodies=True) as sim:
        spec = ModelSpec(model="openai/sim", api_base=sim.url, send_context=True)
        result = asyncio.run(run_debate(scenario, pack, config("desks.yaml", model=spec), build_gateway(), tmp_path))
        assert result.status == "ok", result.error
        desks = [b for b in sim.bodies if b["madbench_context"]["stage"] == "desk"]
    assert {b["madbench_context"]["params"]["desk"] for b in desks} == {"technicals", "macro"}  # the others had no evidence
    for body in desks:
        desk = body["madbench_context"]["params"]["desk"]
        prompt = " ".join(m["content"] for m in body["messages"])
        cited = set(re.findall(r"\[([A-Z0-9]+-[A-Z0-9_]+)\]", prompt))
        assert cited and {slice_of(i) for i in cited} == {desk}
        assert {i["id"] for i in body["madbench_context"]["evidence"]} == cited
    no_model = [t for t in events(tmp_path, result.run_id, "turn") if t["model"] == "none (no call)"]
    assert {t["agent"] for t in no_model} == {"desk_fundamentals", "desk_sentiment"}
    assert all(s["signal"] == "neutral" and s["confidence"] == "low" for t in no_model for s in t["output"]["signals"])


def _signals(*pairs):
    return [TickerSignal(ticker="X", signal=s, confidence=c) for s, c in pairs]


def test_convergence_keeps_neutrals_in_the_denominator():
    # buy high (1.0) + buy medium (0.6) against a neutral high (1.0): 1.6 / 2.6
    s = _signals(("buy", "high"), ("strong_buy", "medium"), ("neutral", "high"))
    assert signal_convergence(s) == pytest.approx(round(1.6 / 2.6, 4))
    assert directional_consensus(s) == pytest.approx(round(1.6 / 2.6, 4))
    assert directional_consensus(_signals(("sell", "high"), ("neutral", "low"))) == pytest.approx(-round(1 / 1.3, 4))
    assert signal_convergence(_signals(("neutral", "low"))) == 0.0 and signal_convergence([]) == 0.0
    assert directional_consensus(_signals(("buy", "high"), ("sell", "high"))) == 0.0


def test_conviction_is_capped_by_the_desks_and_zeroed_against_them():
    assert calibrate_conviction("buy", 0.9, 0.55) == pytest.approx(0.55)  # capped at the desks' convergence
    assert calibrate_conviction("strong_buy", 0.3, 0.8) == pytest.approx(0.3)  # below the ceiling: kept
    assert calibrate_conviction("sell", -0.9, -0.4) == pytest.approx(-0.4)
    assert calibrate_conviction("buy", 0.9, -0.2) == 0.0  # contradicts the desks: exactly zero
    assert calibrate_conviction("sell", -0.7, 0.6) == 0.0
    assert calibrate_conviction("buy", 0.9, 0.0) == 0.0 and calibrate_conviction("neutral", 0.5, 0.9) == 0.0


def test_conviction_allocation_fills_to_feasibility_and_declares_an_empty_book():
    c = Constraints(max_weight=0.5, min_holdings=2)
    w, cash, notes = conviction_allocation({"A": 0.6, "B": 0.0, "C": -0.3}, {"A": 0.6, "B": 0.1, "C": -0.3}, ["A", "B", "C"], c, "equal")
    assert w["A"] == pytest.approx(0.5) and w["B"] == pytest.approx(0.5) and w["C"] == 0 and "filled to 2" in notes[0]
    w, cash, notes = conviction_allocation({"A": 0.0, "B": 0.0}, {"A": 0.0, "B": 0.0}, ["A", "B"], c, "equal")
    assert w == {"A": 0.5, "B": 0.5} and "equal weight" in notes[0]


def test_bear_must_attack_the_strongest_claim_and_the_rebuttal_may_not_add_evidence(world, tmp_path):  # noqa: F811
    pack, scenario = world
    seen = {"bear_attack": 0, "bull_rebuttal": 0}

    def sabotage(context, content):
        stage = context.get("stage")
        if stage in seen and seen[stage] == 0:
            seen[stage] += 1
            answer = json.loads(content)
            if stage == "bear_attack":
                answer["target_claim"] = "B99"  # not the strongest claim
            else:
                answer["evidence_ids"] = answer["evidence_ids"] + ["L1-VIX"]  # new evidence in the rebuttal
            return json.dumps(answer)
        return content

    with SimProvider(answer_filter=sabotage) as sim:
        spec = ModelSpec(model="openai/sim", api_base=sim.url, send_context=True)
        result = asyncio.run(run_debate(scenario, pack, config("adversarial.yaml", model=spec), build_gateway(), tmp_path))
    assert result.status == "ok", result.error
    calls = {c["label"]: c for c in events(tmp_path, result.run_id, "llm_call")}
    assert calls["bear_attack"]["validation_retries"] == 1 and calls["bull_rebuttal"]["validation_retries"] == 1
    reasons = [a["reason"] for c in calls.values() for a in c["attempts"] if a["kind"] == "invalid"]
    assert any("strongest claim" in r for r in reasons) and any("no new evidence" in r for r in reasons)


def test_tradingagents_reflects_on_the_previous_quarter_from_its_decision_log(make_pack, tmp_path):
    from madbench.data.market.pack import load_pack
    pack = load_pack(make_pack(tickers=tuple(TICKERS)))
    cfg = config("tradingagents.yaml")
    q3 = Scenario(id="q3", invest_quarter="2021Q3", tickers=TICKERS, constraints={"max_weight": 0.6})
    q4 = Scenario(id="q4", invest_quarter="2021Q4", tickers=TICKERS, constraints={"max_weight": 0.6})
    first = asyncio.run(run_debate(q3, pack, cfg, build_gateway(), tmp_path))
    second = asyncio.run(run_debate(q4, pack, cfg, build_gateway(), tmp_path))
    assert first.status == second.status == "ok"
    log = [json.loads(line) for line in (tmp_path / "decision_log.jsonl").read_text().splitlines()]
    assert [e["invest_quarter"] for e in log] == ["2021Q3", "2021Q4"] and log[0]["weights"] == first.weights
    assert events(tmp_path, first.run_id, "reflection")[0]["source_run"] is None
    reflection = events(tmp_path, second.run_id, "reflection")[0]
    assert reflection["source_run"] == first.run_id and reflection["text"].startswith("Last quarter the desk held")
    trader = next(t for t in events(tmp_path, second.run_id, "llm_call") if t["label"] == "trader")
    assert trader and second.extras["reflection_from"] == first.run_id


def test_unknown_protocol_options_are_rejected(tmp_path):
    from madbench.data.errors import InputError
    from madbench.debate.config_file import load_debate_config
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nprotocol: desks\noptions: {debate_roundz: 2}\n")
    with pytest.raises(InputError, match="debate_roundz"):
        load_debate_config(bad)


def test_memo_slices_partition_the_ids():
    assert [slice_of(i) for i in ("L1-VIX", "AAA-RET60", "AAA-SENT", "AAA-EC2", "AAA-F3", "AAA-ROE")] == \
        ["macro", "technicals", "sentiment", "sentiment", "fundamentals", "fundamentals"]
    assert memo_slice([], "macro") == []


N_SCENARIOS = 8


@pytest.mark.slow
def test_protocols_batch_gives_a_paired_comparison_table(tmp_path, capsys):
    """configs/batches/protocols.yaml on the rule-based answers, then the statistics module's paired table."""
    import yaml

    from madbench.runner.cli import main
    from tests.conftest import SHARED_MARKET
    from tests.runner.test_batch import ROOT
    if not (SHARED_MARKET / "prices.parquet").exists():
        pytest.skip("real-data test: ../shared/data/market is absent on this machine (it ships beside the checkout in CI)")
    spec = yaml.safe_load((ROOT / "configs/batches/protocols.yaml").read_text())
    base = ROOT / "configs/batches"
    scenarios = (base / spec["scenarios"]["file"]).resolve()
    first = [s["id"] for s in yaml.safe_load(scenarios.read_text())["scenarios"]][:N_SCENARIOS]  # the shipped five protocols on a few scenarios
    spec |= {"model": "rules/auto", "results_dir": str(tmp_path), "cache_dir": str(tmp_path / "cache"),
             "configs": [str((base / c).resolve()) for c in spec["configs"]],
             "scenarios": {"file": str(scenarios), "ids": first}}
    batch = tmp_path / "protocols.yaml"
    batch.write_text(yaml.safe_dump(spec))
    assert main(["run", str(batch), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["stats", str(tmp_path / "protocols"), "--metric", "sharpe,excess_return_pct", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    configs = ["single-causal", "causal-debate-3", "adversarial", "desks", "tradingagents"]
    assert {s["config"] for s in out["summaries"]} == set(configs) and all(s["n"] == N_SCENARIOS for s in out["summaries"])
    pairs = [p for p in out["paired"] if p["metric"] == "sharpe"]
    assert len(pairs) == 10 and all(p["n"] == N_SCENARIOS and p["unpaired_a"] == 0 for p in pairs)
    import pandas as pd
    runs = pd.read_parquet(tmp_path / "protocols" / "runs.parquet")
    desks = runs[runs.config == "desks"]
    assert {"x_ruling", "x_mean_convergence", "x_conviction_zeroed"} <= set(runs.columns)
    assert desks.x_ruling.isin(["bull", "bear", "neither"]).all()
    assert runs[runs.config == "adversarial"].x_cio_decision.isin(["approve", "reduce", "reject"]).all()


def test_stage_schemas_sent_to_constrained_decoders_carry_the_universe_and_visible_ids():
    from madbench.debate.request_schemas import constrained_schema
    from madbench.debate.stage_schemas import Attack, DeskReport
    desk = constrained_schema(DeskReport, ["AAA", "BBB"], {"AAA-RET60", "L1-VIX"})
    assert desk["$defs"]["TickerSignal"]["properties"]["ticker"]["enum"] == ["AAA", "BBB"]
    assert desk["properties"]["signals"]["minItems"] == desk["properties"]["signals"]["maxItems"] == 2
    assert desk["properties"]["evidence_ids"]["items"]["enum"] == ["AAA-RET60", "L1-VIX"]
    attack = constrained_schema(Attack, ["AAA"], {"AAA-RET60"}, enums={"target_claim": ["B2"]})
    assert attack["properties"]["target_claim"]["enum"] == ["B2"] and attack["properties"]["evidence_ids"]["minItems"] == 1
