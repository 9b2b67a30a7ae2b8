"""The paper's experiments as batches (configs/batches/{table2,table4,rq2-e1,a1-tiers,a7,a8,a10}.yaml).

Each treatment is declared with its matched control (`pairs:` in the batch file), and the two must differ in the
factor under test and in nothing else: a control that also changes the role set, the aggregation or the round count
would confound the comparison. The batch loader checks that on what the arms run (runner/pairs.py,
tests/runner/test_pairs.py); here, besides a config-field check, the designs themselves (which factor each pair
varies, the paper's role sets, rounds and per-phase models) are pinned, so that widening a pair's declared `factor`
cannot hide a confound.
"""

from __future__ import annotations

import fnmatch
from pathlib import Path

import pandas as pd
import pytest
import yaml

from madbench.runner.batch import load_batch, resolve_configs
from tests.conftest import SHARED_PAPER, requires_shared

ROOT = Path(__file__).resolve().parents[2]
BATCHES = ROOT / "configs" / "batches"
VRT = ["value", "risk", "technical"]  # the paper's 3-role set in Tables 2 and 4 (no macro)

#: batch → [(control, treatment, the fields they may differ in)], as the paper designed them.
PAPER = {
    "table2": [("paper-single-value-basic", "paper-mean3-basic", {"agents"}),
               ("paper-single-risk-basic", "paper-mean3-basic", {"agents"}),
               ("paper-single-technical-basic", "paper-mean3-basic", {"agents"}),
               ("paper-mean3-basic", "paper-mean3-causal", {"agents.*.tier"}),
               ("paper-mean3-causal", "paper-mean3-enriched", {"agents.*.tier"})],
    "table4": [("paper-mean3-causal", "paper-debate3-causal-mean", {"rounds"}),
               ("paper-debate3-causal-mean", "paper-debate3-causal", {"aggregation"}),
               ("paper-debate3-causal", "paper-debate3-causal-rca", {"interventions"})],
    "a1-tiers": [("paper-debate3-basic", "paper-debate3-causal", {"agents.*.tier"}),
                 ("paper-debate3-causal", "paper-debate3-enriched", {"agents.*.tier"})],
    "a7": [("a7-control", "a7", {"interventions"})],
    "a8": [("a8-control", "a8", {"interventions"})],
    "a10": [("a10-control", "a10", {"interventions"})],
}
PAPER["rq2-e1"] = PAPER["table2"] + PAPER["table4"]
#: The intervention each ablation's treatment adds.
INTERVENTION = {"paper-debate3-causal-rca": "rca", "a7": "js_collapse", "a8": "js_collapse", "a10": "crit_causal"}


def load(name: str):
    path = BATCHES / f"{name}.yaml"
    spec, base = load_batch(path)
    return spec, {c.name: c for c in resolve_configs(spec, base, str(path))}


def flatten(value, prefix: str = "") -> dict[str, object]:
    """Dotted paths to leaves (list items by index); an empty list or dict is a leaf of its own."""
    if isinstance(value, dict) and value:
        return {k: v for key, item in value.items() for k, v in flatten(item, f"{prefix}{key}.").items()}
    if isinstance(value, list) and value:
        return {k: v for i, item in enumerate(value) for k, v in flatten(item, f"{prefix}{i}.").items()}
    return {prefix.rstrip("."): value}


def config_diff(a, b) -> set[str]:
    """The paths at which two resolved configs differ, their names and descriptions aside."""
    fa, fb = (flatten(c.model_dump(mode="json", exclude={"name", "description"})) for c in (a, b))
    return {k for k in fa.keys() | fb.keys() if fa.get(k, KeyError) != fb.get(k, KeyError)}


def covered(path: str, pattern: str) -> bool:
    return fnmatch.fnmatchcase(path, pattern) or fnmatch.fnmatchcase(path, pattern + ".*")


def test_the_paper_batches_exist_and_declare_the_papers_pairs():
    for name, expected in PAPER.items():
        spec, configs = load(name)
        declared = [(p.control, p.treatment, set(p.factor)) for p in spec.pairs]
        assert declared == expected, name
        paired = {n for c, t, _ in declared for n in (c, t)}
        # the paper's column A (one macro agent) stays for reproduction, in no pair: its roles are not B's
        assert paired == set(configs) - {"paper-single-basic"}, f"{name}: every config but A is in a pair"


@pytest.mark.parametrize("batch", sorted(PAPER))
def test_each_treatment_differs_from_its_control_only_in_the_factor_under_test(batch):
    spec, configs = load(batch)
    for control, treatment, factor in PAPER[batch]:
        diff = config_diff(configs[control], configs[treatment])
        assert diff, f"{batch}: {treatment} is {control} under another name"
        confounds = sorted(d for d in diff if not any(covered(d, f) for f in factor))
        assert not confounds, f"{batch}: {treatment} vs {control} also differ in {confounds}"
        unused = sorted(f for f in factor if not any(covered(d, f) for d in diff))
        assert not unused, f"{batch}: {treatment} vs {control} do not differ in {unused}"


@pytest.mark.parametrize("batch", sorted(PAPER))
def test_the_paper_batches_run_on_the_papers_scenarios_and_models(batch):
    spec, configs = load(batch)
    assert spec.scenarios.file == "../../../shared/data/paper/scenarios_35.yaml" and spec.scenarios.ids is None
    assert spec.pack == "../../../shared/data/market" and spec.evidence == ["../../../shared/data/paper"]
    assert spec.model is None, "a batch-wide `model` would flatten the per-phase routing (use --model to override)"
    for c in configs.values():
        roles = [a.role for a in c.agents]
        for role in roles:
            for phase in ("propose", "critique", "revise"):
                assert c.models.resolve(role, phase).model == "openai/gpt-5-mini", (c.name, role, phase)
        # the judge decides on the agents' model (§3.3.2: "GPT-5-mini serving as ... Judge"); the graders on gpt-5
        assert c.models.resolve("judge", "judge").model == "openai/gpt-5-mini", c.name
        for phase in ("crit", "rca"):
            assert c.models.resolve("judge", phase).model == "openai/gpt-5", (c.name, phase)
        assert c.temperature == 1 and c.crit_temperature == 1, f"{c.name}: gpt-5 and gpt-5-mini accept temperature 1 only"


