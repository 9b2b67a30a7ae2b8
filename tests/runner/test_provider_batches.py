"""Provider batch mode against the simulated provider's /v1/files and /v1/batches, over real HTTP.

The collector alone (in the test's event loop): one provider batch for the requests of every blocked run, an
expired batch resubmitted for its missing requests only, a restarted collector re-attaching to the batch a
killed one left in flight, a creation cut off before its id was journaled found again by its input file. The
gateway in batch mode: a validation failure asked again with its feedback in the next batch, a cached call never
batched. Then the whole runner (Ray, the CLI): the a7 debates in batch mode against a synchronous run, and a
driver killed with SIGKILL while a batch is in flight.
"""

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from madbench.debate.trace import read_trace
from madbench.eval.report.figures import realised_saving
from madbench.gateway import LLMRequest, Message, ModelSpec, OutputInvalid, ResponseCache
from madbench.gateway.providers.batching import BatchAPI, current_party
from madbench.results import run_files
from madbench.runner.cli import main
from madbench.runner.provider_batches import Collector, JournalEntry, journal_summary, read_journal
from madbench.runner.wiring import build_gateway
from madbench.sim.provider import SimProvider
from tests.runner.test_batch import ROOT, TICKERS

FAST = {"poll_s": 0.1, "settle_s": 0.1, "idle_s": 1.0}


def group_for(sim) -> dict:
    return {"provider": "openai", "model": "madbench-sim", "api_base": sim.url, "api_key_env": None}


def body(text: str) -> dict:
    return {"model": "madbench-sim", "messages": [{"role": "user", "content": text}]}


def content(line: dict) -> str:
    return line["response"]["body"]["choices"][0]["message"]["content"]


async def started(root, **opt) -> Collector:
    c = Collector(str(root), None, FAST | opt)
    await c.start()
    return c


def test_the_requests_of_every_blocked_run_go_in_one_provider_batch_journaled_before_it_is_sent(tmp_path):
    async def go(sim):
        c = await started(tmp_path)
        for run in ("r1", "r2"):
            await c.expect(run)
        asks = [c.ask(f"r{i % 2 + 1}", group_for(sim), f"k{i}", body(f"q{i}")) for i in range(4)]
        return await asyncio.gather(*asks)

    with SimProvider() as sim:
        sim.batches.config.completion_delay_s = 0.3
        lines = asyncio.run(go(sim))
        assert len(sim.batches.batches) == 1 and sim.batches.submitted == {f"k{i}": 1 for i in range(4)}
        assert [content(x) for x in lines] == [content({"response": {"body": sim.reply(body(f"q{i}"))}}) for i in range(4)]
    (entry,) = read_journal(tmp_path)
    assert entry.state == "completed" and entry.collected and entry.answered == 4 and entry.batch_id and entry.input_file_id
    assert entry.keys == [f"k{i}" for i in range(4)] and entry.pricing.startswith("unknown")
    assert (tmp_path / "provider_batches" / f"{entry.id}.output.jsonl").exists()
    assert journal_summary(tmp_path)["provider_batches"] == 1


def test_a_flush_waits_for_every_run_in_flight_to_block(tmp_path):
    async def go(sim):
        c = await started(tmp_path, idle_s=5.0)
        for run in ("r1", "r2"):
            await c.expect(run)
        first = asyncio.ensure_future(c.ask("r1", group_for(sim), "a", body("a")))
        await asyncio.sleep(1.0)  # r2 is still busy: nothing is sent yet
        sent_before = len(sim.batches.batches)
        await c.ask("r2", group_for(sim), "b", body("b"))
        await first
        return sent_before

    with SimProvider() as sim:
        assert asyncio.run(go(sim)) == 0
        assert len(sim.batches.batches) == 1 and set(sim.batches.submitted) == {"a", "b"}


