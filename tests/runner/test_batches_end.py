"""Every batch ends: a failed run's cancelled sibling calls free what they held, a run that stops progressing is
failed by the watchdog, a provider batch the provider forgot is resubmitted or fails its runs, and the budget ledger
counts the calls a crash left in flight."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import pytest
import yaml

from madbench.bench.reliability import cpu_load as busy_processes
from madbench.data.errors import InputError
from madbench.gateway import Gateway, LLMRequest, Message, ModelSpec
from madbench.gateway import gateway as gateway_module
from madbench.gateway.limiter import AsyncLimiter, LimiterPool
from madbench.gateway.providers.base import RawResponse
from madbench.results import read_manifest
from madbench.runner.budget import (
    BUDGET_FILE,
    BUDGET_SETTLED,
    BudgetRecord,
    read_budget,
    read_settlements,
    start_budget,
    stop_budget,
    write_budget,
)
from madbench.runner.cli import main
from madbench.runner.dispatch import ActorPool, Dispatch, Work
from madbench.runner.exit_codes import EXIT_RUNS_FAILED
from madbench.runner.progress import BatchLine, Progress
from madbench.runner.provider_batches import LOST, read_journal
from madbench.runner.run_report import RunReport, Status
from madbench.sim.provider import SimProvider
from tests.runner.test_provider_batches import body, content, group_for, started

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs" / "debate"
TICKERS = ["AAA", "BBB", "CCC", "DDD"]
#: One shipped config per protocol kind (debate.protocols registry).
PROTOCOL_CONFIGS = {"paper": "causal-debate-3", "adversarial": "adversarial", "desks": "desks",
                    "tradingagents": "tradingagents", "self_consistency": "self-consistency-macro-majority"}


# -- a cancelled call frees its limiter slot (the hang of a retried run)


class Hanging:
    """A provider whose every call waits until cancelled (an answer that never comes in time)."""

    name, is_llm, cacheable, rate_limited, hedgeable = "hang", True, False, True, False
    calls = 0

    def prepare(self, spec):
        return spec

    def warm(self):
        pass

    def endpoint_identity(self, spec):
        return None

    def cost(self, *a, **k):
        return None

    async def complete(self, request, spec) -> RawResponse:
        Hanging.calls += 1
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")


def test_a_call_cancelled_at_the_provider_hands_back_its_limiter_lease(monkeypatch):
    monkeypatch.setattr(gateway_module, "CANCELLED_ANSWER_PATIENCE_S", 0.2)  # the answer never comes
    spec = ModelSpec(model="hang/x", limits={"max_concurrency": 1})
    gateway = Gateway(limiters=LimiterPool(use_ray=False))
    gateway.providers.for_model = lambda model: Hanging()
    request = LLMRequest(model="hang/x", messages=[Message(role="user", content="hi")])

    async def scenario():
        first = asyncio.ensure_future(gateway.complete(request, spec))
        while Hanging.calls < 1:
            await asyncio.sleep(0.01)
        first.cancel()  # a sibling turn failed: this one is cancelled mid-call
        with pytest.raises(asyncio.CancelledError):
            await first
        limiter = gateway.limiters.get(spec.limit_key(), spec.limits)
        assert isinstance(limiter, AsyncLimiter) and limiter.core.in_flight == 0
        second = asyncio.ensure_future(gateway.complete(request, spec))
        while Hanging.calls < 2:  # it got the only slot: without the release it would wait lease_timeout_s
            await asyncio.sleep(0.01)
        second.cancel()
        with pytest.raises(asyncio.CancelledError):
            await second

    asyncio.run(asyncio.wait_for(scenario(), 30))


# -- the all-invalid batch ends, for every protocol


def _invalid_batch(tmp_path: Path, pack: Path, api_base: str, retries: int, configs: list[str]) -> Path:
    scen = tmp_path / "scenarios.yaml"
    scen.write_text(yaml.safe_dump({"scenarios": [
        {"id": "s1", "invest_quarter": "2021Q3", "tickers": TICKERS, "constraints": {"max_weight": 0.6}}]}))
    path = tmp_path / "batch.yaml"
    # No send_context: the simulator answers {"answer": <digest>}, which no turn accepts.
    path.write_text(yaml.safe_dump({
        "name": "invalid", "scenarios": {"file": str(scen)}, "configs": [str(CONFIGS / f"{c}.yaml") for c in configs],
        "model": {"model": "openai/madbench-sim", "api_base": api_base, "limits": {"max_concurrency": 4}},
        "replicates": 1, "pack": str(pack), "results_dir": str(tmp_path / "results"),
        "cache_dir": str(tmp_path / "cache"), "retries": retries, "max_in_flight": 8, "workers": 2}))
    return path


@pytest.fixture
def cpu_load():
    """Busy loops on half the cores for the test's length: the hang showed on a loaded machine, in 4 tries of 7."""
    with busy_processes(max(1, (os.cpu_count() or 2) // 2)):
        yield


@pytest.mark.slow
def test_a_batch_whose_every_answer_is_invalid_ends_with_every_run_failed_and_its_reason(make_pack, tmp_path, ray_local,
                                                                                        cpu_load):
    retries = 1  # each failed run is resubmitted once in the same invocation: the attempt that used to hang
    pack = make_pack(tickers=tuple(TICKERS))
    with SimProvider() as sim:
        batch = _invalid_batch(tmp_path, pack, sim.url, retries, list(PROTOCOL_CONFIGS.values()))
        t0 = time.monotonic()
        assert main(["run", str(batch), "--quiet"]) == EXIT_RUNS_FAILED
        took = time.monotonic() - t0
        assert sim.stats.requests > 0
    manifest = read_manifest(tmp_path / "results" / "invalid")
    assert manifest.state == "finished"
    by_config = {r.config: r for r in manifest.runs}
    assert set(by_config) == set(PROTOCOL_CONFIGS.values())  # one run per protocol kind
    for name, run in by_config.items():
        assert run.status == "failed", (name, run)
        assert run.error and ("invalid" in run.error or "JSON" in run.error), (name, run.error)
        assert run.attempts == 1 + retries, (name, run.attempts)
    assert took < 600  # generous on a loaded machine: the hang waited 15 min for a leaked limiter slot


# -- the watchdog


class StuckActor:
    """A runner that never answers some units and reports no progress for them."""

    def __init__(self):
        pass

    async def run(self, key: str) -> str:
        if key.startswith("stuck"):
            await asyncio.sleep(3600)
        return key

    async def beats(self) -> dict:
        return {}

    async def totals(self) -> dict:
        return {"calls": 3, "cached": 1, "failed": 0, "prompt_tokens": 20, "completion_tokens": 5}


class StuckWork(Work[str]):
    kept = "nothing"
    watched = True

    def __init__(self):
        self.settled: dict[str, RunReport] = {}

    def key(self, unit: str) -> str:
        return unit

    def submit(self, handle, unit: str, k: int, attempt: int):
        return handle.run.remote(unit)

    def settle(self, unit: str, answer, k: int, handle) -> RunReport:
        report = answer if isinstance(answer, RunReport) else RunReport(run_id=unit, status=Status.OK)
        self.settled[unit] = report
        return report

    def failure(self, unit: str, exc: Exception) -> RunReport:
        return RunReport(run_id=unit, status=Status.FAILED, error=str(exc))

    def beat(self, handle):
        return handle.beats.remote()


@pytest.mark.slow
def test_a_run_without_progress_is_failed_by_the_watchdog_and_its_actor_replaced(ray_local, monkeypatch):
    import madbench.runner.dispatch as dispatch
    monkeypatch.setattr(dispatch, "STATUS_INTERVAL_S", 0.2)
    pool = ActorPool(ray_local, StuckActor, (), 1, 4)
    work = StuckWork()
    first = pool.actors[0]
    state = Dispatch(pool, work, ["ok1", "stuck1", "ok2"], 4, Progress(3, BatchLine(None), enabled=False), retries=1,
                     stall_s=8.0).run()
    assert state == dispatch.FINISHED
    assert work.settled["ok1"].status is Status.OK and work.settled["ok2"].status is Status.OK
    stuck = work.settled["stuck1"]
    assert stuck.status is Status.FAILED and "no progress for" in stuck.error and "stall_timeout_s is 8 s" in stuck.error
    assert pool.actors[0] is not first  # replaced (the stuck unit was retried once, on the new actor, and stalled again)


def test_live_counts_and_beats_are_answered_while_every_slot_of_an_actor_is_taken(ray_local):
    # The progress line's calls and tokens move per call: not only when a unit ends and frees a slot.
    pool = ActorPool(ray_local, StuckActor, (), 1, 1)
    ray_local.get(pool.actors[0].beats.remote())  # the actor is up: the unit below takes its one unit slot at once
    busy = pool.actors[0].run.remote("stuck1")
    time.sleep(1.0)  # ...before the first question is asked (Ray does not promise the order of an async actor's calls)
    deadline = time.monotonic() + 60
    while (live := pool.totals())["calls"] == 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert live == {"calls": 3, "cached": 1, "failed": 0, "tokens": 25}
    assert ray_local.get(pool.actors[0].beats.remote(), timeout=30) == {}  # the watchdog's question too
    assert not ray_local.wait([busy], timeout=0)[0]  # the unit still holds its slot
    ray_local.kill(pool.actors[0])


# -- a provider batch the provider no longer knows


@pytest.mark.slow
def test_a_provider_batch_the_provider_lost_is_resubmitted_once_and_answered(tmp_path):
    async def killed_while_in_flight(sim):
        c = await started(tmp_path)
        for i in range(2):
            asyncio.ensure_future(c.ask(None, group_for(sim), f"k{i}", body(f"q{i}")))
        while not any(e.batch_id for e in read_journal(tmp_path)):
            await asyncio.sleep(0.05)

    async def restarted(sim):
        c = await started(tmp_path)
        return await asyncio.wait_for(asyncio.gather(*[c.ask(None, group_for(sim), f"k{i}", body(f"q{i}"))
                                                       for i in range(2)]), 60)

    with SimProvider() as sim:
        sim.batches.config.completion_delay_s = 30
        asyncio.run(killed_while_in_flight(sim))
        sim.batches.batches.clear()  # the provider restarted and forgot it: GET /v1/batches/<id> is a 404
        sim.batches.config.completion_delay_s = 0.2
        lines = asyncio.run(restarted(sim))
        assert [content(x) for x in lines] == [content({"response": {"body": sim.reply(body(f"q{i}"))}}) for i in range(2)]
    lost, again = read_journal(tmp_path)
    assert lost.state == LOST and "unknown to the provider" in lost.reason and lost.resubmitted == 2
    assert again.state == "completed" and sorted(again.keys) == ["k0", "k1"]


def test_a_request_whose_batch_is_lost_twice_fails_with_the_reason(tmp_path):
    async def go(sim):
        c = await started(tmp_path)
        ask = asyncio.ensure_future(c.ask(None, group_for(sim), "k0", body("q0")))
        for n in (1, 2):
            while sum(1 for e in read_journal(tmp_path) if e.batch_id) < n:
                await asyncio.sleep(0.05)
            sim.batches.batches.clear()
        return await asyncio.wait_for(ask, 60)

    with SimProvider() as sim:
        sim.batches.config.completion_delay_s = 30
        line = asyncio.run(go(sim))
    assert line["error"]["kind"] == "fatal" and "already resubmitted once" in line["error"]["message"]
    assert [e.state for e in read_journal(tmp_path)] == [LOST, LOST]


def test_a_background_task_that_raises_fails_the_calls_it_serves(tmp_path, monkeypatch):
    from madbench.gateway.providers import batching

    async def broken(self, batch_id):
        raise RuntimeError("a bug in the poll")

    monkeypatch.setattr(batching.BatchAPI, "retrieve", broken)

    async def go(sim):
        c = await started(tmp_path)
        line = await asyncio.wait_for(c.ask(None, group_for(sim), "k0", body("q0")), 60)
        return line, c.stats()

    with SimProvider() as sim:
        line, stats = asyncio.run(go(sim))
    assert line["error"]["kind"] == "fatal" and "RuntimeError: a bug in the poll" in line["error"]["message"]
    assert stats["failures"] and "a bug in the poll" in stats["failures"][0]


# -- the ledger across crashes


@pytest.mark.slow
def test_calls_in_flight_at_a_crash_are_counted_at_their_reserved_maximum(tmp_path, ray_local):
    root = tmp_path / "results"
    root.mkdir()
    budget = start_budget(ray_local, root, BudgetRecord(cap_usd=1.0))

    async def in_flight() -> None:
        await budget.settle(await budget.reserve(0.1), 0.02)  # paid and settled
        await budget.reserve(0.3)  # sent, and the driver is killed before it settles
        await budget.reserve(0.2)

    asyncio.run(in_flight())
    written = json.loads((root / BUDGET_FILE).read_text())  # journaled before the requests went out
    assert written["spent_usd"] == pytest.approx(0.02)
    assert sorted(written["in_flight_usd"].values()) == pytest.approx([0.2, 0.3])
    ray_local.kill(budget.handle)  # kill -9: nothing settles
    resumed = read_budget(root, 1.0)
    assert resumed.spent_usd == pytest.approx(0.52) and resumed.in_flight_usd == {}
    assert read_budget(root, 0.5).reached  # the cap holds: what the crash may have spent counts against it
    again = start_budget(ray_local, root, resumed)  # the next invocation writes it settled: never counted twice
    assert read_budget(root, 1.0).spent_usd == pytest.approx(0.52)
    stop_budget(ray_local, again, resumed.spent_usd, root)


def gone(ray, handle, deadline_s: float = 60.0) -> None:
    """Wait until a killed actor is dead: ``ray.kill`` only asks, and a call sent meanwhile may still be served."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            ray.get(handle.__ray_ready__.remote(), timeout=5)
        except ray.exceptions.RayActorError:
            return
        except ray.exceptions.GetTimeoutError:
            continue  # a loaded machine: ask again
        time.sleep(0.1)
    raise AssertionError(f"the actor was not dead {deadline_s:g} s after it was killed")


@pytest.mark.slow
def test_a_call_answered_after_its_driver_was_killed_counts_at_what_it_billed(tmp_path, ray_local):
    import ray

    root = tmp_path / "results"
    root.mkdir()
    (root / BUDGET_SETTLED).write_text('{"call": "an-earlier-crash-1", "cost_usd": 0.5}\n')  # counted already
    budget = start_budget(ray_local, root, BudgetRecord(cap_usd=1.0))
    budget.journal_settlements(root)  # as a runner actor that sees the results directory

    async def killed_while_in_flight() -> None:
        answered, cut_off = await budget.reserve(0.3), await budget.reserve(0.2)
        ray_local.kill(budget.handle)  # the driver is killed, and its ledger with it; one answer still comes
        gone(ray_local, budget.handle)
        with pytest.raises(ray.exceptions.RayActorError):
            await budget.settle(answered, 0.004)
        assert cut_off  # never settles: its actor went before its answer came

    asyncio.run(killed_while_in_flight())
    resumed = read_budget(root, 1.0)
    assert resumed.spent_usd == pytest.approx(0.004 + 0.2)  # the answer at its bill, the cut-off call at its maximum
    assert len(resumed.counted_at_max) == 1 and "1 at their reserved maximum" in resumed.crash_note


@pytest.mark.slow
def test_an_answer_that_comes_after_the_next_start_corrects_the_count_at_its_maximum(tmp_path, ray_local):
    # The driver is restarted at once after a kill: the killed one's actor settles its call only after the new start
    # has counted that call at its maximum. Its line corrects the count, once, through the new ledger's writes.
    root = tmp_path / "results"
    root.mkdir()
    write_budget(root, BudgetRecord(cap_usd=1.0, spent_usd=0.02, in_flight_usd={"old-1": 0.3}))  # the kill's record
    first = read_budget(root, 1.0)
    assert first.spent_usd == pytest.approx(0.32) and first.counted_at_max == {"old-1": 0.3}
    budget = start_budget(ray_local, root, first)
    budget.journal_settlements(root)

    async def pay() -> None:
        await budget.settle(await budget.reserve(0.1), 0.01)  # the new invocation's own call
    asyncio.run(pay())
    assert json.loads((root / BUDGET_FILE).read_text())["counted_at_max"] == {"old-1": 0.3}  # carried by the ledger
    with (root / BUDGET_SETTLED).open("a") as journal:  # the orphaned actor's late line
        journal.write('{"call": "old-1", "cost_usd": 0.004}\n')
    final = stop_budget(ray_local, budget, first.spent_usd, root)
    assert final["spent_usd"] == pytest.approx(0.02 + 0.01 + 0.004)
    corrected = read_budget(root, 1.0)
    assert corrected.spent_usd == pytest.approx(0.034) and corrected.counted_at_max == {}
    assert "answered since" in corrected.crash_note
    write_budget(root, corrected)  # as the next start does: the line is not counted twice
    assert read_budget(root, 1.0).spent_usd == pytest.approx(0.034) and read_budget(root, 1.0).crash_note is None


def test_a_batch_stopped_at_its_cap_by_calls_counted_at_their_maximum_is_tried_again_once_they_are_answered(tmp_path):
    stopped = BudgetRecord(cap_usd=0.05, spent_usd=0.045, counted_at_max={"old-1": 0.03}, reached="budget of $0.05 ...")
    write_budget(tmp_path, stopped)
    assert read_budget(tmp_path, 0.05).reached  # no answer yet: it stays stopped
    (tmp_path / BUDGET_SETTLED).write_text('{"call": "old-1", "cost_usd": 0.001}\n')
    again = read_budget(tmp_path, 0.05)
    assert again.reached is None and again.spent_usd == pytest.approx(0.016)


def test_a_settlement_cut_short_by_a_kill_counts_its_call_at_the_maximum_and_a_garbled_one_is_named(tmp_path):
    path = tmp_path / BUDGET_SETTLED
    path.write_bytes(b'{"call": "a-1", "cost_usd": 0.01}\n{"call": "b-1", "cost_usd": 0.02}\n{"call": "a-2", "co')
    assert read_settlements(path, {"a-1", "a-2", "c-1"}) == {"a-1": 0.01}  # b-1 was settled in budget.json already
    with path.open("ab") as journal:  # a later append lands on the torn line: both are lost, none misread
        journal.write(b'{"call": "a-3", "cost_usd": 0.03}\n{"call": "a-4", "cost_usd": 0.04}\n')
    assert read_settlements(path, {"a-1", "a-2", "a-3", "a-4"}) == {"a-1": 0.01, "a-4": 0.04}
    path.write_bytes(b'{"call": "a-1", "cost_usd": 0.01}\n{"call": 7}\n{"call": "a-2", "cost_usd": 0.02}\n')
    with pytest.raises(InputError, match="line 2 is not a settlement"):
        read_settlements(path, {"a-1"})


@pytest.mark.parametrize("cost", ["-0.5", "NaN", "Infinity", '"0.01"', "false"])
def test_a_settlement_with_a_cost_that_is_no_amount_is_named(tmp_path, cost):
    path = tmp_path / BUDGET_SETTLED
    path.write_text(f'{{"call": "a-1", "cost_usd": {cost}}}\n{{"call": "a-2", "cost_usd": 0.01}}\n')
    with pytest.raises(InputError, match="line 1 is not a settlement"):
        read_settlements(path, {"a-1"})


def test_a_settlement_journal_that_is_a_folder_or_a_link_is_named(tmp_path):
    path = tmp_path / BUDGET_SETTLED
    path.mkdir()
    with pytest.raises(InputError, match="not a settlement journal"):
        read_settlements(path, {"a-1"})
    path.rmdir()
    (tmp_path / "elsewhere.jsonl").write_text('{"call": "a-1", "cost_usd": 0.01}\n')
    path.symlink_to(tmp_path / "elsewhere.jsonl")
    with pytest.raises(InputError, match="not a settlement journal"):
        read_settlements(path, {"a-1"})


@pytest.mark.slow
def test_a_settlement_the_journal_cannot_take_fails_loudly_and_still_frees_its_hold(tmp_path, ray_local):
    root = tmp_path / "results"
    root.mkdir()
    budget = start_budget(ray_local, root, BudgetRecord(cap_usd=1.0))
    (root / BUDGET_SETTLED).mkdir()  # no file can be appended to there
    budget.journal_settlements(root)

    async def settle_one() -> None:
        token = await budget.reserve(0.3)
        with pytest.raises(OSError):
            await budget.settle(token, 0.004)

    asyncio.run(settle_one())
    state = budget.snapshot()
    assert state["in_flight_usd"] == {} and state["spent_usd"] == pytest.approx(0.004)
    stop_budget(ray_local, budget, 0.0, root)


@pytest.mark.slow
def test_a_ledger_outliving_its_driver_writes_nothing_over_the_next_drivers_record(tmp_path, ray_local):
    from madbench.runner.lock import ResultsLock

    root = tmp_path / "results"
    with ResultsLock(root) as lock:
        budget = start_budget(ray_local, root, BudgetRecord(cap_usd=1.0), holder=lock.holder)
        asyncio.run(budget.reserve(0.1))
        assert len(json.loads((root / BUDGET_FILE).read_text())["in_flight_usd"]) == 1
    with ResultsLock(root):  # the next driver; the first one's ledger actor lingers, as after a kill -9
        asyncio.run(budget.reserve(0.2))
        assert len(json.loads((root / BUDGET_FILE).read_text())["in_flight_usd"]) == 1
    ray_local.kill(budget.handle)


def test_a_cancelled_request_at_the_provider_whose_answer_never_comes_settles_its_reservation_at_the_maximum(monkeypatch):
    from madbench.gateway import Budget

    monkeypatch.setattr(gateway_module, "CANCELLED_ANSWER_PATIENCE_S", 0.2)

    class Priced(Hanging):
        def cost(self, model, prompt, completion, **k):
            return 0.05

    spec = ModelSpec(model="hang/x")
    budget = Budget(1.0)
    gateway = Gateway(limiters=LimiterPool(use_ray=False), budget=budget)
    gateway.providers.for_model = lambda model: Priced()
    request = LLMRequest(model="hang/x", messages=[Message(role="user", content="hi")], max_tokens=10)

    async def scenario():
        Hanging.calls = 0
        call = asyncio.ensure_future(gateway.complete(request, spec))
        while Hanging.calls < 1:
            await asyncio.sleep(0.01)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call

    asyncio.run(asyncio.wait_for(scenario(), 30))
    assert budget.spent_usd == pytest.approx(0.05) and budget.ledger.held == {}

