"""`madbench export` of a batch with a failed run: one sample (one record) per run that ended, the failed one marked
as an error with its reason, read back with inspect_ai's own reader."""

import json

import pytest
import yaml

from madbench.runner.cli import main
from madbench.sim.provider import SimProvider
from tests.runner.test_batch import ROOT, TICKERS

REFUSAL = "I would rather not grade this."


def refuse_to_grade_three_tickers(context, content):
    """The CRIT grader answers the three-ticker scenario's proposal (it cites no DDD evidence) with prose, never the
    JSON asked for: that run fails at its CRIT call once the validation retries are spent, after its proposal was
    answered; every other call, and the four-ticker scenario's run, is answered as usual."""
    return REFUSAL if "argument" in context and "DDD" not in json.dumps(context) else content


@pytest.mark.slow
def test_exports_hold_every_run_that_ended_with_the_failed_one_marked_with_its_reason(make_pack, tmp_path):
    log_api = pytest.importorskip("inspect_ai.log")
    scen = tmp_path / "scenarios.yaml"
    scen.write_text(yaml.safe_dump({"scenarios": [
        {"id": "four", "invest_quarter": "2021Q3", "tickers": TICKERS, "constraints": {"max_weight": 0.6}},
        {"id": "three", "invest_quarter": "2021Q3", "tickers": TICKERS[:3], "constraints": {"max_weight": 0.6}}]}))
    with SimProvider(answer_filter=refuse_to_grade_three_tickers) as sim:
        batch = tmp_path / "batch.yaml"
        batch.write_text(yaml.safe_dump({
            "name": "t", "scenarios": {"file": str(scen)}, "configs": [str(ROOT / "configs/debate/single-causal.yaml")],
            "model": {"model": "openai/madbench-sim", "api_base": sim.url, "send_context": True},
            "replicates": 1, "pack": str(make_pack(tickers=tuple(TICKERS))), "results_dir": str(tmp_path / "results"),
            "cache_dir": str(tmp_path / "cache"), "retries": 0, "max_in_flight": 2, "workers": 1}))
        assert main(["run", str(batch), "--quiet"]) == 1
    root = tmp_path / "results" / "t"
    assert main(["export", str(root), "--format", "inspect", "--out", str(tmp_path / "inspect")]) == 0
    log = log_api.read_eval_log(str(tmp_path / "inspect" / "single-causal.json"))
    samples = {s.id: s for s in log.samples}
    assert set(samples) == {"four", "three"} and log.results.completed_samples == 1
    assert samples["four"].error is None and samples["four"].scores["sharpe"].value is not None
    failed = samples["three"]
    assert failed.error is not None and "macro crit (round 0)" in failed.error.message
    assert "still invalid after" in failed.error.message
    assert failed.metadata["status"] == "failed" and failed.messages  # the answered calls before its failure
    assert [m.metadata["phase"] for m in failed.messages] == ["propose", "propose"]  # the call, then its answer
    assert main(["export", str(root), "--format", "jsonl", "--out", str(tmp_path / "jsonl")]) == 0
    records = {r["row"]["scenario_id"]: r for r in map(json.loads, (tmp_path / "jsonl" / "runs.jsonl").read_text().splitlines())}
    assert set(records) == {"four", "three"}
    assert records["four"]["status"] == "ok" and records["four"]["error"] is None
    assert records["three"]["status"] == "failed" and "still invalid after" in records["three"]["error"]
    assert records["three"]["scenario"]["id"] == "three" and records["three"]["config"]["name"] == "single-causal"
