"""Provenance, replay, diff and export: a manifest says what produced the results, replay rebuilds them from the
traces and the cache with no provider request, diff explains two runs apart, export writes inspect_ai logs."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from madbench.data.errors import InputError
from madbench.gateway import LLMRequest, Message, ModelSpec, ResponseCache
from madbench.results import ResultsDir, read_manifest
from madbench.results import provenance as prov
from madbench.runner.cli import main
from madbench.runner.exit_codes import EXIT_INPUT, EXIT_RUNS_FAILED
from madbench.runner.replay import replay
from madbench.runner.wiring import build_gateway
from madbench.sim.provider import SimProvider, served_name

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs" / "debate"
SCENARIOS = {"scenarios": [
    {"id": "a", "invest_quarter": "2021Q3", "tickers": ["AAA", "BBB", "CCC"], "constraints": {"max_weight": 0.6}}]}
PRICED = "openai/gpt-4o-mini"  # in litellm's offline cost map: the simulator's calls have a cost


def test_a_fresh_batch_manifest_holds_the_commit_data_hashes_and_price_table(readme_rules35):
    p = read_manifest(readme_rules35[0] / "results" / "rules-35").provenance
    assert p is not None
    assert p.git.commit == subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                                          check=True).stdout.strip()
    assert p.git.dirty is not None
    scenario_file = ROOT / "configs" / "scenarios" / "market-35.yaml"
    assert p.data["scenarios"] == prov.tree_sha256(scenario_file) and len(p.data["pack"]) == 64
    assert len(p.price_table["cost_map_sha256"]) == 64 and p.price_table["litellm"] == p.packages["litellm"]
    assert p.platform["cpu_count"] >= 1 and p.cluster is not None and p.cluster["nodes"] >= 1


@pytest.mark.slow
def test_rules35_replays_identical_with_no_request_and_names_an_edited_value(finished_rules35, tmp_path, capsys):
    root = finished_rules35
    same = replay(root, scratch=tmp_path)
    assert same.identical and same.runs == 105 and same.provider_requests == 0, same.differences[:3]
    assert same.byte_identical == {"runs": True, "rounds": True, "calls": True}  # byte-stable tables

    table = pq.read_table(root / "runs.parquet")
    sharpe = table.column("sharpe").to_pylist()
    i = next(k for k, v in enumerate(sharpe) if v is not None)
    run_id, old = table.column("run_id")[i].as_py(), sharpe[i]
    sharpe[i] = old + 1.0
    edited = table.set_column(table.schema.get_field_index("sharpe"), "sharpe", pa.array(sharpe, pa.float64()))
    pq.write_table(edited, root / "runs.parquet")
    assert main(["replay", str(root)]) == EXIT_RUNS_FAILED
    out = capsys.readouterr().out
    assert f"runs: run {run_id}, column sharpe: stored {old + 1.0!r}, replayed {old!r}" in out
    assert "identical" not in out.splitlines()


@pytest.mark.slow
def test_a_sim_batch_copied_with_its_cache_replays_with_no_request(make_pack, tmp_path, ray_local, capsys):
    pack = make_pack()
    scen = tmp_path / "s.yaml"
    scen.write_text(yaml.safe_dump(SCENARIOS))
    with SimProvider() as sim:
        batch = tmp_path / "batch.yaml"
        batch.write_text(yaml.safe_dump({
            "name": "simmed", "scenarios": {"file": str(scen)}, "configs": [str(CONFIGS / "single-causal.yaml")],
            "model": {"model": PRICED, "api_base": sim.url, "send_context": True}, "replicates": 1, "pack": str(pack),
            "results_dir": str(tmp_path / "results"), "cache_dir": str(tmp_path / "cache"), "retries": 0, "workers": 1}))
        assert main(["run", str(batch), "--quiet"]) == 0
        capsys.readouterr()
        calls = ResultsDir(tmp_path / "results" / "simmed").calls
        llm = calls[calls["is_llm"]]
        assert len(llm) and set(llm["model_requested"]) == {PRICED}
        assert set(llm["model_served"]) == {served_name("gpt-4o-mini")}  # what the provider said it served
        # Elsewhere: the results and the cache copied to a fresh directory, the original gone.
        moved = tmp_path / "elsewhere"
        shutil.copytree(tmp_path / "results" / "simmed", moved / "simmed")
        shutil.copytree(tmp_path / "cache", moved / "cache")
        shutil.rmtree(tmp_path / "results")
        shutil.rmtree(tmp_path / "cache")
        before = sim.stats.requests
        assert main(["replay", str(moved / "simmed"), "--cache-dir", str(moved / "cache"), "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert sim.stats.requests == before  # not one request reached the simulator
        assert out["identical"] and out["provider_requests"] == 0 and out["cached_answers_checked"] >= len(llm) // 2
        # Without the cache the traced answers cannot be checked: replay says so rather than calling anyone.
        assert main(["replay", str(moved / "simmed"), "--cache-dir", str(tmp_path / "nothing")]) == EXIT_INPUT
        assert sim.stats.requests == before


def test_a_replay_gateway_refuses_a_call_the_cache_does_not_hold(tmp_path):
    with SimProvider() as sim, ResponseCache(tmp_path / "cache") as cache:
        gateway = build_gateway(cache=cache, replay=True)
        request = LLMRequest(model=PRICED, messages=[Message(role="user", content="hi")])
        with pytest.raises(InputError, match="replay needs an answer of openai/gpt-4o-mini it does not hold"):
            asyncio.run(gateway.complete(request, ModelSpec(model=PRICED, api_base=sim.url)))
        assert sim.stats.requests == 0 and gateway.requests == 0


def _debate(tmp_path: Path, pack: Path, temperature: float, *extra: str) -> list[str]:
    config = yaml.safe_load((CONFIGS / "causal-debate-3.yaml").read_text()) | {"temperature": temperature}
    path = tmp_path / f"causal-debate-3-t{temperature}.yaml"
    path.write_text(yaml.safe_dump(config))
    return ["debate", "a", "--scenarios", str(tmp_path / "s.yaml"), "--config", str(path), "--model", "rules/auto",
            "--pack", str(pack), "--out", str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache"), "--json", *extra]


def test_diff_of_two_runs_differing_in_temperature_names_it_and_the_first_request(make_pack, tmp_path, capsys):
    pack = make_pack()
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(SCENARIOS))
    run_dirs = []
    for t in (0.2, 0.7):
        assert main(_debate(tmp_path, pack, t)) == 0
        run_dirs.append(tmp_path / "runs" / json.loads(capsys.readouterr().out)["run_id"])
    manifest = json.loads((run_dirs[0] / "manifest.json").read_text())
    assert manifest["provenance"]["data"]["scenarios"] == prov.tree_sha256(tmp_path / "s.yaml")
    assert main(["diff", *map(str, run_dirs)]) == 0
    out = capsys.readouterr().out
    config = out.split("config:", 1)[1].split("\nscenario:", 1)[0]
    assert config.strip().splitlines() == ["temperature: 0.2 -> 0.7"]  # the one config field that differs
    assert "first differing request: call" in out and "request_params.temperature: 0.2 -> 0.7" in out
    assert "data: same" in out and "code: same" in out and '-  "temperature": 0.2' in out


def test_require_clean_refuses_a_dirty_checkout_before_anything_runs(make_pack, tmp_path, monkeypatch, capsys):
    pack = make_pack()
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(SCENARIOS))
    dirty = prov.GitState(root=str(ROOT), commit="0" * 40, dirty=True)
    monkeypatch.setattr(prov, "git_state", lambda root=None: dirty)
    assert main(_debate(tmp_path, pack, 0.2, "--require-clean")) == EXIT_INPUT
    assert "--require-clean" in capsys.readouterr().err and not (tmp_path / "runs").exists()


def test_git_state_sees_uncommitted_changes(tmp_path):
    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)
    git("init", "-q")
    (tmp_path / "f.txt").write_text("a")
    git("add", "f.txt")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "x")
    clean = prov.git_state(tmp_path)
    assert clean.commit and clean.dirty is False
    (tmp_path / "f.txt").write_text("b")
    assert prov.git_state(tmp_path).dirty is True
    assert prov.dirty_warning(prov.git_state(tmp_path)) is not None
    assert prov.git_state(tmp_path / "not-a-repo-dir").commit is None


def test_inspect_export_of_rules35_reads_back_with_inspect_ai(readme_rules35, tmp_path):
    log_api = pytest.importorskip("inspect_ai.log")
    root = readme_rules35[0] / "results" / "rules-35"
    assert main(["export", str(root), "--format", "inspect", "--out", str(tmp_path / "logs")]) == 0
    runs = ResultsDir(root).runs
    logs = sorted((tmp_path / "logs").glob("*.json"))
    assert [p.stem for p in logs] == sorted(runs["config"].unique())
    for path in logs:
        log = log_api.read_eval_log(str(path))
        part = runs[runs["config"] == path.stem]
        assert len(log.samples) == len(part) and log.eval.metadata["provenance"]["git"]["commit"]
        by_sample = {(r.scenario_id, r.replicate + 1): r for r in part.itertuples()}
        for sample in log.samples:
            row = by_sample[(sample.id, sample.epoch)]
            assert sample.scores["total_return_pct"].value == row.total_return_pct
            assert sample.scores["rho_bar"].value == row.rho_bar
            assert sample.messages  # each turn's answers
    assert main(["export", str(root), "--format", "jsonl", "--out", str(tmp_path / "jsonl")]) == 0
    records = [json.loads(line) for line in (tmp_path / "jsonl" / "runs.jsonl").read_text().splitlines()]
    assert len(records) == len(runs) and records[0]["record"] == "madbench.run" and records[0]["config"]["name"]