def test_an_expired_batch_is_resubmitted_for_its_missing_requests_only(tmp_path):
    async def go(sim):
        c = await started(tmp_path)
        return await asyncio.gather(*[c.ask(None, group_for(sim), f"k{i}", body(f"q{i}")) for i in range(6)])

    with SimProvider() as sim:
        sim.batches.config.expire_next = 1  # the first batch expires with half its lines answered
        lines = asyncio.run(go(sim))
        first, second = (sim.batches.batches[b] for b in sorted(sim.batches.batches))
        done = {json.loads(x)["custom_id"] for x in sim.batches.files[first.output_file_id][1].decode().splitlines()}
        assert first.status == "expired" and len(done) == 3
        assert {x["custom_id"] for x in second.lines} == {f"k{i}" for i in range(6)} - done  # only the missing ones
        assert all("response" in x and x["response"]["status_code"] == 200 for x in lines)
    states = [(e.state, e.answered, e.resubmitted) for e in read_journal(tmp_path)]
    assert states == [("expired", 3, 3), ("completed", 3, 0)]


def test_a_restarted_collector_reattaches_to_the_batch_in_flight_and_submits_nothing_twice(tmp_path):
    async def killed_while_in_flight(sim):
        c = await started(tmp_path)
        for i in range(3):
            asyncio.ensure_future(c.ask(None, group_for(sim), f"k{i}", body(f"q{i}")))
        while not any(e.batch_id for e in read_journal(tmp_path)):
            await asyncio.sleep(0.05)
        # the loop ends here: the collector and its calls die with it, the batch goes on at the provider

    async def restarted(sim, asks: list[int]):
        c = await started(tmp_path)
        while not read_journal(tmp_path)[0].collected:  # re-attached: it polls the batch it did not create
            await asyncio.sleep(0.05)
        return await asyncio.gather(*[c.ask(None, group_for(sim), f"k{i}", body(f"q{i}")) for i in asks])

    with SimProvider() as sim:
        sim.batches.config.completion_delay_s = 1.5
        asyncio.run(killed_while_in_flight(sim))
        assert read_journal(tmp_path)[0].state in ("validating", "in_progress")
        lines = asyncio.run(restarted(sim, [0, 1]))  # answered after the kill: served from the batch, not sent again
        assert read_journal(tmp_path)[0].undelivered == ["k2"]  # journaled: a second restart serves it too
        lines += asyncio.run(restarted(sim, [2]))
        assert len(sim.batches.batches) == 1 and max(sim.batches.submitted.values()) == 1
        assert [content(x) for x in lines] == [content({"response": {"body": sim.reply(body(f"q{i}"))}}) for i in range(3)]
        asyncio.run(restarted(sim, [0]))  # served once: asked again (its answer failed validation, say), it is a new call
        assert sim.batches.submitted["k0"] == 2
    assert read_journal(tmp_path)[0].state == "completed" and read_journal(tmp_path)[0].undelivered == []


def test_a_creation_cut_off_before_its_id_was_journaled_is_found_by_its_input_file(tmp_path):
    async def go(sim):
        api = BatchAPI(group_for(sim))
        lines = [{"custom_id": "k", "method": "POST", "url": "/v1/chat/completions", "body": body("q")}]
        file_id = await api.upload(lines, "in.jsonl")
        await api.create(file_id, {})  # created at the provider, but the driver died before journaling its id
        folder = tmp_path / "provider_batches"
        folder.mkdir()
        for entry in (JournalEntry(id="pb-cut", **group_for(sim), keys=["k"], state="submitting", input_file_id=file_id,
                                   created="1"),
                      JournalEntry(id="pb-intent", **group_for(sim), keys=["j"], created="2")):  # never uploaded
            (folder / f"{entry.id}.json").write_text(entry.model_dump_json())
        c = await started(tmp_path)
        return await c.ask(None, group_for(sim), "k", body("q"))

    with SimProvider() as sim:
        line = asyncio.run(go(sim))
        assert line["response"]["status_code"] == 200 and len(sim.batches.batches) == 1
    assert [(e.id, e.state) for e in read_journal(tmp_path)] == [("pb-cut", "completed"), ("pb-intent", "abandoned")]


