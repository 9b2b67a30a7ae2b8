"""`madbench leakage audit` end to end against the simulator playing a model that recognises 30% of memos (50 memos: the 95% interval of a share near 0.3 is about ±0.13)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from madbench.eval.stats.proportion import clopper_pearson_interval, clustered_effective_n, wilson_interval
from madbench.runner.cli import main
from madbench.sim.identify_answers import IdentifyAnswerer
from madbench.sim.provider import SimProvider

TICKERS = ["AAA", "BBB", "CCC", "DDD", "EEE"]
QUARTERS = ["2020Q2", "2020Q3", "2020Q4", "2021Q1", "2021Q2", "2021Q3", "2021Q4", "2022Q1", "2022Q2"]


def test_intervals_match_their_textbook_values():
    lo, hi = wilson_interval(3, 10)
    assert lo == pytest.approx(0.1078, abs=1e-4) and hi == pytest.approx(0.6032, abs=1e-4)
    lo, hi = clopper_pearson_interval(3, 10)
    assert lo == pytest.approx(0.0667, abs=1e-4) and hi == pytest.approx(0.6525, abs=1e-4)
    assert clustered_effective_n([3, 0, 3, 0], [3, 3, 3, 3]) < 12 / 2  # all-or-nothing clusters: about one trial each
    assert clustered_effective_n([1, 2, 1, 2], [3, 3, 3, 3]) == 12  # no design effect above 1 is invented
    # every memo recognised whole (or none): nothing tells the correlation, so each memo counts once, not each asset
    assert clustered_effective_n([7, 8], [7, 8]) == 2 and clustered_effective_n([0, 0, 0], [16, 16, 17]) == 3
    assert clustered_effective_n([2], [5]) == 1


@pytest.mark.slow  # about 30 s on a loaded 2-core machine (the probe's 50 calls through the gateway)
def test_the_audit_recovers_a_30_percent_recognition_within_its_interval(make_pack, tmp_path, capsys):
    pack_dir = make_pack(tickers=tuple(TICKERS))
    universes = list(itertools.combinations(TICKERS, 3))
    scenarios = [{"id": f"s{i}", "invest_quarter": QUARTERS[i % len(QUARTERS)], "tickers": list(universes[i % len(universes)])}
                 for i in range(50)]
    path = tmp_path / "scenarios.yaml"
    path.write_text(yaml.safe_dump({"scenarios": scenarios}))
    with SimProvider(identify=IdentifyAnswerer(share=0.30, seed=1)) as sim:
        assert main(["leakage", "audit", "--scenarios", str(path), "--pack", str(pack_dir), "--model", "openai/madbench-sim",
                     "--api-base", sim.url, "--send-context", "--no-cache", "--out", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert "residue over 50 blind memos" in printed and "name 0, year 0, month 0, exact_level 0" in printed
    summary = pd.read_parquet(tmp_path / "out" / "identify_summary.parquet").set_index(["group", "target"])
    obs = pd.read_parquet(tmp_path / "out" / "identify.parquet")
    assert len(obs) == 50 and (obs["assets"] == 3).all()
    truth = sim.identify.recorded_share()  # what the draw recognised: about 0.30, not exactly
    assert len(sim.identify.recorded) == 50
    for target in ("asset", "quarter"):
        row = summary.loc[("all", target)]
        assert row["recognised_low"] <= truth <= row["recognised_high"], (target, truth)
        # and it beats a uniform guess (the point estimate: with 50 memos the interval's low end may still reach
        # chance for the assets, whose memo-level clustering leaves about one trial per memo)
        assert row["rate"] > row["chance"] and row["recognised"] > 0, target
    assert summary.loc[("all", "quarter"), "memos"] == 50 and len(summary) == 2 * (1 + len(QUARTERS))


@pytest.mark.slow  # five audits of 35 memos, about a minute on a loaded 2-core machine
def test_recognition_beyond_chance_covers_what_the_simulator_recognised_for_every_seed(make_pack, tmp_path, capsys):
    """A model that recognises nothing still guesses some quarters right, so the raw hit rate overstates recognition;
    (hit rate − chance)/(1 − chance) is the estimate, and its interval must cover the share the simulator recorded."""
    pack_dir = make_pack(tickers=tuple(TICKERS))
    universes = list(itertools.combinations(TICKERS, 3))
    scenarios = [{"id": f"s{i}", "invest_quarter": QUARTERS[i % len(QUARTERS)], "tickers": list(universes[i % len(universes)])}
                 for i in range(35)]
    path = tmp_path / "scenarios.yaml"
    path.write_text(yaml.safe_dump({"scenarios": scenarios}))
    lucky = []
    with SimProvider() as sim:
        for seed in range(5):
            record = tmp_path / f"recognised-{seed}.jsonl"
            sim.identify = IdentifyAnswerer(share=0.30, seed=seed, record_path=record)
            out = tmp_path / f"out-{seed}"
            assert main(["leakage", "audit", "--scenarios", str(path), "--pack", str(pack_dir), "--model",
                         "openai/madbench-sim", "--api-base", sim.url, "--send-context", "--no-cache", "--out", str(out)]) == 0
            lines = [json.loads(line) for line in record.read_text().splitlines()]
            assert len(lines) == 35 and {line["memo"] for line in lines} == set(sim.identify.recorded)
            truth = sum(line["recognised"] for line in lines) / len(lines)
            row = pd.read_parquet(out / "identify_summary.parquet").set_index(["group", "target"]).loc[("all", "quarter")]
            assert row["recognised_low"] <= truth <= row["recognised_high"], (seed, truth, row.to_dict())
            lucky.append(row["rate"] - truth)
    assert min(lucky) >= 0 and max(lucky) > 0, lucky  # the raw hit rate counts lucky guesses as recognition
    capsys.readouterr()


def test_memo_blind_prints_what_a_blind_run_sends(make_pack, tmp_path, capsys):
    from madbench.data.market.pack import load_pack
    from madbench.data.scenario import Scenario
    from madbench.debate.config import DebateConfig
    from madbench.debate.config_file import load_debate_config
    from madbench.runner.pipeline import _memos
    from tests.runner.test_blind_runs import ROOT

    pack_dir = make_pack(tickers=tuple(TICKERS))
    scenario = Scenario(id="s1", invest_quarter="2021Q3", tickers=TICKERS[:3])
    path = tmp_path / "scenarios.yaml"
    path.write_text(yaml.safe_dump({"scenarios": [scenario.model_dump(mode="json")]}))
    assert main(["memo", "s1", "--scenarios", str(path), "--pack", str(pack_dir), "--blind"]) == 0
    printed = capsys.readouterr().out
    cfg = load_debate_config(ROOT / "configs" / "debate" / "causal-debate-3-blind.yaml")
    sent, _ = _memos(scenario, load_pack(pack_dir), DebateConfig.model_validate(cfg.model_dump(mode="json")), "test")
    assert printed == sent.text and "AAA" not in printed and "regime bands" in printed
    assert main(["memo", "s1", "--scenarios", str(path), "--pack", str(pack_dir), "--blind", "--json",
                 "--blind-macro", "exact"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["options"]["macro"] == "exact" and {"items", "masked"} <= set(out)
    assert all(set(m) == {"text", "mask", "class"} for m in out["masked"])


def test_a_batch_refuses_to_start_while_a_blind_memo_keeps_a_name(make_pack, monkeypatch):
    """The preflight runs the audit's residue pass on every blind memo: with the masking broken, names are left and
    the batch does not start; with it working, nothing is left."""
    import madbench.data.blind as blind
    from madbench.data.blind import BlindOptions
    from madbench.data.memo import build_memo
    from madbench.runner.preflight import blind_residue_problems
    from tests.data.test_blind import blind_world
    from tests.runner.test_blind_runs import config

    pack, scenario = blind_world(make_pack)
    memo = build_memo(scenario, pack)
    memo.sections[-1].items[-1] = memo.sections[-1].items[-1].model_copy(update={"value": "Zentrix sales rose.", "unit": "text"})
    cfg = config("causal-debate-3.yaml")
    assert cfg.blind == BlindOptions()
    assert blind_residue_problems([cfg], [scenario], {scenario.id: memo}, pack) == []

    class Unmasked(blind.Masker):
        def __call__(self, text: str, terms: bool = True) -> str:
            return text

    monkeypatch.setattr(blind, "Masker", Unmasked)
    problems = blind_residue_problems([cfg], [scenario], {scenario.id: memo}, pack)
    assert len(problems) == 1 and problems[0].startswith(f"scenario {scenario.id}: its blind memo still holds")
    assert "Zentrix" in problems[0]


def test_the_audit_measures_how_much_of_the_texts_is_masked(make_pack):
    """The share of the blind texts' tokens that are masks, by class, and the masked lower-case words by count."""
    from madbench.data.blind import BlindOptions, blind_memo, pack_companies
    from madbench.data.memo import build_memo
    from madbench.runner.leakage_audit import AuditMemo, masked_share
    from tests.data.test_blind import blind_world

    pack, scenario = blind_world(make_pack)
    memo = build_memo(scenario, pack)
    fact = "Sales of zorbleflux tools rose as zorbleflux demand grew."
    memo.sections[-1].items[-1] = memo.sections[-1].items[-1].model_copy(update={"value": fact, "unit": "text"})
    blinded = blind_memo(memo, scenario, pack_companies(pack.universe), BlindOptions())
    share = masked_share([AuditMemo(scenario, blinded)])
    assert dict(share.terms)["zorbleflux"] == 2 and share.by_class["TERM"] >= 2
    texts = [it.value for it in blinded.memo.items if it.unit == "text"]
    assert share.tokens > sum(share.by_class.values()) and 0 < share.share < 1 and len(texts) > 1


