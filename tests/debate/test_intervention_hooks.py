"""Interventions as hooks: the registry's dispatch and the paper protocol's hook points."""

import asyncio
from types import SimpleNamespace

import pytest
from pydantic import BaseModel, ConfigDict

from madbench.data.errors import InputError
from madbench.debate.config import InterventionConfig
from madbench.debate.control import PIDConfig
from madbench.debate.interventions import INTERVENTIONS, configured, crit_causal, hooks_at, js_collapse, rca
from madbench.debate.interventions.hooks import HOOKS
from madbench.runner.pipeline import run_debate
from madbench.runner.wiring import build_gateway
from tests.debate.test_engine import config, events, world  # noqa: F401  (fixture)


def test_each_registered_intervention_implements_known_hooks_only():
    implemented = {name: [h for h in HOOKS if hasattr(m, h)] for name, m in INTERVENTIONS.items()}
    assert implemented == {"js_collapse": ["after_revise_round"], "crit_causal": ["after_crit"], "rca": ["after_revision"]}
    for m in INTERVENTIONS.values():
        assert {n for n in vars(m) if n.startswith(("after_", "before_"))} <= set(HOOKS)


class ProbeParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tag: str = ""


def probe(log: list, name: str, redo_agent: str | None = None):
    """A fake intervention implementing every hook; it logs each call as (name, hook, details).

    With ``redo_agent``, its ``after_revision`` asks that agent's first revision again with a nudge."""
    redone = {}

    async def after_revision(debate, p, request, out):
        log.append((name, "after_revision", request.round, request.agent.agent_id, request.label))
        if request.agent.agent_id == redo_agent and request.label == "revise" and request.round == 1:
            again = request.with_nudge(f"probe {p.tag}", "revise:probe")
            assert again.task.nudges == [*request.task.nudges, f"probe {p.tag}"] == again.variables["nudges"]
            out = redone["out"] = await debate.ask_revision(again)
        return out

    async def after_revise_round(debate, p, round_):
        log.append((name, "after_revise_round", round_, sorted(debate.revisions), p.tag))
        if redo_agent and round_ == 1:
            log.append((name, "redo kept", round_, debate.revisions[redo_agent] is redone["out"]))

    async def after_crit(debate, p, round_, scores):
        log.append((name, "after_crit", round_, sorted(scores), p.tag))

    return SimpleNamespace(Params=ProbeParams, after_revision=after_revision,
                           after_revise_round=after_revise_round, after_crit=after_crit)


def test_hooks_at_follows_config_order_and_skips_interventions_without_the_hook(monkeypatch):
    monkeypatch.setitem(INTERVENTIONS, "probe", probe([], "probe"))
    active = configured([InterventionConfig(name="crit_causal"), InterventionConfig(name="probe", tag="x"),
                         InterventionConfig(name="rca")])
    assert [n for n, _ in active] == ["crit_causal", "probe", "rca"] and active[1][1] == ProbeParams(tag="x")
    assert [h for h, _ in hooks_at("after_revision", active)] == [INTERVENTIONS["probe"].after_revision, rca.after_revision]
    assert [h for h, _ in hooks_at("after_crit", active)] == [crit_causal.after_crit, INTERVENTIONS["probe"].after_crit]
    assert hooks_at("after_revise_round", active[:1]) == []
    assert js_collapse.after_revise_round not in [h for h, _ in hooks_at("after_revise_round", active)]
    with pytest.raises(ValueError, match="unknown hook point"):
        hooks_at("before_judge", active)


def test_a_name_given_twice_counts_once_with_its_last_parameters(monkeypatch):
    monkeypatch.setitem(INTERVENTIONS, "probe", probe([], "probe"))
    active = configured([InterventionConfig(name="probe", tag="a"), InterventionConfig(name="rca"),
                         InterventionConfig(name="probe", tag="b")])
    assert active == [("probe", ProbeParams(tag="b")), ("rca", rca.Params())]


def test_configured_hooks_run_at_their_points_in_config_order_and_unconfigured_ones_never(world, tmp_path, monkeypatch):  # noqa: F811
    pack, scenario = world
    log: list = []
    monkeypatch.setitem(INTERVENTIONS, "probe_a", probe(log, "a", redo_agent="value"))
    monkeypatch.setitem(INTERVENTIONS, "probe_b", probe(log, "b"))
    monkeypatch.setitem(INTERVENTIONS, "probe_unused", probe(log, "unused"))
    cfg = config(pid=PIDConfig(), interventions=[InterventionConfig(name="probe_b", tag="B"),
                                                              InterventionConfig(name="probe_a", tag="A")])
    result = asyncio.run(run_debate(scenario, pack, cfg, build_gateway(), tmp_path))
    assert result.status == "ok", result.error
    assert not [e for e in log if e[0] == "unused"]
    agents = ["macro", "value", "technical"]
    for t in (1, 2):
        calls = [e for e in log if e[2] == t]
        revisions = [e for e in calls if e[1] == "after_revision"]
        # every agent's revise turn goes through each configured intervention in config order: b, then a
        for a in agents:
            assert [e[0] for e in revisions if e[3] == a and e[4] == "revise"] == ["b", "a"]
        rest = [e for e in calls if e[1] not in ("after_revision", "redo kept")]
        assert rest == [("b", "after_revise_round", t, sorted(agents), "B"), ("a", "after_revise_round", t, sorted(agents), "A"),
                        ("b", "after_crit", t, sorted(agents), "B"), ("a", "after_crit", t, sorted(agents), "A")]
        assert calls.index(rest[0]) > max(calls.index(e) for e in revisions)  # the round's hook after all its revisions
    redo = [e for e in events(tmp_path / result.run_id, "turn") if e["label"] == "revise:probe"]
    assert len(redo) == 1 and redo[0]["agent"] == "value" and redo[0]["round"] == 1
    assert ("a", "redo kept", 1, True) in log  # the hook's re-asked revision is the round's revision


def test_rca_on_proposals_is_rejected_not_ignored():
    with pytest.raises(InputError, match="RCA checks revise turns only"):
        configured([InterventionConfig(name="rca", phases=["propose"])])