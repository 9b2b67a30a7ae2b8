"""A run's id is computed once, when its batch expands, and carried to the run: what uses it (the runner actor, the
debate pipeline) checks it against the run's own content and refuses one that does not match."""

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest

from madbench.data.errors import InputError
from madbench.data.market.pack import load_pack
from madbench.data.scenario import Scenario
from madbench.debate.config_file import load_debate_config
from madbench.gateway import ModelRouting
from madbench.results import read_manifest
from madbench.runner.batch import BatchSpec, expand
from madbench.runner.execute import run_batch
from madbench.runner.pipeline import check_run_id, run_debate, run_id_for
from madbench.runner.store import BatchLayout
from madbench.runner.wiring import build_gateway

ROOT = Path(__file__).resolve().parents[2]
TICKERS = ["AAA", "BBB", "CCC", "DDD"]
SCENARIO = Scenario(id="s", invest_quarter="2021Q3", tickers=TICKERS, constraints={"max_weight": 0.6})


def rules_config(**update):
    cfg = load_debate_config(ROOT / "configs/debate/single-causal.yaml")
    return cfg.model_copy(update={"models": ModelRouting.single("rules/auto"), **update})


def test_a_run_handed_an_id_its_content_does_not_hash_to_is_refused_before_writing(make_pack, tmp_path):
    pack, cfg = load_pack(make_pack(tickers=tuple(TICKERS))), rules_config()
    true_id = run_id_for(SCENARIO, cfg, 0)
    for wrong, sample_index in (("0123456789abcdef", 0), (true_id, 1)):  # a made-up id; the id of another replicate
        with pytest.raises(InputError) as caught:
            asyncio.run(run_debate(SCENARIO, pack, cfg, build_gateway(), tmp_path / "out", sample_index, run_id=wrong))
        message = str(caught.value)
        assert message.startswith(f"run {wrong}: the id does not match the run's content")
        assert f"replicate {sample_index} hash to {run_id_for(SCENARIO, cfg, sample_index)}" in message
    assert not (tmp_path / "out").exists()  # no trace, no result under the wrong id
    result = asyncio.run(run_debate(SCENARIO, pack, cfg, build_gateway(), tmp_path / "out", 0, run_id=true_id))
    assert result.status == "ok" and result.run_id == true_id
    assert (tmp_path / "out" / true_id / "result.json").exists()


def test_the_expansion_gives_a_run_the_id_its_debate_checks_even_with_a_constraint_override(make_pack, tmp_path):
    # The config tightens the scenario's max_weight: the debate runs under the override, and so does the id.
    pack, cfg = load_pack(make_pack(tickers=tuple(TICKERS))), rules_config(constraints={"max_weight": 0.5})
    spec = BatchSpec(name="t", scenarios={"file": "unused.yaml"}, configs=["unused.yaml"])
    (run,) = expand(spec, [SCENARIO], [cfg])
    assert check_run_id(run.run_id, SCENARIO, cfg, 0) == run.run_id
    assert run.run_id != run_id_for(SCENARIO, rules_config(), 0)  # the override is part of the run's content
    result = asyncio.run(run_debate(SCENARIO, pack, cfg, build_gateway(), tmp_path / "out", 0, run_id=run.run_id))
    assert result.run_id == run.run_id


@pytest.mark.slow
def test_a_batch_run_carrying_a_tampered_id_fails_with_the_mismatch_and_the_others_commit(make_pack, tmp_path, ray_local):
    pack_dir = make_pack(tickers=tuple(TICKERS))
    spec = BatchSpec(name="t", scenarios={"file": "unused.yaml"}, configs=["unused.yaml"], replicates=2, retries=0,
                     workers=1, max_in_flight=2)
    good, bad = expand(spec, [SCENARIO], [rules_config()])
    tampered = replace(bad, run_id="0123456789abcdef")
    layout = BatchLayout(tmp_path / "results" / "t")
    stats = run_batch(spec, [good, tampered], layout, str(pack_dir), [], str(tmp_path / "cache"), quiet=True)
    assert stats.status.model_dump() == {"ok": 1, "failed": 1, "pending": 0, "not_needed": 0}
    runs = {m.run_id: m for m in read_manifest(layout.root).runs}
    assert runs[good.run_id].status == "ok" and layout.stored_result(good.run_id) is not None
    failed = runs[tampered.run_id]
    assert failed.status == "failed" and failed.error.startswith(f"run {tampered.run_id}: the id does not match")
    assert f"hash to {bad.run_id}" in failed.error
    assert not layout.trace_path(tampered.run_id).exists() and not layout.trace_path(bad.run_id).exists()


def test_the_expansions_incremental_hash_gives_every_run_the_id_its_full_payload_hashes_to():
    from madbench.runner.batch import resolve_configs
    from madbench.runner.pipeline import run_ids_for

    spec = BatchSpec.model_validate({"name": "ids", "scenarios": {"file": "../scenarios/market-35.yaml"},
                                     "configs": ["../debate/single-causal.yaml", "../debate/paper-debate3-causal.yaml"],
                                     "grid": {"rounds": [1, 2]}})
    configs = resolve_configs(spec, ROOT / "configs" / "batches", "test")
    configs.append(load_debate_config(ROOT / "configs/debate/self-consistency-3.yaml"))
    others = [SCENARIO, Scenario(id="other_2022.q1+x=1", invest_quarter="2022Q1", tickers=TICKERS)]
    indices = [0, 1, 7, 12345]
    for config in configs + [rules_config(constraints={"max_weight": 0.4})]:
        for scenario in others:
            assert run_ids_for(scenario, config, indices) == [run_id_for(scenario, config, k) for k in indices]
