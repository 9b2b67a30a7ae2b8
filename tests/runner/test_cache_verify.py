"""Tamper evidence for the response cache: an answer edited in the cache, with its checksum
recomputed, is found by `madbench cache verify` from the hashes the runs' traces recorded, and a resumed run
served such an answer fails instead of silently using it. Runs are real debates against the simulated provider
(HTTP on 127.0.0.1), whose answers the cache stores; ``rules/`` answers are never cached."""

import asyncio
import gzip
import json
import sqlite3
from pathlib import Path

import pytest

from madbench.data.market.pack import load_pack
from madbench.data.scenario import Scenario
from madbench.debate.config_file import load_debate_config
from madbench.debate.events import LLMCall, RunEnd, last_attempt
from madbench.debate.trace import TraceWriter, read_trace
from madbench.gateway import ModelRouting, ModelSpec, ResponseCache
from madbench.gateway.cache import answer_sha256, decode_entry, encode_entry
from madbench.runner.cli import main
from madbench.runner.pipeline import run_debate
from madbench.runner.wiring import build_gateway
from madbench.sim.provider import SimProvider

ROOT = Path(__file__).resolve().parents[2]
TICKERS = ["AAA", "BBB", "CCC", "DDD"]
STORED = ROOT / "tests" / "debate" / "data"


@pytest.fixture
def sim():
    with SimProvider() as server:
        yield server


@pytest.fixture
def pack(make_pack):
    return load_pack(make_pack(tickers=tuple(TICKERS)))


def debate(pack, sim, cache_dir: Path, out: Path, sample_index: int = 0):
    """One mean3-causal run (three proposals) on the simulator, through a gateway on ``cache_dir``."""
    spec = ModelSpec(model="openai/madbench-sim", api_base=sim.url, send_context=True)
    config = load_debate_config(ROOT / "configs/debate/mean3-causal.yaml").model_copy(update={"models": ModelRouting.single(spec)})
    scenario = Scenario(id="s", invest_quarter="2021Q3", tickers=TICKERS, constraints={"max_weight": 0.6, "min_holdings": 2})
    with ResponseCache(cache_dir) as cache:
        return asyncio.run(run_debate(scenario, pack, config, build_gateway(cache=cache), out, sample_index))


def calls_of(trace: Path) -> list[LLMCall]:
    return [e for e in last_attempt(read_trace(trace).typed()) if isinstance(e, LLMCall)]


def tamper(cache_dir: Path, key: str) -> str:
    """Rewrite the answer under ``key`` as an editor would, in the index, recomputing the entry's checksum: the same
    JSON laid out differently, so it still validates and is served. Returns the new answer's hash."""
    with sqlite3.connect(cache_dir / "responses" / "cache.db") as con:
        (value,) = con.execute("SELECT value FROM Cache WHERE key = ?", (key,)).fetchone()
        body = decode_entry(bytes(value))
        body["response"]["content"] = json.dumps(json.loads(body["response"]["content"]), indent=2)
        con.execute("UPDATE Cache SET value = ? WHERE key = ?", (encode_entry(body), key))
    return answer_sha256(body["response"]["content"])


def verify(capsys, *args) -> tuple[int, str, str]:
    rc = main(["cache", "verify", *map(str, args)])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_verify_names_the_run_and_key_of_an_edited_entry(pack, sim, tmp_path, capsys):
    cache, out = tmp_path / "cache", tmp_path / "runs"
    runs = [debate(pack, sim, cache, out, k) for k in (0, 1)]
    assert [r.status for r in runs] == ["ok", "ok"]
    calls = calls_of(out / runs[0].run_id / "trace.jsonl")
    assert calls and all(c.answer_sha256 == answer_sha256(c.response) and not c.cached for c in calls)
    n = len(calls) + len(calls_of(out / runs[1].run_id / "trace.jsonl"))

    rc, stdout, _ = verify(capsys, out, "--cache-dir", cache)
    assert rc == 0 and stdout.startswith(f"checked {n} calls of 2 runs") and f"{n} match, 0 differ, 0 corrupt" in stdout

    key = calls[0].key
    tamper(cache, key)
    rc, stdout, _ = verify(capsys, out, "--cache-dir", cache)
    lines = stdout.splitlines()
    assert rc == 1 and len(lines) == 2, stdout  # one line for the mismatch, then the summary
    assert lines[0].startswith(f"run {runs[0].run_id}: call {calls[0].seq} (") and f"key {key}:" in lines[0]
    assert "edited or replaced after the run" in lines[0] and runs[1].run_id not in stdout

    rc, stdout, _ = verify(capsys, out, "--cache-dir", cache, "--json")
    summary = json.loads(stdout)
    assert rc == 1 and not summary["clean"] and summary["ok"] == n - 1
    assert [(m["run"], m["key"], m["recorded_sha256"]) for m in summary["mismatched"]] == \
        [(runs[0].run_id, key, calls[0].answer_sha256)]

    rc, stdout, _ = verify(capsys, out, "--cache-dir", cache, "--drop")
    assert rc == 1 and "dropped 1 entries" in stdout
    rc, stdout, _ = verify(capsys, out, "--cache-dir", cache)
    assert rc == 0 and f"{n - 1} match, 0 differ, 0 corrupt, 1 not in the cache" in stdout  # pruned: informational


