"""Domain validation of turns: universe, completeness, bounds, sum, holdings, evidence; the normalize policy."""

import dataclasses
import json

import pytest

from madbench.data.scenario import Constraints
from madbench.debate.request_schemas import request_schema
from madbench.debate.schemas import Holding, Proposal
from madbench.debate.validation import TurnRules, cap_weights, check_allocation, parse_json, validate_turn
from madbench.gateway.errors import OutputInvalid

RULES = TurnRules(["AAA", "BBB", "CCC"], Constraints(max_weight=0.5, min_holdings=2), {"AAA-RET60", "L1-VIX"})


def holdings(**w):
    return [Holding(ticker=t, weight=v) for t, v in w.items()]


@pytest.mark.parametrize("w,message", [
    (dict(AAA=0.5, BBB=0.3, JNJ=0.2), "outside the universe: JNJ"),
    (dict(AAA=0.5, BBB=0.5), "missing: CCC"),
    (dict(AAA=0.6, BBB=0.2, CCC=0.2), "above max_weight 0.5: AAA=0.600"),
    (dict(AAA=0.5, BBB=0.3, CCC=0.3), "sum to 1.1000"),
    (dict(AAA=0.0, BBB=0.0, CCC=1.0), "above max_weight"),
])
def test_strict_policy_rejects_with_a_message_for_the_model(w, message):
    with pytest.raises(OutputInvalid, match=message):
        check_allocation(holdings(**w), 0.0, RULES, "strict")


def test_min_holdings_checked():
    rules = TurnRules(["AAA", "BBB", "CCC"], Constraints(max_weight=1.0, min_holdings=2), set())
    with pytest.raises(OutputInvalid, match="at least 2 tickers"):
        check_allocation(holdings(AAA=1.0, BBB=0.0, CCC=0.0), 0.0, rules, "strict")


def test_normalize_policy_repairs_and_says_so():
    w, cash, notes = check_allocation(holdings(AAA=50, BBB=30), 0.0, RULES, "normalize")
    assert w["CCC"] == 0 and sum(w.values()) == pytest.approx(1.0) and max(w.values()) <= 0.5 + 1e-9
    assert any("missing tickers" in n for n in notes) and any("rescaled" in n for n in notes) and any("capped" in n for n in notes)
    with pytest.raises(OutputInvalid, match="outside the universe"):  # normalize never invents a universe
        check_allocation(holdings(AAA=1, JNJ=1, BBB=1, CCC=1), 0.0, RULES, "normalize")


def test_cap_weights_water_fills():
    w = cap_weights({"A": 0.7, "B": 0.2, "C": 0.1}, 0.4)
    assert w["A"] == pytest.approx(0.4) and sum(w.values()) == pytest.approx(1.0) and max(w.values()) <= 0.4 + 1e-12
    assert w["B"] / w["C"] == pytest.approx(2.0) or w["B"] == pytest.approx(0.4)


def test_unknown_evidence_and_bad_json_are_rejected():
    proposal = Proposal(thesis="t", allocation=holdings(AAA=0.5, BBB=0.5, CCC=0.0), claims=[{
        "claim_id": "C1", "claim_text": "x", "claim_type": "thesis", "reasoning_type": "causal",
        "evidence_ids": ["[AAA-RET60]", "AAA-PE"], "impacts_positions": ["AAA"], "confidence": 0.5}],
        position_rationale=[])
    with pytest.raises(OutputInvalid, match="not in the memo: AAA-PE"):
        validate_turn("propose", proposal.model_dump_json(), RULES, "strict")
    with pytest.raises(OutputInvalid, match="not valid JSON"):
        parse_json("{oops", Proposal)
    with pytest.raises(OutputInvalid, match="Proposal schema: claims"):
        parse_json('{"thesis": "t", "allocation": [], "claims": [], "position_rationale": []}', Proposal)


def test_request_schema_enumerates_the_universe():
    schema = request_schema("propose", RULES)
    assert schema["$defs"]["Holding"]["properties"]["ticker"]["enum"] == ["AAA", "BBB", "CCC"]


