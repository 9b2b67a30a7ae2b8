"""A batch's declared pairs are checked on what the arms run (runner/pairs.py): a treatment that differs from its
control beyond the declared factor is refused when the batch loads, naming what else differs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from madbench.data.errors import InputError
from madbench.runner.batch import load_batch, resolve_configs
from madbench.runner.cli import main
from madbench.runner.exit_codes import EXIT_INPUT

ROOT = Path(__file__).resolve().parents[2]
DEBATE = ROOT / "configs" / "debate"
SHIPPED = sorted((ROOT / "configs" / "batches").glob("*.yaml"))


def config(folder: Path, base: str, **over) -> str:
    """A shipped debate config with fields replaced, written in ``folder``; returns its path."""
    data = yaml.safe_load((DEBATE / f"{base}.yaml").read_text()) | over
    path = folder / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def batch(tmp_path: Path, configs: list[str], pairs: list[dict], model: str | None = None) -> Path:
    scen = tmp_path / "scenarios.yaml"
    scen.write_text(yaml.safe_dump({"scenarios": [{"id": "s1", "invest_quarter": "2021Q4", "tickers": ["AAA", "BBB", "CCC"]}]}))
    spec = {"name": "b", "scenarios": {"file": str(scen)}, "configs": configs, "pairs": pairs}
    if model:
        spec["model"] = model
    path = tmp_path / "b.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def load(path: Path):
    spec, base = load_batch(path)
    return resolve_configs(spec, base, str(path))


def test_a_treatment_with_its_judge_on_another_model_undeclared_is_refused_naming_the_phase(tmp_path, capsys):
    control = config(tmp_path, "a7-control", models={"tiers": {"a": "openai/gpt-5-mini", "b": "openai/gpt-5"},
                                                     "default": "a", "phases": {"judge": "b"}})
    treatment = config(tmp_path, "a7", models={"tiers": {"a": "openai/gpt-5-mini", "b": "openai/gpt-5"}, "default": "a"})
    path = batch(tmp_path, [control, treatment], [{"control": "a7-control", "treatment": "a7", "factor": ["interventions"]}])
    with pytest.raises(InputError, match=r"pair a7 vs a7-control: arms differ beyond 'interventions': .*phase judge model "
                                         r"openai/gpt-5 vs openai/gpt-5-mini"):
        load(path)
    assert main(["run", str(path), "--dry-run"]) == EXIT_INPUT
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "phase judge model" in err
    # the same arms, the routing declared as what the pair varies (with the intervention): accepted
    declared = batch(tmp_path, [control, treatment],
                     [{"control": "a7-control", "treatment": "a7", "factor": ["interventions", "models"]}])
    assert [c.name for c in load(declared)] == ["a7-control", "a7"]


def test_a_routing_difference_no_phase_reaches_is_no_confound(tmp_path):
    # rca is routed differently, but neither arm calls rca: what runs is the same
    tiers = {"a": "openai/gpt-5-mini", "b": "openai/gpt-5"}
    control = config(tmp_path, "a7-control", models={"tiers": tiers, "default": "a", "phases": {"rca": "b"}})
    treatment = config(tmp_path, "a7", models={"tiers": tiers, "default": "a"})
    assert len(load(batch(tmp_path, [control, treatment],
                          [{"control": "a7-control", "treatment": "a7", "factor": ["interventions"]}]))) == 2


def test_a_judge_added_by_the_aggregation_on_a_stronger_model_than_the_mean_is_refused(tmp_path):
    routing = {"tiers": {"a": "openai/gpt-5-mini", "b": "openai/gpt-5"}, "default": "a", "phases": {"judge": "b", "crit": "b"}}
    control = config(tmp_path, "paper-debate3-causal-mean", models=routing)
    treatment = config(tmp_path, "paper-debate3-causal", models=routing)
    pairs = [{"control": "paper-debate3-causal-mean", "treatment": "paper-debate3-causal", "factor": ["aggregation"]}]
    with pytest.raises(InputError, match=r"portfolios written by openai/gpt-5-mini vs openai/gpt-5, openai/gpt-5-mini "
                                         r"\(phase judge model openai/gpt-5\)"):
        load(batch(tmp_path, [control, treatment], pairs))


def test_arms_whose_roles_do_not_nest_are_refused_unless_roles_is_declared(tmp_path):
    single, mean3 = config(tmp_path, "paper-single-basic"), config(tmp_path, "paper-mean3-basic")
    pair = {"control": "paper-single-basic", "treatment": "paper-mean3-basic"}
    with pytest.raises(InputError, match=r"roles macro vs value, risk, technical \(neither arm's roles contain"):
        load(batch(tmp_path, [single, mean3], [pair | {"factor": ["agents"]}], model="rules/auto"))
    assert len(load(batch(tmp_path, [single, mean3], [pair | {"factor": ["agents", "roles"]}], model="rules/auto"))) == 2
    value = config(tmp_path, "paper-single-value-basic")
    nested = {"control": "paper-single-value-basic", "treatment": "paper-mean3-basic", "factor": ["agents"]}
    assert len(load(batch(tmp_path, [value, mean3], [nested], model="rules/auto"))) == 2


def test_an_undeclared_setting_and_a_factor_that_does_not_differ_are_both_named(tmp_path):
    control = config(tmp_path, "a7-control", temperature=0.5)
    treatment = config(tmp_path, "a7")
    pairs = [{"control": "a7-control", "treatment": "a7", "factor": ["interventions", "rounds"]}]
    with pytest.raises(InputError) as err:
        load(batch(tmp_path, [control, treatment], pairs, model="rules/auto"))
    text = str(err.value)
    assert "phase propose temperature 0.5 vs 1" in text and "phase judge temperature 0.5 vs 1" in text
    assert "declared factor 'rounds' does not differ between the arms" in text


def test_a_pair_naming_a_config_the_batch_lacks_is_refused(tmp_path):
    path = batch(tmp_path, [config(tmp_path, "a7")], [{"control": "nope", "treatment": "a7", "factor": ["interventions"]}])
    with pytest.raises(InputError, match=r"pairs\[0\]: no config named nope"):
        load(path)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
@pytest.mark.parametrize("model", [None, "rules/auto"])
def test_every_shipped_batch_passes_the_pair_check(path, model):
    spec, base = load_batch(path)
    if model:
        spec = spec.model_copy(update={"model": model})
    configs = {c.name for c in resolve_configs(spec, base, str(path))}
    assert {n for p in spec.pairs for n in (p.control, p.treatment)} <= configs
