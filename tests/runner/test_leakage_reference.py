"""The leakage batch's memoryless reference arm (runner/leakage_reference.py), its scenario draws on both sides of the
cutoff, and the batch on the paper's model: every call it makes, the audit's probe included, at a temperature the
model takes and checked before anything is sent."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

from madbench.data.errors import InputError
from madbench.debate.config_file import load_debate_config
from madbench.gateway import ModelRouting, ModelSpec
from madbench.results.leakage_record import read_audit
from madbench.runner.batch import LeakageAuditSpec, ScenarioSource, load_batch, resolve_configs, resolve_scenarios
from madbench.runner.cli import main
from madbench.runner.cutoffs import load_cutoffs
from madbench.runner.preflight import probe_calls, probe_problems
from madbench.sim.provider import SimProvider
from tests.conftest import errors_only
from tests.runner.test_blind_runs import ROOT

BATCH = ROOT / "configs" / "batches" / "leakage.yaml"
DEBATE = ROOT / "configs" / "debate"
TICKERS = ("AAA", "BBB", "CCC", "DDD", "EEE")


def test_the_leakage_batch_runs_each_config_again_on_the_rule_based_analysts_differing_only_in_models():
    spec, base = load_batch(BATCH)
    configs = {c.name: c for c in resolve_configs(spec, base, str(BATCH))}
    assert sorted(configs) == ["leakage-blind", "leakage-blind+reference", "leakage-named",
                               "leakage-named+reference"]
    for name in ("leakage-named", "leakage-blind"):
        model, reference = configs[name], configs[name + "+reference"]
        a, b = (c.model_dump(mode="json", exclude={"name", "models"}) for c in (model, reference))
        assert a == b and model.models != reference.models
        assert reference.models == ModelRouting.single("rules/auto")
    # on the rule-based analysts already (--model rules/auto) the pair is its own reference: no second copy
    offline = spec.model_copy(update={"model": "rules/auto"})
    assert sorted(c.name for c in resolve_configs(offline, base, str(BATCH))) == ["leakage-blind", "leakage-named"]


def test_a_reference_that_could_remember_is_refused():
    with pytest.raises(ValueError, match="no memoryless model"):
        LeakageAuditSpec(reference="openai/gpt-4o-mini")


@pytest.mark.skipif(not (ROOT / ".." / "shared" / "data" / "market" / "prices.parquet").exists(),
                    reason="the shared market pack is absent")
def test_the_leakage_batch_has_at_least_30_scenarios_on_each_side_of_gpt_5_minis_cutoff():
    from madbench.data.market.pack import load_pack
    spec, base = load_batch(BATCH)
    pack = load_pack(base / spec.pack, [base / e for e in spec.evidence])
    scenarios = resolve_scenarios(spec, base, pack, str(BATCH))
    post = [load_cutoffs().post_cutoff(s.invest_quarter, ["openai/gpt-5-mini"]) for s in scenarios]
    assert len(scenarios) == len({s.id for s in scenarios})
    assert post.count(True) >= 30 and post.count(False) >= 30


def test_two_draws_that_make_the_same_ids_are_refused(make_pack, tmp_path):
    from madbench.data.market.pack import load_pack
    pack_dir = make_pack(tickers=TICKERS)
    draw = {"quarters": "2021Q1:2021Q2", "count": 2, "min_tickers": 3, "max_tickers": 4, "seed": 1}
    path = tmp_path / "b.yaml"
    path.write_text(yaml.safe_dump({"name": "b", "scenarios": {"make": [draw, draw]}, "configs": ["x.yaml"]}))
    spec, base = load_batch(path)
    with pytest.raises(InputError, match="drawn ids also in the file or in another draw"):
        resolve_scenarios(spec, base, load_pack(pack_dir), str(path))
    ok = ScenarioSource(make=[draw, {**draw, "quarters": "2021Q3:2021Q4"}])
    drawn = resolve_scenarios(spec.model_copy(update={"scenarios": ok}), base, load_pack(pack_dir), str(path))
    assert [s.invest_quarter[:4] for s in drawn] == ["2021"] * 4 and len({s.id for s in drawn}) == 4


def blind_on(model: str, temperature: float, api_base: str | None = "http://127.0.0.1:9/v1"):
    cfg = load_debate_config(DEBATE / "causal-debate-3-blind.yaml")
    return cfg.model_copy(update={"models": ModelRouting.single(ModelSpec(model=model, api_base=api_base)),
                                  "temperature": temperature})


def test_the_probe_asks_at_0_where_the_model_takes_it_and_else_at_its_debate_temperature():
    assert [t for _, t in probe_calls([blind_on("openai/gpt-4o-mini", 0.7)])] == [0.0]
    assert [t for _, t in probe_calls([blind_on("openai/gpt-5-mini", 1.0)])] == [1.0]  # gpt-5 takes only 1
    assert probe_problems([blind_on("openai/gpt-5-mini", 1.0)]) == []
    refused = probe_problems([blind_on("openai/gpt-5-mini", 0.7)])
    assert len(refused) == 1 and "temperature=0.7" in refused[0] and "identification probe" in refused[0]


def sim_leakage_batch(tmp_path: Path, pack: Path, spec: dict, temperature: float | None, draws: list[dict]) -> Path:
    """The ready leakage batch on ``spec``'s model, its configs at ``temperature`` (None: as shipped), on the draws
    from ``pack``."""
    batch = yaml.safe_load(BATCH.read_text())
    configs = []
    for name in batch["configs"]:
        cfg = yaml.safe_load((BATCH.parent / name).read_text())
        if temperature is not None:
            cfg |= {"temperature": temperature, "crit_temperature": temperature}
        configs.append(tmp_path / Path(name).name)
        configs[-1].write_text(yaml.safe_dump(cfg))
    batch |= {"scenarios": {"make": draws}, "pack": str(pack), "evidence": [], "configs": [str(c) for c in configs],
              "model": spec, "results_dir": str(tmp_path / "results"), "cache_dir": str(tmp_path / "cache"),
              "max_in_flight": 4, "workers": 1}
    path = tmp_path / "leakage.yaml"
    path.write_text(yaml.safe_dump(batch))
    return path


def test_the_leakage_batch_at_a_temperature_gpt_5_refuses_stops_before_any_request(make_pack, tmp_path, capsys):
    with SimProvider() as sim:
        spec = {"model": "openai/gpt-5-mini", "api_base": sim.url, "send_context": True}
        draws = [{"quarters": "2024Q1:2024Q2", "count": 2, "min_tickers": 3, "max_tickers": 3, "seed": 1}]
        path = sim_leakage_batch(tmp_path, make_pack(tickers=TICKERS, start="2023-01-02", n_days=800), spec, 0.7, draws)
        assert main(["run", str(path), "--quiet"]) == 2
        assert sim.stats.requests == 0
    err = errors_only(capsys.readouterr().err)
    # the preflight's one error, listing each problem: the debate's calls and the probe's, both refused at 0.7
    assert err.startswith("madbench: error: ") and "2 problem(s) found before any model call" in err
    assert "the leakage audit's identification probe, at temperature 0.7" in err
    assert not (tmp_path / "results").exists()


@pytest.mark.slow  # a real local Ray, 4 scenarios x 4 configs of a 3-agent, 2-round debate through the simulator
def test_the_leakage_batch_on_gpt_5_mini_runs_its_audit_and_debates_and_reports_the_estimate(make_pack, tmp_path,
                                                                                            ray_local, capsys):
    pack = make_pack(tickers=TICKERS, start="2023-01-02", n_days=800)
    draws = [{"quarters": "2024Q1:2024Q2", "count": 2, "min_tickers": 3, "max_tickers": 4, "seed": 1},
             {"quarters": "2024Q3:2025Q2", "count": 2, "min_tickers": 3, "max_tickers": 4, "seed": 2}]
    with SimProvider() as sim:  # litellm's parameter checks stay on: gpt-5-mini refuses any temperature but 1
        spec = {"model": "openai/gpt-5-mini", "api_base": sim.url, "send_context": True}
        path = sim_leakage_batch(tmp_path, pack, spec, None, draws)  # its configs as shipped
        assert main(["run", str(path), "--quiet"]) == 0
        assert sim.stats.requests > 0
    root = tmp_path / "results" / "leakage"
    audit = read_audit(root)
    assert audit is not None and audit.decision == "clear" and audit.memos == 4
    assert {p.model for p in audit.probes} >= {"openai/gpt-5-mini"}
    identified = pd.read_parquet(root / "leakage_audit" / "identify.parquet")
    assert len(identified[identified["model"] == "openai/gpt-5-mini"]) == 4
    runs = pd.read_parquet(root / "runs.parquet")
    assert len(runs) == 16 and (runs["status"] == "ok").all()
    assert set(runs["config"]) == {"leakage-named", "leakage-blind", "leakage-named+reference",
                                   "leakage-blind+reference"}
    capsys.readouterr()
    assert main(["stats", str(root), "--out", str(tmp_path / "stats")]) == 0
    out = capsys.readouterr().out
    assert "Leakage estimate: difference in differences" in out
    table = pd.read_csv(tmp_path / "stats" / "leakage_did.csv")
    sharpe = table[table["metric"] == "sharpe"].set_index("part")
    assert sharpe.loc["all", "n"] == 4 and sharpe.loc["True", "n"] == 2 and sharpe.loc["False", "n"] == 2
    assert (sharpe["did"] - (sharpe["model_diff"] - sharpe["reference_diff"])).abs().max() < 1e-9
    # the report's leakage section shows it in each part (the reference's runs lie in the post-cutoff one alone)
    assert main(["report", str(root)]) == 0
    html = (root / "report.html").read_text()
    assert html.count("Leakage estimate: (named − blind) of the model") == 3