def test_normalize_spreads_the_excess_over_idle_names_when_the_held_ones_cannot_carry_the_cap():
    from madbench.data.scenario import Constraints
    from madbench.debate.schemas import Holding
    from madbench.debate.validation import OutputInvalid, TurnRules, check_allocation
    rules = TurnRules(["MS", "T", "XOM"], Constraints(max_weight=0.4), set())
    book = [Holding(ticker="MS", weight=1.0), Holding(ticker="T", weight=0.0), Holding(ticker="XOM", weight=0.0)]
    weights, cash, notes = check_allocation(book, 0.0, rules, "normalize")
    assert weights["MS"] == pytest.approx(0.4) and weights["T"] == pytest.approx(0.3) and weights["XOM"] == pytest.approx(0.3)
    assert sum(weights.values()) == pytest.approx(1.0, abs=1e-12) and "cannot carry max_weight" in notes[0]
    with pytest.raises(OutputInvalid, match="above max_weight"):
        check_allocation(book, 0.0, rules, "strict")  # real providers' policy: never repaired


def test_request_schema_names_the_valid_critique_targets_and_the_owed_responses():
    import dataclasses
    critique = request_schema("critique", dataclasses.replace(RULES, peer_claims={"value": {"C2", "C10"}, "risk": {"C1"}}))
    alternatives = critique["properties"]["critiques"]["items"]["anyOf"]
    assert [(a["properties"]["target_agent"]["const"], a["properties"]["target_claim"]["enum"]) for a in alternatives] == [
        ("risk", ["C1"]), ("value", ["C2", "C10"])]
    assert alternatives[0]["properties"]["evidence_ids"]["maxItems"] == 3  # the bounds reach every alternative
    revise = request_schema("revise", dataclasses.replace(RULES, owed_responses=[("risk", "C1"), ("value", "C2"), ("risk", "C1")]))
    owed = revise["properties"]["critique_responses"]
    assert "minItems" not in owed and [(a["properties"]["from_agent"]["const"], a["properties"]["target_claim"]["const"])
                                      for a in owed["items"]["anyOf"]] == [("risk", "C1"), ("value", "C2")]
    none_owed = request_schema("revise", dataclasses.replace(RULES, owed_responses=[]))["properties"]["critique_responses"]
    assert none_owed["maxItems"] == 0
    # an ignored critique is not a schema error: CRIT's P3 and the RCA judge measure it
    from madbench.debate.schemas import Revision
    validate_turn("revise", Revision(thesis="t", allocation=holdings(AAA=0.5, BBB=0.5, CCC=0.0), claims=[{
        "claim_id": "C1", "claim_text": "x", "claim_type": "thesis", "reasoning_type": "causal", "evidence_ids": [],
        "impacts_positions": ["AAA"], "confidence": 0.5}], position_rationale=[], critique_responses=[],
        revision_notes="n").model_dump_json(), dataclasses.replace(RULES, owed_responses=[("risk", "C1")]), "strict")


def test_a_turn_repaired_by_normalize_carries_the_cash_it_was_repaired_to():
    """The cash a turn records (and the protocols aggregate) is the checked one: an answer holding cash in a fully
    invested scenario, kept under ``normalize``, holds none, so its weights and cash sum to 1 (the answer's own cash
    made an agent's backtest refuse weights summing to 0.67)."""
    shrunk = {"thesis": "t", "cash_weight": 1 / 3, "risks_or_falsifiers": ["r"], "confidence": 0.5,
              "allocation": [{"ticker": t, "weight": w * 2 / 3} for t, w in (("AAA", 0.4), ("BBB", 0.3), ("CCC", 0.3))]}
    v = validate_turn("propose", json.dumps(shrunk), dataclasses.replace(RULES, tier="basic"), "normalize")
    assert v.cash == 0.0 and v.cash_weight == 0.0
    assert sum(v.held_weights.values()) + v.cash_weight == pytest.approx(1.0)
    assert any("dropped cash_weight" in n for n in v.notes)
    with pytest.raises(OutputInvalid, match="cash_weight must be 0"):
        validate_turn("propose", json.dumps(shrunk), dataclasses.replace(RULES, tier="basic"), "strict")