def test_the_gateway_in_batch_mode_retries_an_invalid_answer_with_feedback_in_the_next_batch_and_never_batches_a_cached_call(
        tmp_path):
    seen = []

    def first_answer_invalid(content, spec):
        seen.append(content)
        if len(seen) == 1:
            raise OutputInvalid("weights must sum to 1")
        return json.loads(content)

    async def go(sim, cache, spec):
        gateway = build_gateway(cache=cache, collector=await started(tmp_path / "results"))
        request = LLMRequest(model=spec.model, messages=[Message(role="user", content="allocate")])
        first = await gateway.complete(request, spec, first_answer_invalid)
        again = await gateway.complete(request, spec, first_answer_invalid)
        return first, again

    with SimProvider() as sim, ResponseCache(tmp_path / "cache") as cache:
        spec = ModelSpec(model="openai/madbench-sim", api_base=sim.url)
        first, again = asyncio.run(go(sim, cache, spec))
        batches = [sim.batches.batches[b] for b in sorted(sim.batches.batches)]
        assert len(batches) == 2 and [len(b.lines) for b in batches] == [1, 1]
        retry = batches[1].lines[0]["body"]["messages"]
        assert retry[-1]["role"] == "user" and "weights must sum to 1" in retry[-1]["content"]  # the feedback
    assert first.validation_retries == 1 and not first.cached
    assert again.cached and again.content == first.content  # from the cache: no third batch


def test_a_run_waiting_for_the_identical_request_of_another_run_counts_as_blocked(tmp_path):
    """Two runs ask the same question (a matched pair's control and treatment do, phase after phase): one sends it,
    the other waits for its answer (single flight). Both are blocked, so the batch goes as soon as they are, not
    after ``idle_s`` (an hour here: the test would time out)."""
    async def go(sim, cache, spec):
        collector = await started(tmp_path / "results", idle_s=3600.0, window_s=3600.0)
        gateway = build_gateway(cache=cache, collector=collector)
        request = LLMRequest(model=spec.model, messages=[Message(role="user", content="allocate")])

        async def run(party: str):
            current_party.set(party)
            return await gateway.complete(request, spec, lambda content, spec: content)

        for party in ("r1", "r2"):
            await collector.expect(party)
        return await asyncio.wait_for(asyncio.gather(run("r1"), run("r2")), timeout=120)

    with SimProvider() as sim, ResponseCache(tmp_path / "cache") as cache:
        spec = ModelSpec(model="openai/madbench-sim", api_base=sim.url)
        one, two = asyncio.run(go(sim, cache, spec))
        assert len(sim.batches.batches) == 1 and list(sim.batches.submitted.values()) == [1]  # sent once
    assert one.content == two.content and sorted([one.cached, two.cached]) == [False, True]


# ---------------------------------------------------------------------------------------------- the whole runner

