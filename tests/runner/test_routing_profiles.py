"""Routing profiles (configs/routing/): a config names one, a batch or the command line overrides where its tiers are
reached, and a run's id sees the models but not their deployment (key variable, limits, api_base)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from madbench.data.errors import InputError
from madbench.debate.config_file import load_debate_config
from madbench.gateway.models import ModelRouting, ModelSpec, RateLimits
from madbench.gateway.routing_profiles import ROUTING_DIR, load_routing_profile
from madbench.runner.batch import expand, load_batch, resolve_configs, resolve_scenarios, with_settings
from madbench.runner.cli import main
from madbench.runner.deployment import parse_settings
from tests.conftest import errors_only

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs" / "debate"
SCENARIOS = ROOT / "configs" / "scenarios" / "market-35.yaml"


def write_batch(tmp_path: Path, configs: list[Path], **over) -> Path:
    body = {"name": "routing", "scenarios": {"file": str(SCENARIOS), "ids": ["2025Q2_n3_022", "2021Q4_n4_023"]},
            "configs": [str(c) for c in configs], **over}
    path = tmp_path / "batch.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


def expanded(path: Path):
    spec, base = load_batch(path)
    return expand(spec, resolve_scenarios(spec, base, None, str(path)), resolve_configs(spec, base, str(path)), str(path))


def test_a_config_naming_a_profile_runs_on_the_profiles_routing():
    cfg = load_debate_config(CONFIGS / "paper-debate3-causal.yaml")
    assert cfg.models == load_routing_profile("paper-openai", "test").routing()
    agent, crit = cfg.models.resolve("value", "propose"), cfg.models.resolve("value", "crit")
    assert (agent.model, agent.api_key_env, agent.limits.rpm) == ("openai/gpt-5-mini", "OPENAI_API_KEY", 500)
    assert crit.model == "openai/gpt-5"


def test_a_configs_own_models_entries_go_over_its_profiles():
    phase = load_debate_config(CONFIGS / "provider-mix-phase.yaml").models
    assert phase.resolve("macro", "revise").model == "openai/gpt-4o"  # the config's phase entry
    assert phase.resolve("macro", "propose").model == "openai/gpt-4o-mini"  # the profile's default
    role = load_debate_config(CONFIGS / "provider-mix-role.yaml").models
    assert role.resolve("value", "propose").model == "anthropic/claude-haiku-4-5"
    assert role.resolve("value", "crit").model == "anthropic/claude-sonnet-4-5"
    assert load_debate_config(CONFIGS / "tradingagents.yaml").models.roles["desk_macro"] == "quick"


def test_no_config_repeats_a_routing_block_every_one_names_a_profile():
    for path in sorted(CONFIGS.glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        assert data.get("routing") in {p.stem for p in ROUTING_DIR.glob("*.yaml")}, path.name
        assert "tiers" not in (data.get("models") or {}), f"{path.name}: tiers belong in configs/routing/"


def test_a_batch_override_reaches_the_resolved_model_spec_field_by_field(tmp_path):
    batch = write_batch(tmp_path, [CONFIGS / "paper-debate3-causal.yaml"],
                        routing={"tiers": {"agents": {"api_base": "http://gw:4000/v1", "limits": {"rpm": 50}}}})
    spec, base = load_batch(batch)
    [cfg] = resolve_configs(spec, base, str(batch))
    agent = cfg.models.resolve("risk", "critique")
    assert agent.api_base == "http://gw:4000/v1" and agent.limits.rpm == 50
    assert agent.limits.max_concurrency == 8, "a limit not overridden keeps the profile's"
    assert cfg.models.resolve("judge", "crit").limits.rpm == 500, "another tier keeps its own"


def test_a_command_line_setting_goes_over_the_batch_files(tmp_path):
    batch = write_batch(tmp_path, [CONFIGS / "paper-debate3-causal.yaml"],
                        routing={"tiers": {"strong": {"limits": {"rpm": 50, "tpm": 1000}}}})
    spec, base = load_batch(batch)
    spec = with_settings(spec, parse_settings(["strong.limits.rpm=20", "strong.api_key_env=MY_OPENAI_KEY"]), "--set")
    [cfg] = resolve_configs(spec, base, str(batch))
    strong = cfg.models.resolve("judge", "crit")
    assert (strong.limits.rpm, strong.limits.tpm, strong.api_key_env) == (20, 1000, "MY_OPENAI_KEY")


def test_deployment_overrides_leave_run_ids_alone_and_a_model_change_does_not(tmp_path):
    configs = [CONFIGS / "paper-debate3-causal.yaml", CONFIGS / "demo-local.yaml"]
    plain = [r.run_id for r in expanded(write_batch(tmp_path, configs))]
    deployed = {"agents": {"api_base": "http://gw/v1", "api_key_env": "OTHER_KEY", "limits": {"rpm": 5, "tpm": 100}},
                "quick": {"limits": {"max_concurrency": 1}}}  # quick is a bare model string in demo-local
    assert [r.run_id for r in expanded(write_batch(tmp_path, configs, routing={"tiers": deployed}))] == plain
    moved = expanded(write_batch(tmp_path, configs[:1], routing={"profile": "rules"}))  # other models: other runs
    assert len(moved) == 2 and not {r.run_id for r in moved} & set(plain)


def test_a_spec_with_only_deployment_settings_is_the_same_runs_as_its_bare_model():
    deployed = ModelSpec(model="openai/gpt-5", api_key_env="KEY", api_base="http://x", limits=RateLimits(rpm=9))
    assert ModelRouting.single(deployed).identity() == ModelRouting.single("openai/gpt-5").identity()
    answers_differently = deployed.model_copy(update={"structured_output": "prompt_only"})
    assert ModelRouting.single(answers_differently).identity() != ModelRouting.single("openai/gpt-5").identity()


def test_an_unknown_profile_in_a_config_is_one_error_naming_file_field_and_the_known_profiles(tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump({**yaml.safe_load((CONFIGS / "demo-local.yaml").read_text()), "routing": "paper-opneai"}))
    with pytest.raises(InputError) as err:
        load_debate_config(path)
    text = str(err.value)
    assert str(path) in text and "routing: unknown routing profile 'paper-opneai'" in text and "paper-openai" in err.value.fix


def test_an_unknown_profile_or_setting_on_the_command_line_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MADBENCH_CACHE_DIR", str(tmp_path / "cache"))
    batch = write_batch(tmp_path, [CONFIGS / "demo-local.yaml"])
    cases = [(["--routing", "nope"], "--routing: unknown routing profile 'nope'"),
             (["--set", "quick.limits.rpmm=3"], "--set: routing.tiers.quick.limits.rpmm: unknown key"),
             (["--set", "quick.model=openai/gpt-5"], "--set: routing.tiers.quick.model: unknown key"),
             (["--set", "quick"], "--set: 'quick' is not TIER.FIELD=VALUE"),
             (["--set", "agents.limits.rpm=3"], "routing.tiers.agents: no config of the batch has this tier"),
             (["--model", "rules/auto", "--routing", "rules"], "--routing: --model and --routing both")]
    for flags, expected in cases:
        assert main(["run", str(batch), "--dry-run", *flags]) == 2
        err = errors_only(capsys.readouterr().err)
        assert expected in err and err.count("\n") == 1, err


def test_a_batch_cannot_name_both_a_model_and_a_profile_nor_grid_over_routing(tmp_path):
    for over, expected in (({"model": "rules/auto", "routing": {"profile": "rules"}}, "not both"),
                           ({"grid": {"routing": ["local", "rules"]}}, "no grid axis")):
        with pytest.raises(InputError, match=expected):
            load_batch(write_batch(tmp_path, [CONFIGS / "demo-local.yaml"], **over))


@pytest.mark.parametrize("bad", [{"tiers": {"quick": "rules/auto"}}, 123, "", "../debate/single-causal"])
def test_a_routing_that_is_not_a_profile_name_is_refused_as_such(bad):
    with pytest.raises(InputError, match=r"is not a routing profile's name \(fix: name one of the profiles in .*rules"):
        load_routing_profile(bad, "cfg.yaml: routing")


def test_a_batch_naming_its_profile_bare_means_the_profile():
    from madbench.runner.batch import BatchRouting
    assert BatchRouting.model_validate("rules") == BatchRouting(profile="rules")
