"""Tier-specific output schemas: the basic tier returns an allocation with a free-text justification and no
claims (paper App. B.16); causal and enriched keep the claim structure (§3.1.1). Request schemas, validation,
critique targets, the llama.cpp adaptations, the rule-based analysts and offline runs, per tier."""

import asyncio
import dataclasses
import json
from pathlib import Path

import jsonschema
import pytest

from madbench.data.market.pack import load_pack
from madbench.data.memo import build_memo
from madbench.data.scenario import Constraints, Scenario
from madbench.debate.config import AgentConfig
from madbench.debate.request_schemas import request_schema
from madbench.debate.rules import ANALYSTS, respond
from madbench.debate.schemas import (
    ALLOCATION_TARGET,
    BasicCritique,
    BasicProposal,
    BasicRevision,
    Critique,
    JudgeDecision,
    Proposal,
    Revision,
    schema_for,
)
from madbench.debate.task import AgentTask, ReceivedCritique
from madbench.debate.trace import read_trace
from madbench.debate.validation import TurnRules, validate_turn
from madbench.gateway.errors import OutputInvalid
from madbench.gateway.providers.llama_schema import llama_cpp_schema
from madbench.runner.pipeline import run_debate
from madbench.runner.wiring import build_gateway
from tests.debate.test_engine import config

UNIVERSE = ["AAA", "BBB", "CCC"]
BASIC = TurnRules(UNIVERSE, Constraints(max_weight=0.5, min_holdings=2), {"AAA-RET60", "L1-VIX"}, tier="basic")
CAUSAL = dataclasses.replace(BASIC, tier="causal")
CLAIM_FIELDS = {"claims", "position_rationale", "critique_responses"}

BASIC_ANSWER = {"thesis": "Rates are falling [L1-VIX]; AAA has momentum [AAA-RET60].",
                "allocation": [{"ticker": "AAA", "weight": 0.5}, {"ticker": "BBB", "weight": 0.3},
                               {"ticker": "CCC", "weight": 0.2}],
                "risks_or_falsifiers": ["VIX above 30"], "confidence": 0.6}


def test_each_tier_has_its_own_output_models():
    assert [schema_for(p, "basic") for p in ("propose", "critique", "revise", "judge")] == [
        BasicProposal, BasicCritique, BasicRevision, JudgeDecision]
    for tier in ("causal", "enriched"):
        assert [schema_for(p, tier) for p in ("propose", "critique", "revise")] == [Proposal, Critique, Revision]
    assert not CLAIM_FIELDS & set(BasicRevision.model_fields)
    assert BasicProposal.model_validate(BASIC_ANSWER).claims == []  # claim-less, and says so
    with pytest.raises(KeyError, match="unknown tier"):
        schema_for("propose", "intense")


@pytest.mark.parametrize("phase", ["propose", "revise"])
def test_a_basic_agents_request_schema_has_no_claims_and_validates_a_basic_answer(phase):
    schema = request_schema(phase, BASIC)
    assert not CLAIM_FIELDS & set(schema["properties"]) and "Claim" not in json.dumps(schema)
    assert {"thesis", "allocation", "risks_or_falsifiers", "confidence"} <= set(schema["required"])
    answer = BASIC_ANSWER | ({"revision_notes": "risk: rebutted, AAA stays."} if phase == "revise" else {})
    jsonschema.validate(answer, schema)
    v = validate_turn(phase, json.dumps(answer), BASIC, "strict")
    assert isinstance(v.value, BasicRevision if phase == "revise" else BasicProposal)
    assert v.weights == {"AAA": 0.5, "BBB": 0.3, "CCC": 0.2}
    with pytest.raises(OutputInvalid, match="BasicProposal schema"):  # structured claims are not the basic format
        validate_turn("propose", json.dumps(BASIC_ANSWER | {"claims": []}), BASIC, "strict")
    with pytest.raises(OutputInvalid, match="above max_weight"):  # the allocation is checked as in every tier
        validate_turn(phase, json.dumps(answer | {"allocation": [{"ticker": "AAA", "weight": 0.8},
                                                                  {"ticker": "BBB", "weight": 0.2},
                                                                  {"ticker": "CCC", "weight": 0.0}]}), BASIC, "strict")


