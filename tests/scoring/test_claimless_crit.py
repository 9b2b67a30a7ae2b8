"""CRIT and the audit on a claim-less (basic-tier) argument: read from its free text, graded without error,
and lower on evidential support than the same allocation argued in claims."""

import pytest

from madbench.debate.schemas import BasicCritiqueItem, BasicProposal, BasicRevision, Proposal
from madbench.scoring.audit import audit_turn
from madbench.scoring.crit_judge import crit_request, finish, render_crit
from madbench.scoring.rubric import load_rubric
from madbench.scoring.rules_scorer import CritTask, cited_evidence, score
from tests.scoring.test_audit import MEMO, claim, critique
from tests.scoring.test_crit import ITEMS, PROPOSAL

ALLOCATION = [{"ticker": "AAA", "weight": 0.5}, {"ticker": "BBB", "weight": 0.3}, {"ticker": "CCC", "weight": 0.2},
              {"ticker": "DDD", "weight": 0.0}]
#: Cites one memo ID and one that is not in the memo; names AAA and BBB but not CCC (20%); answers y but not z.
PLANTED = BasicRevision(thesis="AAA has fallen [AAA-RET60] and BBB is defensive [BBB-PE].", allocation=ALLOCATION,
                        risks_or_falsifiers=["VIX spikes [L1-VIX]"], confidence=0.6,
                        revision_notes="y: rebutted, AAA stays; the momentum argument ignores the drawdown.")
RECEIVED = [("y", critique("allocation")),
            ("z", BasicCritiqueItem(target_agent="me", target_claim="allocation", critique_text="cut BBB",
                                    suggested_adjustment="Cut BBB by 5 points.", objection_confidence=0.8))]


def test_audit_reads_a_claimless_argument_from_its_text():
    a = audit_turn(PLANTED, MEMO, RECEIVED)
    assert a.model_dump() == {"claims": 0, "claims_without_valid_evidence": 0, "unknown_evidence_ids": 1,
                              "unanswered_critiques": 1, "orphaned_positions": 1, "dangling_supporting_claims": 0,
                              "disconnected_claims": 0, "claimless": 1, "uncited_rationale": 0}
    bare = BasicProposal(thesis="I like AAA, BBB and CCC.", allocation=ALLOCATION, risks_or_falsifiers=["x"], confidence=0.5)
    assert audit_turn(bare, MEMO).model_dump() == {
        "claims": 0, "claims_without_valid_evidence": 0, "unknown_evidence_ids": 0, "unanswered_critiques": 0,
        "orphaned_positions": 0, "dangling_supporting_claims": 0, "disconnected_claims": 0, "claimless": 1,
        "uncited_rationale": 1}


def claimless_task(argument=PLANTED, before=None):
    return CritTask(agent_id="macro", role="macro", round=1, memo_ids=sorted(MEMO), argument=argument,
                    critiques=[{"from_agent": a, "item": i} for a, i in RECEIVED], before=before,
                    evidence=cited_evidence(argument, ITEMS))


def test_rule_scorer_grades_a_claimless_answer_and_says_why():
    answer = score(claimless_task())
    d = answer.diagnostics
    # unsupported: the missing claims (1) and the unknown BBB-PE (1); orphaned CCC; z's critique unanswered
    assert (d.unsupported_claims, d.orphaned_positions, d.ignored_critiques, d.causal_overreach) == (2, 1, 1, 0)
    s = finish(claimless_task(), answer, "rules/crit", False)
    assert s.scores.model_dump() == {"logical_validity": 0.70, "evidential_support": 0.55,
                                     "alternative_consideration": 0.70, "causal_alignment": 0.90}
    assert "no structured claims" in s.explanations.evidential_support
    assert "not detectable" in s.explanations.causal_alignment


def test_the_llm_crit_prompt_renders_a_claimless_argument_and_its_cited_values():
    t = claimless_task(before=BasicProposal(thesis="first [AAA-RET60] AAA BBB CCC", allocation=ALLOCATION,
                                            risks_or_falsifiers=["x"], confidence=0.5))
    assert [e.id for e in t.evidence] == ["AAA-RET60", "L1-VIX"]  # bracketed IDs in its text, in order, if in the memo
    system, user = render_crit(t)
    assert "without structured claims" in system and '"revision_notes"' in user and "z on allocation: cut BBB" in user
    assert "[AAA-RET60] 60D Return: -23.25 percent" in user
    request = crit_request(t, load_rubric("uniform"), "openai/gpt-4o-mini")
    assert request.context["argument"]["thesis"].startswith("AAA has fallen")
    again = CritTask.from_stored("macro", "macro", 1, sorted(MEMO), t.stored())  # a rescore reads it back whole
    assert again == t and isinstance(again.argument, BasicRevision) and isinstance(again.before, BasicProposal)


def test_the_tier_effect_is_visible_in_the_rule_based_crit():
    """The same allocation argued in claims (causal tier) and in free text (basic tier), both clean."""
    argued = Proposal(thesis="t", allocation=PROPOSAL.allocation,
                      claims=[claim("C1", ["AAA-VOL60"], ["AAA"]), claim("C2", ["BBB-BETA"], ["BBB"])],
                      position_rationale=[{"ticker": "AAA", "supporting_claims": ["C1"]},
                                          {"ticker": "BBB", "supporting_claims": ["C2"]}])
    free = BasicProposal(thesis="AAA: volatility is falling [AAA-VOL60]; BBB: low beta [BBB-BETA].",
                         allocation=PROPOSAL.allocation, risks_or_falsifiers=["x"], confidence=0.6)
    rho = {name: finish(t, score(t), "rules/crit", False).rho
           for name, t in (("causal", CritTask(agent_id="technical", role="technical", round=1, memo_ids=sorted(MEMO),
                                               argument=argued)),
                           ("basic", CritTask(agent_id="technical", role="technical", round=1, memo_ids=sorted(MEMO),
                                              argument=free)))}
    assert rho["causal"] == pytest.approx(0.90) and rho["basic"] == pytest.approx((0.90 * 3 + 0.70) / 4)
