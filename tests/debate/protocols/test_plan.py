"""A protocol's call plan (``plan(...)`` beside ``run``) against what its run calls: run each protocol offline on
the rule-based answers and compare the calls recorded per kind with the plan's, when no intervention fires."""

import asyncio
from collections import Counter

import pytest

from madbench.debate.config import InterventionConfig
from madbench.debate.protocols import protocol_plan
from madbench.debate.protocols.staged import SLICES, slice_of
from madbench.debate.trace import read_trace
from madbench.runner.estimate import kind_of
from madbench.runner.pipeline import run_debate
from madbench.runner.wiring import build_gateway
from tests.debate.test_engine import config, world  # noqa: F401  (fixture)

CONFIGS = {
    "single-causal.yaml": {}, "causal-debate-3.yaml": {}, "paper-debate3-causal-rca.yaml": {}, "a10.yaml": {},
    "enriched-debate-3x2.yaml": {}, "adversarial.yaml": {}, "desks.yaml": {}, "tradingagents.yaml": {},
    "self-consistency-macro.yaml": {"options": {"samples": 3, "combine": "mean"}},
}


def run_offline(world, tmp_path, name):  # noqa: F811
    pack, scenario = world
    cfg = config(name, **CONFIGS[name])
    result = asyncio.run(run_debate(scenario, pack, cfg, build_gateway(), tmp_path))
    assert result.status == "ok", result.error
    events = read_trace(tmp_path / result.run_id / "trace.jsonl").events
    memo = next(e for e in events if e["event"] == "memo")
    desks = tuple(d for d in SLICES if d in {slice_of(i) for i in memo["ids"]})  # a desk without evidence calls nothing
    return cfg, result, events, protocol_plan(cfg, desks)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_the_calls_a_run_records_per_kind_are_its_protocols_plan(world, tmp_path, name):  # noqa: F811
    cfg, result, events, plan = run_offline(world, tmp_path, name)
    assert not [e for e in events if e["event"] == "intervention"]  # nothing fired: the plan's count is exact
    calls = Counter(kind_of(e["phase"], e["label"]) for e in events if e["event"] == "llm_call")
    assert calls == Counter(plan.calls_by_kind(rounds=result.rounds_run)) and sum(calls.values()) > 0


@pytest.mark.parametrize("name", ["adversarial.yaml", "desks.yaml", "tradingagents.yaml"])
def test_a_staged_protocol_asks_its_stages_in_the_plans_order(world, tmp_path, name):  # noqa: F811
    _, _, events, plan = run_offline(world, tmp_path, name)
    asked = [kind_of(e["phase"], e["label"]) for e in events if e["event"] == "llm_call"]
    in_order = [k for i, k in enumerate(asked) if i == 0 or asked[i - 1] != k]
    planned = [s.calls[0].kind for s in plan.steps if s.calls]
    assert in_order == [k for i, k in enumerate(planned) if i == 0 or planned[i - 1] != k]


def test_a_plan_names_its_interventions_and_the_rates_they_fire_at():
    interventions = [InterventionConfig(name="js_collapse", max_retries=2), InterventionConfig(name="crit_causal"),
                     InterventionConfig(name="rca", max_retries=3)]
    cfg = config("causal-debate-3.yaml", interventions=interventions)
    plan = protocol_plan(cfg)
    revise = next(s for s in plan.steps if s.name == "revise")
    assert revise.each_round and all(c.check.call.kind == "rca" and c.check.retry.variant == "nudged"
                                     and c.check.firing.max_retries == 3 for c in revise.calls)
    fired = {s.name: (s.when.rate, s.when.again, s.when.max_retries, s.sequential) for s in plan.steps if s.when}
    assert fired == {"js_collapse": ("js_fire", "js_refire", 2, False), "crit_causal": ("cc_fire", "cc_refire", 1, True)}
    one_agent = protocol_plan(cfg.model_copy(update={"agents": cfg.agents[:1]}))
    assert "js_collapse" not in {s.name for s in one_agent.steps}  # divergence needs two agents
    unscored = protocol_plan(cfg.model_copy(update={"score_rounds": False}))
    assert {s.name for s in unscored.steps} == {"propose", "critique", "revise", "js_collapse", "judge"} & {
        s.name for s in plan.steps}  # no CRIT, so no CRIT-causal
