"""Debate configs: ready configs load, bad ones are rejected before any call with file and field named."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from madbench.data.errors import InputError
from madbench.debate.config_file import load_debate_config

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "debate"
BASE = {"name": "t", "agents": [{"role": "macro", "tier": "causal"}, {"role": "value", "tier": "causal"}], "rounds": 1}


def test_every_ready_config_loads():
    names = {p.stem for p in CONFIGS.glob("*.yaml")}
    assert {"causal-debate-3", "single-basic", "single-causal", "single-enriched", "mean3-basic", "mean3-causal",
            "mean3-enriched", "paper-debate3-causal", "paper-debate3-causal-rca", "enriched-debate-3x2",
            "enriched-debate-4x5", "a7", "a7-control", "a8", "a8-control", "a10", "a10-control", "provider-mix-role",
            "provider-mix-phase"} <= names
    for p in CONFIGS.glob("*.yaml"):
        load_debate_config(p)
    cd3 = load_debate_config(CONFIGS / "causal-debate-3.yaml")
    assert [a.role for a in cd3.agents] == ["macro", "value", "technical"] and cd3.rounds == 2
    assert {a.tier for a in cd3.agents} == {"causal"} and cd3.interventions[0].name == "js_collapse"


@pytest.mark.parametrize("change,message", [
    ({"agents": [{"role": "astrologer"}]}, "agents[0]: unknown role 'astrologer'"),
    ({"agents": [{"role": "macro", "tier": "deluxe"}]}, "agents[0].tier: Input should be 'basic', 'causal' or 'enriched'"),
    ({"protocol": "parliament"}, "protocol: unknown protocol 'parliament'"),
    ({"interventions": [{"name": "vibes"}]}, "interventions[0].name: unknown intervention 'vibes'"),
    ({"interventions": [{"name": "js_collapse", "treshold": 0.8}]}, "treshold: unknown key"),
    ({"interventions": [{"name": "rca", "phases": ["propose"]}]},
     "interventions[0]: phases: ['propose'] is not supported: RCA checks revise turns only"),
    ({"interventions": [{"name": "js_collapse"}, {"name": "rca"}, {"name": "js_collapse", "threshold": 0.7}]},
     "interventions[2].name: 'js_collapse' is listed twice (also interventions[0]) "
     "(fix: list each intervention once, with all its parameters in that one entry)"),
    ({"roundz": 2}, "roundz: unknown key"),
    ({"pid": {"kp": 1, "rho_star": 0.9}}, "pid.rho_star: unknown key"),
    ({"models": {"default": "premium"}}, "neither a tier"),
])
def test_bad_configs_name_file_and_field(tmp_path, change, message):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({**BASE, **change}))
    with pytest.raises(InputError) as err:
        load_debate_config(path)
    assert str(path) in str(err.value) and message in str(err.value)


def test_bad_config_stops_the_cli_before_any_model_call(tmp_path):
    """Exit 2 with one line on stderr; the (unreachable) model is never asked."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**BASE, "agents": [{"role": "macro", "tier": "causal"}, {"role": "valu"}]}))
    scen = tmp_path / "s.yaml"
    scen.write_text(yaml.safe_dump({"scenarios": [{"id": "s", "invest_quarter": "2022Q2", "tickers": ["AAA", "BBB"]}]}))
    out = subprocess.run([sys.executable, "-m", "madbench.runner.cli", "debate", "s", "--scenarios", str(scen), "--config", str(bad),
                          "--model", "openai/never-called", "--out", str(tmp_path / "o")], capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "bad.yaml: agents[1]: unknown role 'valu'" in out.stderr
    assert not (tmp_path / "o").exists()


def test_infeasible_constraint_override_is_rejected(make_pack, tmp_path):
    import asyncio

    from madbench.data.market.pack import load_pack
    from madbench.data.scenario import Scenario
    from madbench.runner.pipeline import run_debate
    from madbench.runner.wiring import build_gateway
    cfg = load_debate_config(CONFIGS / "single-basic.yaml").model_copy(update={"constraints": {"max_weight": 0.2}})
    scenario = Scenario(id="s", invest_quarter="2021Q3", tickers=["AAA", "BBB", "CCC"])
    with pytest.raises(InputError, match=r"config.constraints: fully invested needs max_weight x holdings >= 1"):
        asyncio.run(run_debate(scenario, load_pack(make_pack()), cfg, build_gateway(), tmp_path / "runs"))
    assert not (tmp_path / "runs").exists()
