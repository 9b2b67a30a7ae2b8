"""CRIT caps, ρ, rubrics, the rule-based scorer, and one prompt for every model."""

from pathlib import Path

import pytest

from debate.grading import CritDiagnostics, PillarScores
from madbench_gateway.providers.litellm_provider import merged_messages
from scoring.crit import apply_caps, cap_for, rho
from scoring.crit_judge import crit_request, finish
from scoring.rubric import load_rubric
from scoring.rules_scorer import CritTask, score
from tests.scoring.test_audit import MEMO, PLANTED, critique

SNAPSHOT = Path(__file__).parent / "snapshots" / "crit_prompt.txt"


def diag(**kw):
    base = dict(contradictions=0, unsupported_claims=0, ignored_critiques=0, causal_overreach=0, orphaned_positions=0,
                premature_certainty=False, conclusion_drift=False)
    return CritDiagnostics(**(base | kw))


def test_cap_schedule():
    assert [cap_for(n) for n in (0, 1, 2, 3, 4, 9)] == [1.0, 0.70, 0.55, 0.55, 0.40, 0.40]


def test_inconsistent_llm_score_is_clipped_and_recorded():
    raw = PillarScores(logical_validity=0.95, evidential_support=0.9, alternative_consideration=0.6, causal_alignment=0.9)
    capped, clips = apply_caps(raw, diag(unsupported_claims=2, ignored_critiques=1, causal_overreach=5))
    assert capped.logical_validity == 0.95 and capped.evidential_support == 0.55
    assert capped.alternative_consideration == 0.6  # already under its 0.70 cap: untouched
    assert capped.causal_alignment == 0.40
    assert clips == ["evidential_support 0.90 clipped to 0.55 (2 failure(s))", "causal_alignment 0.90 clipped to 0.40 (5 failure(s))"]
    assert rho(capped) == pytest.approx((0.95 + 0.55 + 0.6 + 0.40) / 4)


def task(role="technical"):
    return CritTask(agent_id=role, role=role, round=1, memo_ids=sorted(MEMO), argument=PLANTED,
                    critiques=[{"from_agent": "x", "item": critique("C1")}])


def test_rule_scorer_derives_caps_from_the_audit():
    answer = score(task())
    assert answer.diagnostics.unsupported_claims == 5 and answer.diagnostics.orphaned_positions == 2
    s = finish(task(), answer, "rules/crit", False)
    assert s.scores.evidential_support == 0.40 and not s.is_llm and s.clips == []


def test_role_aware_rubric_changes_definition_and_weight():
    uniform, aware = load_rubric("uniform"), load_rubric("role-aware")
    scores = PillarScores(logical_validity=1.0, evidential_support=1.0, alternative_consideration=1.0, causal_alignment=0.0)
    assert uniform.rho("macro", scores) == pytest.approx(0.75)
    assert aware.rho("macro", scores) == pytest.approx(3 / 5)  # P4 weighs double for macro
    _, user = crit_request(task("technical"), aware, "m").messages
    assert "statistical grounding" in user.content and "causal alignment" not in user.content
    assert "causal alignment" in crit_request(task("macro"), aware, "m").messages[1].content


def test_crit_prompt_is_the_same_for_the_local_model_and_a_real_provider():
    local = crit_request(task(), load_rubric("uniform"), "local/gemma3-270m")
    hosted = crit_request(task(), load_rubric("uniform"), "openai/gpt-4o-mini")
    assert local.messages == hosted.messages and local.response_schema == hosted.response_schema
    rendered = "\n--- system ---\n".join([local.messages[1].content, local.messages[0].content])
    assert rendered == SNAPSHOT.read_text(), "CRIT prompt changed: review it, then update tests/scoring/snapshots/crit_prompt.txt"
    # the local transport folds the system text into the user turn without changing it
    merged = merged_messages(local)
    assert merged == [{"role": "user", "content": local.messages[0].content + "\n\n" + local.messages[1].content}]