def test_a_causal_agents_request_schema_still_has_claims():
    for tier in ("causal", "enriched"):
        rules = dataclasses.replace(CAUSAL, tier=tier)
        assert {"claims", "position_rationale"} <= set(request_schema("propose", rules)["properties"])
        assert "critique_responses" in request_schema("revise", dataclasses.replace(rules, owed_responses=[]))["properties"]
        with pytest.raises(OutputInvalid, match="Proposal schema: claims"):
            validate_turn("propose", json.dumps(BASIC_ANSWER), rules, "strict")


@pytest.mark.parametrize("tier", ["basic", "causal"])
def test_a_critique_of_a_claimless_peer_targets_its_allocation(tier):
    rules = dataclasses.replace(BASIC, tier=tier, peer_claims={"macro": set(), "value": {"C2", "C1"}})
    alternatives = request_schema("critique", rules)["properties"]["critiques"]["items"]["anyOf"]
    assert [(a["properties"]["target_agent"]["const"], a["properties"]["target_claim"]["enum"]) for a in alternatives] == [
        ("macro", [ALLOCATION_TARGET]), ("value", ["C1", "C2"])]
    item = {"critique_text": "AAA is crowded", "suggested_adjustment": "Cut AAA by 5 points.", "objection_confidence": 0.7}
    if tier == "causal":
        item |= {"evidence_ids": ["AAA-RET60"], "portfolio_implication": "p", "falsifier": "f"}
    good = {"from_role": "risk", "critiques": [item | {"target_agent": "macro", "target_claim": "allocation"},
                                               item | {"target_agent": "value", "target_claim": "C2"}]}
    validate_turn("critique", json.dumps(good), rules, "strict")
    bad = {"from_role": "risk", "critiques": [item | {"target_agent": "macro", "target_claim": "C1"}]}
    with pytest.raises(OutputInvalid, match="macro has no claim C1; it lists no claims, so target: allocation"):
        validate_turn("critique", json.dumps(bad), rules, "strict")
    with pytest.raises(OutputInvalid, match="value has no claim allocation; its claims are: C1, C2"):
        validate_turn("critique", json.dumps({"from_role": "risk", "critiques": [
            item | {"target_agent": "value", "target_claim": "allocation"}]}), rules, "strict")


def test_basic_schemas_pass_the_llama_cpp_adaptations():
    rules = dataclasses.replace(BASIC, peer_claims={"macro": set(), "value": {"C1"}})
    propose = llama_cpp_schema(request_schema("propose", rules))
    assert "prefixItems" in propose["properties"]["allocation"]["anyOf"][0]  # one entry per ticker, on the grid
    assert not CLAIM_FIELDS & set(propose["properties"])
    jsonschema.validate(BASIC_ANSWER | {"allocation": [{"ticker": "AAA", "weight": 0.5}, {"ticker": "BBB", "weight": 0.3},
                                                       {"ticker": "CCC", "weight": 0.2}], "confidence": 0.6}, propose)
    revise = llama_cpp_schema(request_schema("revise", dataclasses.replace(rules, owed_responses=[("macro", "allocation")])))
    jsonschema.validate(BASIC_ANSWER | {"revision_notes": "macro: accepted."}, revise)
    critique = llama_cpp_schema(request_schema("critique", rules))
    entries = critique["properties"]["critiques"]["prefixItems"]  # one critique per peer, each once
    assert [e["properties"]["target_claim"]["enum"] for e in entries] == [["allocation"], ["C1"]]
    item = {"critique_text": "t", "suggested_adjustment": "s", "objection_confidence": 0.5}
    jsonschema.validate({"from_role": "risk", "critiques": [item | {"target_agent": "macro", "target_claim": "allocation"},
                                                            item | {"target_agent": "value", "target_claim": "C1"}]}, critique)


@pytest.fixture
def real_memo(make_pack):
    tickers = ["AAA", "BBB", "CCC", "DDD"]
    pack = load_pack(make_pack(tickers=tuple(tickers)))
    scenario = Scenario(id="s", invest_quarter="2021Q3", tickers=tickers, constraints={"max_weight": 0.5, "min_holdings": 2})
    return scenario, build_memo(scenario, pack)