def test_the_audit_prints_each_memos_macro_k_anonymity(make_pack, tmp_path, capsys):
    """Offline: the residue table's macro_k is the number of the pack's quarters with the same blind macro block;
    exact levels give each quarter its own block."""
    from madbench.data.blind import BlindOptions
    from madbench.data.macro_anonymity import k_anonymity, reference_blocks
    from madbench.data.market.pack import load_pack

    pack_dir = make_pack(tickers=tuple(TICKERS))
    scenarios = [{"id": f"s{i}", "invest_quarter": q, "tickers": TICKERS[:3]} for i, q in enumerate(QUARTERS[:3])]
    path = tmp_path / "scenarios.yaml"
    path.write_text(yaml.safe_dump({"scenarios": scenarios}))
    for macro in ("exact", "regime"):
        out = tmp_path / macro
        assert main(["leakage", "audit", "--scenarios", str(path), "--pack", str(pack_dir), "--blind-macro", macro,
                     "--out", str(out)]) == 0
        printed = capsys.readouterr().out
        residue = pd.read_parquet(out / "residue.parquet").set_index("quarter")
        expected = k_anonymity(reference_blocks(load_pack(pack_dir), BlindOptions(macro=macro)))
        assert residue["macro_k"].to_dict() == {q: expected[q] for q in QUARTERS[:3]}
        assert f"how many show the same blind macro block; 1 dates the quarter): min {residue['macro_k'].min()}" in printed
    assert (pd.read_parquet(tmp_path / "exact" / "residue.parquet")["macro_k"] == 1).all()


