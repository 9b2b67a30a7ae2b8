"""CRIT caps, ρ, rubrics, the rule-based scorer, and one prompt for every model."""

import gzip
import json
from pathlib import Path

import pytest

from madbench.data.memo import EvidenceItem
from madbench.debate.grading import CritDiagnostics, PillarScores
from madbench.debate.schemas import Proposal, Revision
from madbench.gateway.providers.litellm_provider import merged_messages
from madbench.scoring.crit import apply_caps, cap_for, rho
from madbench.scoring.crit_judge import crit_request, finish
from madbench.scoring.rubric import load_rubric
from madbench.scoring.rules_scorer import CritTask, cited_evidence, score
from tests.scoring.test_audit import MEMO, PLANTED, claim, critique

SNAPSHOT = Path(__file__).parent / "snapshots" / "crit_prompt.txt"
TRACES = Path(__file__).resolve().parents[1] / "debate" / "data"


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


ITEMS = [EvidenceItem(id="AAA-RET60", label="60D Return", value=-23.25, unit="percent", as_of="2022-03-31", source="prices"),
         EvidenceItem(id="AAA-VOL60", label="60D Vol (ann)", value=41.1, unit="percent", as_of="2022-03-31", source="prices"),
         EvidenceItem(id="BBB-BETA", label="1Y Beta", value=1.2666667, unit="", as_of="2022-03-31", source="prices"),
         EvidenceItem(id="L1-VIX", label="VIX", value=None, unit="index", as_of=None, source="fred", note="n/a")]
#: What PLANTED revised: its proposal (a different thesis and allocation, no critique responses).
PROPOSAL = Proposal(thesis="the proposal's thesis", allocation=[{"ticker": "AAA", "weight": 0.7}, {"ticker": "BBB", "weight": 0.3}],
                    claims=[claim("C1", ["AAA-VOL60"], ["AAA"])], position_rationale=[{"ticker": "AAA", "supporting_claims": ["C1"]}])


def task(role="technical", before=PROPOSAL):
    return CritTask(agent_id=role, role=role, round=1, memo_ids=sorted(MEMO), argument=PLANTED,
                    critiques=[{"from_agent": "x", "item": critique("C1")}], before=before,
                    evidence=cited_evidence(PLANTED, ITEMS))


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


def test_crit_request_shows_the_proposal_beside_the_revision_and_the_cited_evidence_values():
    """As the paper's CRIT judge (App. B.15): what the revision revised, the critiques, the revision, the evidence text."""
    user = crit_request(task(), load_rubric("uniform"), "m").messages[1].content
    proposal_at = user.index("--- What the agent revised: its proposal (context only; do not grade it) ---")
    revised_at = user.index("--- The agent's revised argument (grade this) ---")
    evidence_at = user.index("--- Memo values of the evidence the argument cites ---")
    assert proposal_at < user.index('"thesis": "the proposal\'s thesis"') < revised_at < user.index('"thesis": "t"') < evidence_at
    # the cited IDs in the memo, first citation first, with label, value, unit and as-of date; unknown IDs have no value
    lines = user[evidence_at:].splitlines()[1:3]
    assert lines == ["[AAA-RET60] 60D Return: -23.25 percent (as of 2022-03-31)", "[BBB-BETA] 1Y Beta: 1.26667 (as of 2022-03-31)"]
    assert "AAA-FAKE]" not in user[evidence_at:] and "AAA-VOL60] 60D Vol" not in user  # cited by the proposal only


def test_crit_request_names_a_previous_revision_and_grades_a_lone_proposal_without_one():
    before = PLANTED.model_copy(update={"thesis": "round one's revision"})
    user = crit_request(task(before=before), load_rubric("uniform"), "m").messages[1].content
    assert "--- What the agent revised: its revision from the previous round" in user and "round one's revision" in user
    alone = crit_request(task(before=None), load_rubric("uniform"), "m").messages[1].content
    assert "What the agent revised" not in alone and "--- The agent's argument (grade this) ---" in alone


def test_cited_evidence_follows_the_claims_and_their_inline_references():
    turn = Proposal.model_validate({**PROPOSAL.model_dump(), "claims": [
        {**claim("C1", ["[BBB-BETA]", "GONE-X"], ["AAA"]), "claim_text": "beta [BBB-BETA] and vol [AAA-VOL60] and [L1-VIX]"},
        claim("C2", ["AAA-RET60", "BBB-BETA"], ["BBB"])]})
    got = cited_evidence(turn, ITEMS)
    assert [e.id for e in got] == ["BBB-BETA", "AAA-VOL60", "L1-VIX", "AAA-RET60"]
    assert got[2].model_dump() == {"id": "L1-VIX", "label": "VIX", "value": None, "unit": "index", "as_of": None}
    assert "[L1-VIX] VIX: n/a index (as of n/a)" in crit_request(
        task().model_copy(update={"evidence": got}), load_rubric("uniform"), "m").messages[1].content


def test_a_task_stored_in_a_trace_comes_back_whole():
    t = task()
    stored = t.stored()
    assert set(stored) == {"argument", "critiques", "before", "evidence"}
    back = CritTask.from_stored(t.agent_id, t.role, t.round, t.memo_ids, stored)
    assert back == t and isinstance(back.argument, Revision) and type(back.before) is Proposal


@pytest.mark.parametrize("name", ["a7", "causal-debate-3-rca"])
def test_crit_tasks_of_v0_1_traces_still_validate_render_and_score(name):
    """Traces written before ``before`` and ``evidence`` were stored: their crit tasks still re-score."""
    with gzip.open(TRACES / f"trace-v0.1-{name}.jsonl.gz", "rt") as f:
        lines = [json.loads(x) for x in f]
    memo_ids = next(e for e in lines if e["event"] == "memo")["ids"]
    crits = [e for e in lines if e["event"] == "crit"]
    assert crits and all(set(e["task"]) == {"argument", "critiques"} for e in crits)
    for e in crits:
        t = CritTask.from_stored(e["agent"], e["role"], e["round"], memo_ids, e["task"])
        assert t.before is None and t.evidence == []
        user = crit_request(t, load_rubric("uniform"), "m").messages[1].content
        assert "--- The agent's argument (grade this) ---" in user
        assert finish(t, score(t), "rules/crit", False).agent_id == e["agent"]