def test_the_designs_are_the_papers():
    _, t2 = load("table2")
    assert [a.role for a in t2["paper-single-basic"].agents] == ["macro"]
    for role in VRT:
        assert [(a.role, a.tier) for a in t2[f"paper-single-{role}-basic"].agents] == [(role, "basic")]
    for tier in ("basic", "causal", "enriched"):
        c = t2[f"paper-mean3-{tier}"]
        assert [a.role for a in c.agents] == VRT and {a.tier for a in c.agents} == {tier}
        assert c.rounds == 0 and c.aggregation == "mean" and not c.interventions
    _, t4 = load("table4")
    debate = t4["paper-debate3-causal"]
    assert [a.role for a in debate.agents] == VRT and debate.rounds == 1 and debate.aggregation == "judge"
    between = t4["paper-debate3-causal-mean"]
    assert between.model_dump(exclude={"name", "description", "aggregation"}) == \
        debate.model_dump(exclude={"name", "description", "aggregation"}) and between.aggregation == "mean"
    _, a1 = load("a1-tiers")
    assert [{a.tier for a in a1[f"paper-debate3-{t}"].agents} for t in ("basic", "causal", "enriched")] == [
        {"basic"}, {"causal"}, {"enriched"}]
    assert a1["paper-debate3-causal"] == debate  # A1's causal arm is Table 4's debate: the same runs
    for batch, roles in (("a7", ["macro", "technical"]), ("a8", ["macro", "technical", "risk"]), ("a10", ["macro", "technical"])):
        _, configs = load(batch)
        assert [a.role for a in configs[batch].agents] == roles and not configs[f"{batch}-control"].interventions
    for batch in ("table4", "a7", "a8", "a10"):
        _, configs = load(batch)
        for name, iv in INTERVENTION.items():
            if name in configs:
                assert [i.name for i in configs[name].interventions] == [iv]
    _, a7 = load("a7")
    js = a7["a7"].interventions[0].model_dump()
    assert js["threshold"] == 0.8 and js["max_change_pts"] == 10  # the strict variant, the one that helped
    a10_spec, a10 = load("a10")
    assert a10["a10-control"].model_dump(exclude={"name", "description"}) == \
        a7["a7-control"].model_dump(exclude={"name", "description"})
    # …drawn again: A10 runs at another sample index than A7, so its control is its own runs (a second draw)
    a7_spec, _ = load("a7")
    assert not set(a10_spec.sample_indices) & set(a7_spec.sample_indices)


@requires_shared
@pytest.mark.parametrize("batch, runs", [("table2", 245), ("table4", 140), ("rq2-e1", 350), ("a1-tiers", 105),
                                         ("a7", 70), ("a8", 70), ("a10", 70)])
def test_each_paper_batch_is_its_configs_on_the_35_scenarios(batch, runs):
    from madbench.data.scenario import load_scenarios
    from madbench.runner.batch import expand
    spec, configs = load(batch)
    scenarios = load_scenarios(SHARED_PAPER / "scenarios_35.yaml")
    assert len(scenarios) == 35
    assert len(expand(spec, scenarios, list(configs.values()))) == runs == 35 * len(configs)


@requires_shared
@pytest.mark.slow
def test_a_paper_batch_runs_offline_end_to_end_with_model_rules_auto(tmp_path, capsys):
    """table4 (a mean, a judged debate, RCA) through `madbench run --model rules/auto` on three paper scenarios."""
    from madbench.runner.cli import main
    spec = yaml.safe_load((BATCHES / "table4.yaml").read_text())
    spec["scenarios"] = {"file": str(SHARED_PAPER / "scenarios_35.yaml"),
                         "ids": ["2022Q3_rand3_1", "2023Q2_rand8_1c8e1d3e", "2022Q4_tech"]}
    spec["pack"] = str(SHARED_PAPER.parent / "market")
    spec["evidence"] = [str(SHARED_PAPER)]
    spec["configs"] = [str((BATCHES / c).resolve()) for c in spec["configs"]]
    spec.update(max_in_flight=4, workers=1, retries=0)
    batch = tmp_path / "table4.yaml"
    batch.write_text(yaml.safe_dump(spec))
    args = ["run", str(batch), "--model", "rules/auto", "--results-dir", str(tmp_path / "results"),
            "--cache-dir", str(tmp_path / "cache"), "--quiet"]
    assert main(args) == 0, capsys.readouterr().err
    root = tmp_path / "results" / "table4@rules-auto"  # apart from the batch's own (real-model) results
    runs = pd.read_parquet(root / "runs.parquet")
    assert len(runs) == 12 and (runs.status == "ok").all(), runs[["config", "scenario_id", "error"]]
    assert set(runs.config) == {"paper-mean3-causal", "paper-debate3-causal-mean", "paper-debate3-causal",
                                "paper-debate3-causal-rca"}
    calls = pd.read_parquet(root / "calls.parquet")
    assert len(calls) and calls.model_used.str.startswith("rules/").all() and not calls.is_llm.any()  # no provider reached
    assert not (tmp_path / "results" / "table4").exists()
