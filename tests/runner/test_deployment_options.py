"""Every command that calls a model takes `--routing NAME` and `--set TIER.FIELD=VALUE` as `madbench run` does, resolved
by one code path (``runner.deployment``); `--api-base`, `--api-key-env`, `--rpm`, ... are shorthands of `--set`."""

import json

import pandas as pd
import pytest
import yaml

from madbench.data.errors import InputError
from madbench.data.market.pack import load_pack
from madbench.gateway.models import ModelRouting
from madbench.runner.cli import main
from madbench.runner.deployment import OWN_TIER, config_routing, one_model
from madbench.sim.provider import SimProvider
from madbench.sim.recall_answers import RecallAnswerer
from tests.runner.test_demo_and_debate_cli import SCENARIOS
from tests.runner.test_option_checks import KEY, closed_port, one_line, scenarios_file
from tests.runner.test_probe_recall import setup  # noqa: F401  (a fixture)

NO_SHORTHANDS: dict = {}


def test_a_bare_model_is_its_own_tier_which_set_and_the_shorthands_deploy():
    (m,) = one_model(["openai/gpt-4o-mini"], None, ["model.limits.rpm=50"], {"--api-base": "http://127.0.0.1:9/v1"})
    assert (m.tier, m.spec.model, m.spec.api_base, m.spec.limits.rpm, m.api_base_from) == (
        OWN_TIER, "openai/gpt-4o-mini", "http://127.0.0.1:9/v1", 50, "--api-base")


def test_a_routing_tier_brings_its_deployment_and_set_goes_over_it():
    (strong,) = one_model(["strong"], "paper-openai", [], NO_SHORTHANDS)
    assert (strong.spec.model, strong.spec.api_key_env, strong.spec.limits.rpm) == ("openai/gpt-5", "OPENAI_API_KEY", 500)
    (by_model,) = one_model(["openai/gpt-5"], "paper-openai", ["strong.limits.rpm=20"], NO_SHORTHANDS)
    assert (by_model.tier, by_model.spec.limits.rpm, by_model.spec.limits.max_concurrency) == ("strong", 20, 8)
    (moved,) = one_model(["strong"], "paper-openai", ["strong.api_base=http://127.0.0.1:9/v1"], NO_SHORTHANDS)
    assert (moved.spec.api_base, moved.api_base_from) == ("http://127.0.0.1:9/v1", "--set")


@pytest.mark.parametrize("models,profile,settings,shorthands,message", [
    (["openai/gpt-4o"], "paper-openai", [], {}, "'openai/gpt-4o' is neither a tier of routing profile 'paper-openai'"),
    (["strong"], "paper-openai", ["agents.limits.rpm=5"], {}, "tier 'agents' is not one this command calls"),
    (["strong"], "paper-openai", ["strong.limits.rpm=5"], {"--rpm": 9}, "--rpm: sets strong.limits.rpm, which --set sets too"),
    (["m/x"], None, ["model.limits.rpm=5", "model.limits.rpm=6"], {}, "model.limits.rpm is set more than once"),
    (["m/x"], None, ["model.api_base=not a url"], {}, "--set: api_base: is not an http(s) URL with a host"),
    (["m/x"], None, ["model.limits.rpm=-1"], {}, "--set: limits.rpm"),
    (["m/x"], None, [], {"--api-key-env": KEY}, "--api-key-env: api_key_env: must name an environment variable"),
    (["strong"], "no-such-profile", [], {}, "--routing: unknown routing profile 'no-such-profile'"),
])
def test_a_setting_that_cannot_apply_is_one_error_naming_its_option(models, profile, settings, shorthands, message):
    with pytest.raises(InputError) as err:
        one_model(models, profile, settings, shorthands)
    assert message in str(err.value) and KEY not in str(err.value)


