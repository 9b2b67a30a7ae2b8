"""A batch's leakage audit before its debates (runner/leakage_gate.py): recorded, and a refusal when a model
recognises the blind memos beyond chance (the simulator recognising every memo), a warning with ``on_leak: warn``,
and a clear pass offline (a rule-based model answers "unknown")."""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import signal
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from madbench.data.errors import InputError
from madbench.data.market.pack import load_pack
from madbench.data.residue import RESIDUE_KINDS
from madbench.data.scenario import Scenario
from madbench.debate.config import DebateConfig
from madbench.gateway import ModelRouting, ModelSpec
from madbench.results.leakage_record import audit_dir, read_audit
from madbench.runner.batch import LeakageAuditSpec
from madbench.runner.budget import BudgetRecord, read_budget, write_budget
from madbench.runner.cli import main
from madbench.runner.leakage_gate import audit_batch
from madbench.sim.identify_answers import IdentifyAnswerer
from madbench.sim.provider import SimConfig, SimProvider
from tests.runner.test_batch_budget import paid_in_traces
from tests.runner.test_blind_runs import ROOT, config

TICKERS = ["AAA", "BBB", "CCC", "DDD", "EEE"]
QUARTERS = ["2020Q3", "2021Q1", "2021Q3", "2022Q1"]


def world(make_pack, n: int = 8) -> tuple:
    pack = load_pack(make_pack(tickers=tuple(TICKERS)))
    universes = list(itertools.combinations(TICKERS, 3))
    scenarios = [Scenario(id=f"s{i}", invest_quarter=QUARTERS[i % len(QUARTERS)], tickers=list(universes[i]))
                 for i in range(n)]
    return pack, scenarios


def on_model(cfg: DebateConfig, spec: ModelSpec) -> DebateConfig:
    return DebateConfig.model_validate({**cfg.model_dump(mode="json"), "models": ModelRouting.single(spec).model_dump()})


def test_offline_the_rule_model_recognises_nothing_and_the_audit_is_recorded(make_pack, tmp_path):
    pack, scenarios = world(make_pack)
    named, blind = config("causal-debate-3.yaml", blind=False), config("causal-debate-3.yaml")
    record = audit_batch([named, blind], scenarios, pack, tmp_path, "batch.yaml", LeakageAuditSpec(), tmp_path / "cache", None)
    assert record.decision == "clear" and record.memos == len(scenarios) and not record.leaks
    assert {p.model for p in record.probes} >= {"rules/macro"} and all(p.hits == 0 for p in record.probes)
    assert record.residue == dict.fromkeys(RESIDUE_KINDS, 0) and record.macro_k_min >= 1
    assert read_audit(tmp_path) == record
    residue = pd.read_parquet(audit_dir(tmp_path) / "residue.parquet")
    assert len(residue) == len(scenarios) and residue["macro_k"].min() == record.macro_k_min
    with pytest.raises(InputError, match="no config of the batch is blind"):
        audit_batch([named], scenarios, pack, tmp_path, "batch.yaml", LeakageAuditSpec(), None, None)


@pytest.mark.slow  # about 40 s on a loaded 2-core machine (24 probe calls through the gateway and the simulator)
def test_a_recognising_model_stops_the_batch_or_is_warned_about(make_pack, tmp_path, capsys):
    pack, scenarios = world(make_pack)
    with SimProvider(identify=IdentifyAnswerer(share=1.0, seed=0)) as sim:
        spec = ModelSpec(model="openai/madbench-sim", api_base=sim.url, send_context=True,
                         price={"input_usd_per_mtok": 1.0, "output_usd_per_mtok": 1.0})
        blind = on_model(config("causal-debate-3.yaml"), spec)
        with pytest.raises(InputError, match="the blind memos are recognised") as err:
            audit_batch([blind], scenarios, pack, tmp_path / "a", "batch.yaml", LeakageAuditSpec(), tmp_path / "cache", 5.0)
        assert "openai/madbench-sim names the quarter of 8 of 8" in str(err.value) and "no debate was started" in str(err.value)
        refused = read_audit(tmp_path / "a")
        assert refused is not None and refused.decision == "refused"  # recorded before refusing
        assert 0 < read_budget(tmp_path / "a", 5.0).spent_usd < 5.0  # the probe's spend is on the batch's ledger
        record = audit_batch([blind], scenarios, pack, tmp_path / "b", "batch.yaml", LeakageAuditSpec(on_leak="warn"),
                             tmp_path / "cache", None)
    assert record.decision == "warned" and {p.target for p in record.leaks} == {"asset", "quarter"}
    assert all(p.cp_low > p.chance for p in record.leaks)
    assert "leakage audit: openai/madbench-sim names the" in capsys.readouterr().err
    with SimProvider(identify=IdentifyAnswerer(share=0.0, seed=0)) as sim:  # guesses only: nothing beats chance
        spec = ModelSpec(model="openai/madbench-sim", api_base=sim.url, send_context=True)
        record = audit_batch([on_model(config("causal-debate-3.yaml"), spec)], scenarios, pack, tmp_path / "c",
                             "batch.yaml", LeakageAuditSpec(), None, None)
    assert record.decision == "clear"


