"""Rule-based analysts: each role's heuristic points the right way, and every phase passes validation."""

import pytest

from madbench.data.market.pack import load_pack
from madbench.data.memo import EvidenceItem, build_memo
from madbench.data.scenario import Constraints, Scenario
from madbench.debate.rules import ANALYSTS, respond
from madbench.debate.task import AgentTask, ReceivedCritique
from madbench.debate.validation import TurnRules, validate_turn


def ev(values: dict[str, float], macro: dict[str, float] | None = None) -> list[EvidenceItem]:
    items = [EvidenceItem(id=f"L1-{k}", label=k, value=v, unit="", as_of=None, source="t") for k, v in (macro or {}).items()]
    return items + [EvidenceItem(id=k, label=k, value=v, unit="", as_of=None, source="t") for k, v in values.items()]


def top(role, evidence, universe=("AAA", "BBB", "CCC", "DDD"), **constraints):
    task = AgentTask(agent_id=role, role=role, phase="propose", universe=list(universe),
                     constraints=Constraints(**constraints), evidence=evidence)
    p = respond(role, task)
    w = {h.ticker: h.weight for h in p.allocation}
    return max(w, key=w.get), w, p


def test_technical_prefers_momentum_risk_prefers_low_vol():
    values = {}
    for t, mom, vol in (("AAA", 1.3, 0.5), ("BBB", 0.8, 0.1), ("CCC", 1.0, 0.3), ("DDD", 0.9, 0.2)):
        values |= {f"{t}-MOM200": mom, f"{t}-RET60": mom - 1, f"{t}-VOL60": vol, f"{t}-BETA": vol * 3}
    assert top("technical", ev(values))[0] == "AAA"
    assert top("risk", ev(values))[0] == "BBB"


def test_macro_switches_with_regime():
    values = {f"{t}-BETA": b for t, b in (("AAA", 1.6), ("BBB", 0.4), ("CCC", 1.0), ("DDD", 0.8))}
    calm = {"VIX": 14.0, "HY": 3.0, "CURVE": 0.8, "CPI": 2.0}
    stressed = calm | {"VIX": 32.0}
    assert top("macro", ev(values, calm))[0] == "AAA"  # risk-on: high beta
    best, _, p = top("macro", ev(values, stressed))
    assert best == "BBB"  # stress: low beta
    assert "L1-VIX" in p.claims[0].evidence_ids


def test_value_uses_fundamentals_when_present_else_reversal():
    rets = {f"{t}-RET252": r for t, r in (("AAA", 0.5), ("BBB", -0.3), ("CCC", 0.1), ("DDD", 0.0))}
    assert top("value", ev(rets))[0] == "BBB"  # biggest 1-year loser
    roe = {f"{t}-ROE": r for t, r in (("AAA", 0.4), ("BBB", 0.05), ("CCC", 0.1), ("DDD", 0.2))}
    best, _, p = top("value", ev(rets | roe))
    assert best == "AAA" and "AAA-ROE" in p.claims[0].evidence_ids


def test_allocation_respects_constraints_and_is_deterministic():
    values = {f"{t}-MOM200": m for t, m in (("AAA", 1.3), ("BBB", 0.8), ("CCC", 1.0), ("DDD", 0.9))}
    _, w, p = top("technical", ev(values), max_weight=0.3, min_holdings=4)
    assert sum(w.values()) == pytest.approx(1.0, abs=1e-9) and max(w.values()) <= 0.3 + 1e-9
    assert sum(v > 0 for v in w.values()) >= 4
    assert top("technical", ev(values), max_weight=0.3, min_holdings=4)[2] == p
    held = {t for t, v in w.items() if v > 0}
    assert {r.ticker for r in p.position_rationale} == held  # no orphaned position
    assert "non-LLM" in p.thesis


@pytest.fixture
def real_memo(make_pack):
    pack = load_pack(make_pack(tickers=("AAA", "BBB", "CCC", "DDD")))
    scenario = Scenario(id="s", invest_quarter="2021Q3", tickers=["AAA", "BBB", "CCC", "DDD"],
                        constraints={"max_weight": 0.5, "min_holdings": 2})
    return scenario, build_memo(scenario, pack)


def test_every_role_and_phase_passes_validation_on_a_memo(real_memo):
    scenario, memo = real_memo
    base = dict(universe=scenario.tickers, constraints=scenario.constraints, evidence=memo.items)
    rules = TurnRules(scenario.tickers, scenario.constraints, memo.evidence_ids)
    proposals = {}
    for role in ANALYSTS:
        out = respond(role, AgentTask(agent_id=role, role=role, phase="propose", **base))
        proposals[role] = validate_turn("propose", out.model_dump_json(), rules, "strict").value
    peer_claims = {a: {c.claim_id for c in p.claims} for a, p in proposals.items()}
    critiques = {}
    for role in ANALYSTS:
        peers = {a: p for a, p in proposals.items() if a != role}
        r = TurnRules(scenario.tickers, scenario.constraints, memo.evidence_ids, {a: peer_claims[a] for a in peers})
        out = respond(role, AgentTask(agent_id=role, role=role, phase="critique", own=proposals[role], peers=peers, **base))
        critiques[role] = validate_turn("critique", out.model_dump_json(), r, "strict").value
        assert {c.target_agent for c in critiques[role].critiques} == set(peers)
    finals = {}
    for role in ANALYSTS:
        received = [ReceivedCritique(from_agent=a, item=i) for a, c in critiques.items() for i in c.critiques
                    if i.target_agent == role]
        out = respond(role, AgentTask(agent_id=role, role=role, phase="revise", own=proposals[role],
                                      critiques_received=received, **base))
        rev = validate_turn("revise", out.model_dump_json(), rules, "strict").value
        assert len(rev.critique_responses) == len(received)  # every critique answered
        finals[role] = rev
    decision = respond("judge", AgentTask(agent_id="judge", role="judge", phase="judge", peers=finals, **base))
    checked = validate_turn("judge", decision.model_dump_json(), rules, "strict")
    assert sum(checked.weights.values()) == pytest.approx(1.0, abs=1e-6)


def test_unknown_rule_analyst_is_named():
    task = AgentTask(agent_id="x", role="x", phase="propose", universe=["A"], constraints=Constraints(), evidence=[])
    with pytest.raises(KeyError, match="no rule-based analyst 'astrology'"):
        respond("astrology", task)