def a7_batch(tmp_path: Path, pack: Path, sim, name: str, execution=None, model_name: str = "openai/madbench-sim",
             workers: int = 2) -> Path:
    """The a7 batch (configs/batches/a7.yaml: its two configs) on two scenarios of a synthetic pack, every call to
    the simulated provider (rule-based answers), as tests/runner/test_chaos.py points batches at it. A listed
    ``model_name`` (the simulator answers any) is priced at its list prices."""
    a7 = yaml.safe_load((ROOT / "configs/batches/a7.yaml").read_text())
    scen = tmp_path / "scenarios.yaml"
    scen.write_text(yaml.safe_dump({"scenarios": [
        {"id": f"s{q}", "invest_quarter": q, "tickers": TICKERS, "constraints": {"max_weight": 0.6}}
        for q in ("2021Q3", "2022Q1")]}))
    model = {"model": model_name, "api_base": sim.url, "send_context": True,
             "limits": {"max_concurrency": 16}, "retry": {"backoff_base_s": 0.2, "backoff_max_s": 2.0}}
    spec = {"name": name, "scenarios": {"file": str(scen)}, "pack": str(pack), "model": model,
            "configs": [str((ROOT / "configs/batches" / c).resolve()) for c in a7["configs"]], "pairs": a7["pairs"],
            "results_dir": str(tmp_path / "results"), "cache_dir": str(tmp_path / f"cache-{name}"),
            "max_in_flight": 8, "workers": workers, "retries": 0}
    if execution is not None:
        spec["execution"] = execution
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def run_here(batch: Path, capsys) -> tuple[int, str]:
    """`madbench run` in this process, on the session's Ray: its exit status and stderr."""
    capsys.readouterr()
    rc = main(["run", str(batch), "--quiet"])
    return rc, capsys.readouterr().err


def steps_of(trace: Path) -> list[list[str]]:
    """A run's model calls in steps: the calls of one gathered phase (same phase, round and label) in a row."""
    steps: list[list[str]] = []
    last = None
    for e in read_trace(trace).events:
        if e["event"] == "llm_call":
            here = (e["phase"], e["round"], e["label"])
            if here != last:
                steps.append([])
            steps[-1].append(e["key"])
            last = here
    return steps


@pytest.fixture
def pack(make_pack):
    return make_pack(tickers=tuple(TICKERS))


#: idle_s: a run whose actor is slow between two phases (a loaded machine) is waited for, so that the runs stay in
#: lockstep; in lockstep every run is blocked on a call and the batch goes after settle_s, which must outlast the gap
#: between two sibling calls of a phase on a loaded machine (0.3 s split a run's first phase once under the full suite).
BATCH_MODE = {"mode": "batch", "poll_s": 0.2, "settle_s": 1.5, "idle_s": 10.0}


@pytest.mark.slow
def test_a7_in_provider_batch_mode_is_one_provider_batch_per_phase_and_allocates_as_a_sync_run(pack, tmp_path, ray_local,
                                                                                               capsys):
    with SimProvider() as sim:
        t = time.monotonic()
        priced = "openai/gpt-4o-mini"  # priced, so that the report shows what batch mode saved
        # The synchronous run is the reference (its allocations and list-price saving): one actor serves it as well.
        sync_batch = a7_batch(tmp_path, pack, sim, "sync", model_name=priced, workers=1)
        rc, err = run_here(sync_batch, capsys)
        assert rc == 0, err[-2000:]
        sync_s = time.monotonic() - t
        calls_sync = sim.stats.requests
        sim.batches.config.completion_delay_s = 0.3
        t = time.monotonic()
        rc, err = run_here(a7_batch(tmp_path, pack, sim, "batch", BATCH_MODE, priced), capsys)
        assert rc == 0, err[-2000:]
        batch_s = time.monotonic() - t
        assert sim.stats.requests == calls_sync  # no synchronous call in batch mode
        batches = [[x["custom_id"] for x in sim.batches.batches[b].lines] for b in sorted(sim.batches.batches)]
    assert max(sim.batches.submitted.values()) == 1
    sync, batch = (pd.read_parquet(tmp_path / "results" / n / "runs.parquet").set_index("run_id") for n in ("sync", "batch"))
    assert len(batch) == 4 and (batch.status == "ok").all()
    assert (batch.loc[sync.index, "weights"] == sync["weights"]).all()  # the same allocations from the same answers
    in_batch = {key: i for i, keys in enumerate(batches) for key in keys}
    longest = 0
    for trace, _ in run_files(tmp_path / "results" / "batch"):
        steps = steps_of(trace)
        longest = max(longest, len(steps))
        where = [sorted({in_batch[k] for k in step if k in in_batch}) for step in steps]
        assert all(len(w) <= 1 for w in where), where  # the calls of one phase of a run are never split
        sent = [w[0] for w in where if w]
        assert sent == sorted(set(sent)), where  # each phase of a run in a later batch than the one before
    assert len(batches) == longest, batches  # in lockstep: one provider batch per debate phase, shared by every run
    summary = journal_summary(tmp_path / "results" / "batch")
    assert summary["provider_batches"] == len(batches) and summary["answered"] == summary["requests"]
    # The saving realised: every call at batch prices, against the same tokens synchronously at list prices
    saved = {}
    for name in ("sync", "batch"):
        calls = pd.read_parquet(tmp_path / "results" / name / "calls.parquet")
        saved[name] = realised_saving(calls)
        assert main(["report", str(tmp_path / "results" / name)]) == 0
        page = (tmp_path / "results" / name / "report.html").read_text()
        assert f"{saved[name]['saved_share']:.0%} saved" in page and f"{saved[name]['provider_batch_calls']} of them" in page
    assert saved["sync"]["provider_batch_calls"] == 0 and saved["batch"]["provider_batch_calls"] == saved["batch"]["calls_paid"]
    # Batch prices are half the list prices: the share is 1 − paid/list of two float sums, which lands a rounding
    # error below 0.5 in some call orders (0.4999999999999999 was seen).
    assert saved["batch"]["saved_share"] >= 0.5 - 1e-9 and 0.5 > saved["sync"]["saved_share"] >= 0.0
    print(f"\nprovider batch mode on a7 (4 runs): {len(batches)} provider batches for {longest} phases, "
          f"{summary['requests']} requests; wall {batch_s:.1f} s against {sync_s:.1f} s synchronously (batch delay 0.3 s)")