def test_rule_analysts_answer_the_basic_schema_in_every_phase_and_critique_across_tiers(real_memo):
    scenario, memo = real_memo
    base = dict(universe=scenario.tickers, constraints=scenario.constraints, evidence=memo.items)
    tiers = {role: ("basic" if i % 2 == 0 else "causal") for i, role in enumerate(ANALYSTS)}
    rules = {role: TurnRules(scenario.tickers, scenario.constraints, memo.evidence_ids, tier=tiers[role]) for role in ANALYSTS}
    proposals = {}
    for role in ANALYSTS:
        out = respond(role, AgentTask(agent_id=role, role=role, phase="propose", tier=tiers[role], **base))
        proposals[role] = validate_turn("propose", out.model_dump_json(), rules[role], "strict").value
        if tiers[role] == "basic":
            assert not CLAIM_FIELDS & set(out.model_dump()) and "[" in out.thesis  # cites memo IDs inline
    critiques = {}
    for role in ANALYSTS:
        peers = {a: p for a, p in proposals.items() if a != role}
        r = dataclasses.replace(rules[role], peer_claims={a: {c.claim_id for c in p.claims} for a, p in peers.items()})
        out = respond(role, AgentTask(agent_id=role, role=role, phase="critique", tier=tiers[role], own=proposals[role],
                                      peers=peers, **base))
        critiques[role] = validate_turn("critique", out.model_dump_json(), r, "strict").value
        assert isinstance(critiques[role], BasicCritique if tiers[role] == "basic" else Critique)
        for item in critiques[role].critiques:  # a claim-less peer's allocation is the target, a claim peer's claim
            assert (item.target_claim == ALLOCATION_TARGET) == (tiers[item.target_agent] == "basic")
    for role in ANALYSTS:
        received = [ReceivedCritique(from_agent=a, item=i) for a, c in critiques.items() for i in c.critiques
                    if i.target_agent == role]
        task = AgentTask(agent_id=role, role=role, phase="revise", tier=tiers[role], own=proposals[role],
                         critiques_received=received, **base)
        task = AgentTask.model_validate(task.model_dump(mode="json"))  # as the rules provider receives it
        rev = validate_turn("revise", respond(role, task).model_dump_json(), rules[role], "strict").value
        if tiers[role] == "basic":
            assert isinstance(rev, BasicRevision) and all(rc.from_agent in rev.revision_notes for rc in received)
        else:
            assert len(rev.critique_responses) == len(received)


def turns(run_dir: Path) -> list[dict]:
    return [e for e in read_trace(run_dir / "trace.jsonl").events if e["event"] in ("turn", "crit")]


def test_offline_basic_and_mixed_tier_runs_complete_with_claimless_basic_turns(tmp_path, make_pack):
    tickers = ["AAA", "BBB", "CCC", "DDD"]
    pack = load_pack(make_pack(tickers=tuple(tickers)))
    scenario = Scenario(id="syn-2021Q3", invest_quarter="2021Q3", tickers=tickers,
                        constraints={"max_weight": 0.6, "min_holdings": 2})
    mixed = config("causal-debate-3.yaml", agents=[AgentConfig(role="macro", tier="basic"),
                                                   AgentConfig(role="value", tier="causal"),
                                                   AgentConfig(role="technical", tier="enriched")])
    rho: dict[str, list[float]] = {"basic": [], "causal": [], "enriched": []}
    for name, cfg in [("single-basic", config("single-basic.yaml")), ("mean3-basic", config("mean3-basic.yaml")),
                      ("mixed", mixed)]:
        result = asyncio.run(run_debate(scenario, pack, cfg, build_gateway(), tmp_path / name))
        assert result.status == "ok", result.error
        tier = {a.agent_id: a.tier for a in cfg.agents}
        events = turns(tmp_path / name / result.run_id)
        phases = {e["phase"] for e in events if e["event"] == "turn"}
        assert phases >= ({"propose", "critique", "revise", "judge"} if name == "mixed" else {"propose"})
        for e in events:
            if e["event"] == "turn" and e["agent"] != "judge":
                assert bool(CLAIM_FIELDS & set(e["output"])) == (tier[e["agent"]] != "basic" and e["phase"] != "critique")
                if tier[e["agent"]] == "basic":
                    assert "claims" not in e["output"]
            if e["event"] == "crit":
                assert (e["audit"]["claimless"] == 1) == (tier[e["agent"]] == "basic")
                rho[tier[e["agent"]]].append(e["score"]["rho"])
    # the tier effect is visible offline: the rule-based CRIT grades claim-less arguments lower
    assert rho["basic"] and rho["causal"] and max(rho["basic"]) < min(rho["causal"] + rho["enriched"])