def _probe_until_killed(pack_dir: str, url: str, root: str) -> None:
    """A driver's leakage probe (in its own process, so that it can be killed -9 mid-call)."""
    pack, scenarios = world(lambda **_: Path(pack_dir))
    spec = ModelSpec(model="openai/madbench-sim", api_base=url, send_context=True,
                     price={"input_usd_per_mtok": 1.0, "output_usd_per_mtok": 1.0})
    audit_batch([on_model(config("causal-debate-3.yaml"), spec)], scenarios, pack, Path(root), "batch.yaml",
                LeakageAuditSpec(), None, 5.0)


@pytest.mark.slow  # a spawned driver process (its imports: about 10 s on a loaded 2-core machine)
def test_a_driver_killed_during_the_probe_leaves_its_call_in_flight_counted(make_pack, tmp_path):
    pack_dir = make_pack(tickers=tuple(TICKERS))
    with SimProvider(SimConfig(latency_median_s=600.0, latency_sigma=0.01)) as sim:  # no answer before the kill
        child = multiprocessing.get_context("spawn").Process(
            target=_probe_until_killed, args=(str(pack_dir), sim.url, str(tmp_path / "r")))
        child.start()
        deadline = time.monotonic() + 300
        while sim.stats.requests == 0 and child.is_alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert sim.stats.requests >= 1, f"the probe sent nothing (exit code {child.exitcode})"
        os.kill(child.pid, signal.SIGKILL)
        child.join()
    on_disk = BudgetRecord.model_validate_json((tmp_path / "r" / "budget.json").read_text())
    read = read_budget(tmp_path / "r", 5.0)
    # Counted at its reserved maximum, not lost with the driver; and for good: no late answer can come for it.
    assert on_disk.in_flight_usd and read.spent_usd == pytest.approx(sum(on_disk.in_flight_usd.values()))
    assert "they died with the driver's leakage probe, so no answer will come" in (read.crash_note or "")
    assert not read.counted_at_max


@pytest.mark.slow  # one small batch on the session's Ray, its probe and debates on the simulator
def test_the_probes_spend_is_this_invocations_and_a_crash_before_it_is_told(make_pack, tmp_path, ray_local, capsys):
    pack_dir = make_pack(tickers=tuple(TICKERS))
    root = tmp_path / "results" / "probe-spend"
    with SimProvider() as sim:
        scenarios = tmp_path / "scenarios.yaml"
        scenarios.write_text(yaml.safe_dump({"scenarios": [{"id": "s0", "invest_quarter": "2021Q3",
                                                            "tickers": TICKERS[:3]}]}))
        batch = tmp_path / "batch.yaml"
        batch.write_text(yaml.safe_dump({
            "name": "probe-spend", "scenarios": {"file": str(scenarios)}, "pack": str(pack_dir),
            "configs": [str(ROOT / "configs" / "debate" / "single-causal.yaml"),
                        str(ROOT / "configs" / "debate" / "causal-debate-3-blind.yaml")],
            "model": {"model": "openai/gpt-4o-mini", "api_base": sim.url, "send_context": True},
            "replicates": 1, "results_dir": str(tmp_path / "results"), "cache_dir": str(tmp_path / "cache"),
            "retries": 0, "workers": 1, "max_cost_usd": 1.0, "leakage_audit": {"on_leak": "warn"}}))
        # A crash of an earlier invocation left a paid call in flight: the probe reads it first, and says so.
        write_budget(root, BudgetRecord(cap_usd=1.0, spent_usd=0.01, in_flight_usd={"earlier-1": 0.02}))
        assert main(["run", str(batch)]) == 0
    out, err = capsys.readouterr()
    assert "1 paid call(s) were in flight when the last driver stopped" in err
    # The probe says it is running, and what it found, before the debates' lines.
    assert err.index("openai/gpt-4o-mini asked to identify 1 blind memo(s)") < err.index("leakage audit: clear") < \
        err.index("/2 runs: ")
    total = json.loads((root / "budget.json").read_text())["spent_usd"]
    probe = total - 0.03 - paid_in_traces(root)
    assert probe > 0  # the probe paid, besides the debates
    assert f"(${total - 0.03:.4f} in this one)" in out  # the probe's spend, and the debates', are this invocation's


def test_a_probe_that_cannot_fit_the_budget_is_one_line_and_recorded(make_pack, tmp_path):
    pack, scenarios = world(make_pack, n=2)
    with SimProvider() as sim:
        spec = ModelSpec(model="openai/madbench-sim", api_base=sim.url, send_context=True,
                         price={"input_usd_per_mtok": 1.0, "output_usd_per_mtok": 1.0})
        blind = on_model(config("causal-debate-3.yaml"), spec)
        with pytest.raises(InputError, match="the probe stopped at the batch's budget: budget of \\$1e-06 reached"):
            audit_batch([blind], scenarios, pack, tmp_path, "batch.yaml", LeakageAuditSpec(), None, 1e-6)
        assert sim.stats.requests == 0 and read_budget(tmp_path, 1e-6).reached  # refused before sending, and kept
        with pytest.raises(InputError, match="the batch stopped at its budget of \\$1e-06 \\(\\$0.0000 spent\\)"):
            audit_batch([blind], scenarios, pack, tmp_path, "batch.yaml", LeakageAuditSpec(), None, 1e-6)