def test_a_resumed_run_served_an_edited_answer_fails_until_the_entry_is_dropped(pack, sim, tmp_path, capsys):
    cache, out = tmp_path / "cache", tmp_path / "runs"
    first = debate(pack, sim, cache, out)
    result, trace = out / first.run_id / "result.json", out / first.run_id / "trace.jsonl"
    result.unlink()  # as if killed before its commit: the next pass runs it again from the cache
    replay = debate(pack, sim, cache, out)
    assert replay.status == "ok" and replay.totals["cached"] == replay.totals["calls"] == first.totals["calls"]  # no false alarm

    key = calls_of(trace)[1].key
    edited = tamper(cache, key)
    result.unlink()
    for _ in range(2):  # the served answer is traced, yet does not vouch for itself on the next attempt
        failed = debate(pack, sim, cache, out)
        assert failed.status == "failed" and f"cache key {key}: the entry was edited or replaced" in failed.error
        events = last_attempt(read_trace(trace).typed())
        served = [e for e in events if isinstance(e, LLMCall) and e.key == key]
        assert len(served) == 1 and served[0].cached and served[0].answer_sha256 == edited
        assert isinstance(events[-1], RunEnd) and events[-1].status == "failed"

    rc, stdout, _ = verify(capsys, out, "--cache-dir", cache, "--drop")
    assert rc == 1 and f"run {first.run_id}" in stdout and "dropped 1 entries" in stdout
    again = debate(pack, sim, cache, out)  # as `madbench run ... --retry-failed`: the failed run is run again
    assert again.status == "ok" and again.weights == first.weights
    assert [c.cached for c in calls_of(trace) if c.key == key] == [False]  # asked again, not served

    # The repair is complete: the failed attempts' events of the edited answer are superseded, not findings, and
    # verify says nothing that would have the genuine entry dropped now.
    rc, stdout, _ = verify(capsys, out, "--cache-dir", cache, "--json")
    summary = json.loads(stdout)
    assert rc == 0 and summary["clean"] and summary["superseded"] == 2 and summary["mismatched"] == []
    assert summary["ok"] == summary["calls"] - 2
    rc, stdout, _ = verify(capsys, out, "--cache-dir", cache)
    assert rc == 0 and "0 differ, 0 corrupt" in stdout and "2 superseded (an answer a resumed run refused" in stdout
    with ResponseCache(cache) as entries:
        (fresh,) = [c for c in calls_of(trace) if c.key == key]
        assert entries.inspect(key).answer_sha256 == fresh.answer_sha256 != edited  # the genuine answer stays


def test_an_answer_replaced_by_a_fresh_one_after_a_drop_is_superseded(tmp_path, capsys):
    """An answer a provider gives anew after its entry was dropped may differ (a model at temperature 1): the run's
    earlier answer to the same request is then superseded, and only the last fresh one is held against the cache."""
    with ResponseCache(tmp_path / "cache") as cache:
        cache.put("k", "m", {"response": {"content": "second"}})
    with TraceWriter(tmp_path / "runs" / "r1" / "trace.jsonl") as trace:
        for answer, cached in (("first", False), ("first", True), ("second", False), ("second", True)):
            trace.write(LLMCall(agent="macro", phase="propose", round=0, label="propose", key="k", model_requested="m",
                                model_used="m", is_llm=True, cached=cached, latency_s=0.1, response=answer,
                                answer_sha256=answer_sha256(answer)))
    rc, stdout, _ = verify(capsys, tmp_path / "runs", "--cache-dir", tmp_path / "cache")
    assert rc == 0 and "2 match, 0 differ" in stdout and "2 superseded" in stdout


def test_verify_reports_a_checksum_corrupt_entry(tmp_path, capsys):
    with ResponseCache(tmp_path / "cache") as cache:
        cache.put("k", "m", {"response": {"content": "hello"}})
    with sqlite3.connect(tmp_path / "cache" / "responses" / "cache.db") as con:
        (value,) = con.execute("SELECT value FROM Cache WHERE key='k'").fetchone()
        con.execute("UPDATE Cache SET value=? WHERE key='k'", (bytes(value).replace(b"hello", b"jello"),))
    with TraceWriter(tmp_path / "runs" / "r1" / "trace.jsonl") as trace:
        trace.write(LLMCall(agent="macro", phase="propose", round=0, label="propose", key="k", model_requested="m",
                            model_used="m", is_llm=True, cached=False, latency_s=0.1, response="hello",
                            answer_sha256=answer_sha256("hello")))
    rc, stdout, _ = verify(capsys, tmp_path / "runs", "--cache-dir", tmp_path / "cache")
    assert rc == 1 and stdout.splitlines()[0] == "run r1: call 0 (macro propose, round 0), key k: the cache entry is corrupt (checksum mismatch)"


def test_verify_reads_traces_written_before_answer_hashes(tmp_path, capsys):
    run = tmp_path / "old" / "r1"
    run.mkdir(parents=True)
    (run / "trace.jsonl").write_bytes(gzip.decompress((STORED / "trace-v0.1-desks.jsonl.gz").read_bytes()))
    ResponseCache(tmp_path / "cache").close()
    rc, stdout, _ = verify(capsys, tmp_path / "old", "--cache-dir", tmp_path / "cache")
    assert rc == 0 and " 0 match, 0 differ, 0 corrupt, " in stdout and "not in the cache" in stdout


@pytest.mark.parametrize("make,message", [
    (lambda p: p.write_text("x"), "not a directory"),
    (lambda p: p.mkdir(), "holds no run traces"),
])
def test_verify_rejects_a_results_dir_without_traces(tmp_path, capsys, make, message):
    make(tmp_path / "r")
    ResponseCache(tmp_path / "cache").close()
    rc, _, err = verify(capsys, tmp_path / "r", "--cache-dir", tmp_path / "cache")
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1


def test_verify_without_a_cache_is_an_input_error(tmp_path, capsys):
    rc, _, err = verify(capsys, tmp_path, "--cache-dir", tmp_path / "nowhere")
    assert rc == 2 and "no LLM response cache here" in err and not (tmp_path / "nowhere").exists()