@pytest.mark.slow
def test_a_driver_killed_while_a_batch_is_in_flight_reattaches_on_rerun_and_submits_no_request_twice(pack, tmp_path,
                                                                                                    ray_local, capsys):
    with SimProvider() as sim:
        sim.batches.config.completion_delay_s = 1.0
        # One runner actor: the kill, the journal and the re-attach are the driver's and the collector's; a second
        # actor's start in both drivers only cost time.
        batch = a7_batch(tmp_path, pack, sim, "kill", BATCH_MODE, workers=1)
        journal = tmp_path / "results" / "kill" / "provider_batches"
        env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONPATH": str(ROOT)}
        driver = subprocess.Popen([sys.executable, "-m", "madbench.runner.cli", "run", str(batch), "--quiet"], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 240
        while not any(e.batch_id and e.state in ("validating", "in_progress") for e in
                      (read_journal(journal.parent) if journal.exists() else [])):
            assert driver.poll() is None and time.monotonic() < deadline, "no provider batch went in flight"
            time.sleep(0.1)
        os.killpg(driver.pid, signal.SIGKILL)  # the driver and its whole local Ray, a batch in flight
        driver.wait()
        in_flight = len(sim.batches.batches)
        rc, err = run_here(batch, capsys)
        assert rc == 0, err[-2000:]
        assert max(sim.batches.submitted.values()) == 1, sim.batches.submitted.most_common(3)  # nothing paid twice
        assert len(sim.batches.batches) > in_flight
    runs = pd.read_parquet(tmp_path / "results" / "kill" / "runs.parquet")
    assert len(runs) == 4 and (runs.status == "ok").all()
    assert all(e.state in ("completed", "abandoned") for e in read_journal(journal.parent))


def test_provider_batch_mode_refuses_a_model_without_a_batch_api_before_anything_runs(pack, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MISTRAL_API_KEY", "not-a-real-key-123")
    with SimProvider() as sim:
        batch = a7_batch(tmp_path, pack, sim, "refuse")
    assert main(["run", str(batch), "--provider-batch", "--model", "mistral/mistral-small-latest", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "provider batch mode supports openai, azure models" in err and "not mistral" in err