def test_two_different_audits_without_out_write_to_two_folders_named_after_what_they_audit(make_pack, tmp_path, capsys,
                                                                                           monkeypatch):
    from madbench.results.layout import LEAKAGE_AUDIT

    pack_dir = make_pack(tickers=tuple(TICKERS))
    path = tmp_path / "paper-35.yaml"
    path.write_text(yaml.safe_dump({"scenarios": [
        {"id": f"s{i}", "invest_quarter": q, "tickers": TICKERS[:3]} for i, q in enumerate(QUARTERS[:2])]}))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    folders = []
    for extra in ([], ["--blind-macro", "exact"]):
        assert main(["leakage", "audit", "--scenarios", str(path), "--pack", str(pack_dir), *extra]) == 0
        printed = capsys.readouterr().out
        folders.append(printed.split("tables: ")[1].split()[0].removesuffix(",").rsplit("/", 1)[0])
    root = Path("results") / LEAKAGE_AUDIT  # the folder a batch's own audit is named after, too
    assert folders == [str(root / "paper-35"), str(root / "paper-35+blind-macro-exact")]
    macro_k = [pd.read_parquet(work / f / "residue.parquet")["macro_k"].tolist() for f in folders]
    assert macro_k[1] == [1, 1] and macro_k[0] != macro_k[1]  # each folder kept its own audit
