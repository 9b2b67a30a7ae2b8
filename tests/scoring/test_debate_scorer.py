"""``DebateScorer`` in a running debate: CRIT sees what each revision revised and the values of the evidence it cites."""

import asyncio

from madbench.data.memo import build_memo
from madbench.debate.config import InterventionConfig
from madbench.debate.control import PIDConfig
from madbench.debate.schemas import Proposal, Revision
from madbench.runner.pipeline import run_debate
from madbench.runner.wiring import build_gateway
from madbench.scoring.crit_judge import crit_request
from madbench.scoring.rubric import load_rubric
from madbench.scoring.rules_scorer import CritTask, cited_evidence
from tests.debate.test_engine import config, events, world  # noqa: F401  (fixture)


def test_crit_tasks_carry_the_proposal_then_the_previous_revision_and_the_cited_values(world, tmp_path):  # noqa: F811
    pack, scenario = world
    # the 3-agent, 2-round debate with CRIT-causal alone; rule-based P4 is 0.90, so a 0.95 threshold fires for all
    cfg = config(aggregation="mean", pid=PIDConfig(), interventions=[InterventionConfig(name="crit_causal", p4_threshold=0.95)])
    result = asyncio.run(run_debate(scenario, pack, cfg, build_gateway(), tmp_path))
    assert result.status == "ok" and result.rounds_run == 2
    run_dir = tmp_path / result.run_id
    memo = build_memo(scenario, pack)
    turns = events(run_dir, "turn")
    proposals = {e["agent"]: e["output"] for e in turns if e["phase"] == "propose"}
    crits = events(run_dir, "crit")
    assert {(e["round"], e["label"]) for e in crits} == {(1, "crit"), (1, "crit:retry1"), (2, "crit"), (2, "crit:retry1")}
    for e in crits:
        task = CritTask.from_stored(e["agent"], e["role"], e["round"], sorted(memo.evidence_ids), e["task"])
        # what the revision revised: the proposal in round 1, the round's input (the last round-1 revision) in round 2
        if e["round"] == 1:
            assert e["task"]["before"] == proposals[e["agent"]] and type(task.before) is Proposal
        else:
            last = [t for t in turns if t["phase"] == "revise" and t["round"] == 1 and t["agent"] == e["agent"]][-1]
            assert e["task"]["before"] == last["output"] and isinstance(task.before, Revision)
        assert task.evidence and task.evidence == cited_evidence(task.argument, memo.items)
        user = crit_request(task, load_rubric("uniform"), "m").messages[1].content
        assert task.before.model_dump_json(indent=1) in user
        shown = next(i for i in memo.items if i.id == task.evidence[0].id)
        assert f"[{shown.id}] {shown.label}: " in user


def test_a_proposal_graded_alone_has_no_before(world, tmp_path):  # noqa: F811
    """Round 0 (scored proposals without a debate): nothing was revised, the evidence values are still shown."""
    pack, scenario = world
    result = asyncio.run(run_debate(scenario, pack, config("single-causal.yaml", score_rounds=True), build_gateway(), tmp_path))
    crits = events(tmp_path / result.run_id, "crit")
    assert result.status == "ok" and crits and all(e["round"] == 0 and e["task"]["before"] is None for e in crits)
    assert all(e["task"]["evidence"] for e in crits)