@pytest.mark.parametrize("command", ["leakage", "llm", "probe"])
def test_the_probing_commands_take_set_and_name_it_when_its_endpoint_is_dead(command, make_pack, tmp_path, capsys):
    scenarios, pack = str(scenarios_file(tmp_path)), str(make_pack())
    argv = {"leakage": ["leakage", "audit", "--scenarios", scenarios, "--pack", pack, "--model", "openai/madbench-sim",
                        "--send-context", "--no-cache", "--out", str(tmp_path / "out")],
            "llm": ["llm", "ask", "--model", "openai/madbench-sim", "--prompt", "hi", "--no-cache"],
            "probe": ["probe", "recall", "--model", "openai/madbench-sim", "--scenarios", scenarios, "--pack", pack,
                      "--send-context", "--no-cache", "--out", str(tmp_path / "out")]}[command]
    assert main([*argv, "--set", f"model.api_base=http://127.0.0.1:{closed_port()}/v1"]) == 2
    err = one_line(capsys)
    assert "--set: " in err and "the connection is refused" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["leakage", "llm", "probe", "rescore"])
def test_every_model_command_takes_a_routing_profile_and_refuses_a_model_not_in_it(command, make_pack, tmp_path, capsys):
    scenarios = str(scenarios_file(tmp_path))
    argv = {"leakage": ["leakage", "audit", "--scenarios", scenarios, "--pack", str(make_pack()), "--model", "openai/gpt-4o",
                        "--out", str(tmp_path / "out")],
            "llm": ["llm", "ask", "--model", "openai/gpt-4o", "--prompt", "hi", "--no-cache"],
            "probe": ["probe", "recall", "--model", "openai/gpt-4o", "--scenarios", scenarios, "--out", str(tmp_path / "out")],
            "rescore": ["rescore", str(tmp_path), "--scorer", "openai/gpt-4o"]}[command]
    assert main([*argv, "--routing", "paper-openai"]) == 2
    flag = "--scorer" if command == "rescore" else "--model"
    assert f"{flag}: 'openai/gpt-4o' is neither a tier of routing profile 'paper-openai'" in one_line(capsys)


def test_probe_recall_reaches_the_simulated_provider_through_set_as_through_api_base(setup, tmp_path, capsys):  # noqa: F811
    pack_dir, scenarios, cutoffs = setup
    with SimProvider(recall=RecallAnswerer(1.0, load_pack(pack_dir))) as sim:
        code = main(["probe", "recall", "--model", "openai/madbench-sim", "--set", f"model.api_base={sim.url}",
                     "--send-context", "--scenarios", str(scenarios), "--pack", str(pack_dir), "--cutoffs", str(cutoffs),
                     "--out", str(tmp_path / "out"), "--no-cache", "--json"])
    assert code == 0, capsys.readouterr().err
    observations = pd.read_parquet(tmp_path / "out" / "recall.parquet")
    assert len(observations) > 0 and observations["hit"].all()  # a model that remembers every bucket


def test_a_single_debate_takes_a_routing_profile_and_set_as_run_does(make_pack, tmp_path, capsys):
    scen = tmp_path / "s.yaml"
    scen.write_text(yaml.safe_dump(SCENARIOS))
    base = ["debate", "a", "--scenarios", str(scen), "--config", "configs/debate/causal-debate-3.yaml", "--pack",
            str(make_pack()), "--out", str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache"), "--json"]
    assert main([*base, "--routing", "rules", "--set", "quick.limits.rpm=100"]) == 0
    by_profile = json.loads(capsys.readouterr().out)
    assert main([*base, "--model", "rules/auto"]) == 0
    by_model = json.loads(capsys.readouterr().out)
    # the rules profile answers as rules/auto everywhere; a limit is deployment, which a run's identity never sees
    assert by_profile["status"] == "ok" and by_profile["weights"] == by_model["weights"]
    assert main([*base, "--routing", "rules", "--set", "strong.limits.rpm=100"]) == 2
    assert "--set: tier 'strong' is not one of this routing's (deep, quick)" in capsys.readouterr().err
    assert main([*base, "--routing", "rules", "--model", "rules/auto"]) == 2
    assert "--model and --routing both replace" in capsys.readouterr().err
    routing = config_routing(ModelRouting.single("openai/gpt-4o-mini"), None, None, ["quick.api_base=http://127.0.0.1:9/v1"])
    assert routing.tiers["quick"].api_base == "http://127.0.0.1:9/v1"
