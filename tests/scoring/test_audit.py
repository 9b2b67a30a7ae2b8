"""The deterministic audit finds exactly the failures planted in a handcrafted turn."""

from madbench.debate.schemas import CritiqueItem, Revision
from madbench.scoring.audit import audit_turn

MEMO = {"AAA-RET60", "AAA-VOL60", "BBB-BETA", "L1-VIX"}


def claim(cid, ids, impacts, reasoning="observational"):
    return {"claim_id": cid, "claim_text": f"claim {cid}", "claim_type": "thesis", "reasoning_type": reasoning,
            "evidence_ids": ids, "impacts_positions": impacts, "confidence": 0.6}


def critique(target):
    return CritiqueItem(target_agent="me", target_claim=target, critique_text="x", evidence_ids=[], portfolio_implication="x",
                        suggested_adjustment="x", falsifier="x", objection_confidence=0.5)


PLANTED = Revision(
    thesis="t",
    allocation=[{"ticker": "AAA", "weight": 0.5}, {"ticker": "BBB", "weight": 0.3}, {"ticker": "CCC", "weight": 0.2},
                {"ticker": "DDD", "weight": 0.0}],
    claims=[
        claim("C1", ["AAA-RET60"], ["AAA"]),                      # fine
        claim("C2", ["AAA-PE", "AAA-FAKE"], ["AAA"]),             # no valid evidence; 2 unknown IDs
        claim("C3", [], ["BBB"]),                                 # no evidence at all
        claim("C4", ["BBB-BETA", "BBB-GHOST"], ["DDD"]),          # 1 unknown ID; impacts only a zero weight
    ],
    position_rationale=[
        {"ticker": "AAA", "supporting_claims": ["C1", "C9"]},      # C9 dangling
        {"ticker": "BBB", "supporting_claims": ["C7"]},            # only a dangling reference: BBB (30%) orphaned
    ],                                                             # CCC (20%) has no rationale: orphaned
    critique_responses=[{"from_agent": "x", "target_claim": "C1", "disposition": "rebut", "justification": "j"}],
    revision_notes="n",
)


def test_audit_counts_match_the_planted_failures():
    received = [("x", critique("C1")), ("y", critique("C2")), ("y", critique("C3"))]  # C2, C3 from y unanswered
    a = audit_turn(PLANTED, MEMO, received)
    assert a.model_dump() == {"claims": 4, "claims_without_valid_evidence": 2, "unknown_evidence_ids": 3,
                              "unanswered_critiques": 2, "orphaned_positions": 2, "dangling_supporting_claims": 2,
                              "disconnected_claims": 1, "claimless": 0, "uncited_rationale": 0}
    assert a.total == 12


def test_clean_turn_has_no_failures():
    clean = Revision.model_validate({**PLANTED.model_dump(), "claims": [PLANTED.claims[0].model_dump()],
                                     "allocation": [{"ticker": "AAA", "weight": 1.0}],
                                     "position_rationale": [{"ticker": "AAA", "supporting_claims": ["C1"]}]})
    assert audit_turn(clean, MEMO, [("x", critique("C1"))]).total == 0
