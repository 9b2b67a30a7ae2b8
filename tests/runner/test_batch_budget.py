"""One budget per batch: ``max_cost_usd`` holds across runner actors and across invocations.

Each paid request reserves its maximum cost before it is sent and settles to what it billed, so runs in flight on
several actors at once never take the batch past its cap; ``<results>/budget.json`` carries the spend over to the
next invocation of the same command.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from madbench.data.errors import InputError
from madbench.data.market.pack import load_pack
from madbench.data.scenario import Scenario
from madbench.debate.config_file import load_debate_config
from madbench.debate.events import LLMCall, LLMFailure
from madbench.debate.trace import read_trace
from madbench.gateway import (
    Budget,
    BudgetExhausted,
    LLMRequest,
    Message,
    ModelRouting,
    ModelSpec,
    ResponseCache,
    accounting,
)
from madbench.gateway import gateway as gateway_module
from madbench.gateway.accounting import UNBOUNDED_COMPLETION_TOKENS, max_tokens
from madbench.gateway.errors import CallCancelled, NoAnswer, TransientError
from madbench.gateway.limiter import LimiterPool
from madbench.gateway.providers.litellm_provider import token_cost
from madbench.results import ManifestRun, run_files, write_manifest
from madbench.results.rowlog import read_log
from madbench.runner.budget import (
    BUDGET_FILE,
    BudgetRecord,
    JournaledBudget,
    append_settlement,
    read_budget,
    start_budget,
    stop_budget,
    write_budget,
)
from madbench.runner.cli import main
from madbench.runner.cli.run import budget_lines, submissions
from madbench.runner.exit_codes import EXIT_RUNS_FAILED
from madbench.runner.pipeline import run_debate
from madbench.runner.progress import BatchLine, Progress
from madbench.runner.run_report import RunReport
from madbench.runner.store import BatchLayout, paid_cost, write_parts
from madbench.runner.wiring import build_gateway
from madbench.sim.provider import SimConfig, SimProvider
from tests.conftest import errors_only
from tests.runner.test_batches_end import Hanging

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs" / "debate"
TICKERS = ["AAA", "BBB", "CCC", "DDD"]
PRICED = "openai/gpt-4o-mini"  # in litellm's offline cost map: the simulator's usage has a known cost


def test_reservations_wait_for_calls_in_flight_and_stop_at_a_call_that_cannot_fit():
    budget = Budget(1.0)

    async def scenario():
        a = await budget.reserve(0.4)
        b = await budget.reserve(0.5)
        # 0 spent + 0.9 held + 0.2 > 1: it waits for the calls in flight, and goes once one settles for less.
        waiting = asyncio.ensure_future(budget.reserve(0.2))
        await asyncio.sleep(0.3)
        assert not waiting.done() and budget.ledger.reserved_usd == pytest.approx(0.9)
        await budget.settle(a, 0.1)  # billed less than its maximum: the rest of its hold is free again
        c = await asyncio.wait_for(waiting, 2)
        assert budget.ledger.reserved_usd == pytest.approx(0.7)
        await budget.settle(b, None)  # unknown cost (no price): holds nothing any more, adds nothing
        await budget.settle(c, 0.2)
        zero = await budget.reserve(0.0)  # a call of no known price reserves nothing
        await budget.settle(zero, 0.0)
        assert budget.ledger.held == {} and budget.spent_usd == pytest.approx(0.3)
        await budget.settle(await budget.reserve(0.7), 0.65)  # exactly up to the cap is allowed
        with pytest.raises(BudgetExhausted, match=r"\$0.9500 spent, and the next call may cost up to \$0.1000"):
            await budget.reserve(0.1)  # cannot fit even with nothing in flight: the budget is reached

    asyncio.run(scenario())
    assert budget.spent_usd == pytest.approx(0.95) and budget.spent_usd <= 1.0
    with pytest.raises(BudgetExhausted):
        budget.check()  # reached stops every later call too, the free ones included
    with pytest.raises(KeyError):
        asyncio.run(Budget(1.0).settle(12345, 0.1))  # settling a reservation never made is a bug, not a no-op
    uncapped = Budget(None)
    asyncio.run(uncapped.settle(asyncio.run(uncapped.reserve(1e6)), 2.5))
    assert uncapped.spent_usd == 2.5


def test_a_hold_never_settled_stops_a_waiting_call_without_marking_the_budget_reached(monkeypatch):
    monkeypatch.setattr(accounting, "HOLD_PATIENCE_S", 0.5)
    budget = Budget(1.0)

    async def scenario():
        await budget.reserve(0.9)  # a call whose actor was lost: never settled
        with pytest.raises(BudgetExhausted, match="waited 0.5 s for calls in flight"):
            await budget.reserve(0.2)

    asyncio.run(scenario())
    assert budget.ledger.reached is None  # the next invocation starts with no holds and may go on


def test_a_requests_maximum_tokens_bound_what_it_can_bill():
    text = "0.0123, -0.0456; → é" * 50  # digits and non-ASCII: more tokens than chars/3.5 would say
    request = LLMRequest(model=PRICED, messages=[Message(role="user", content=text)], max_tokens=300)
    prompt, completion = max_tokens(request)
    assert prompt >= len(text.encode()) and completion == 300
    assert max_tokens(request.model_copy(update={"max_tokens": None}))[1] == UNBOUNDED_COMPLETION_TOKENS


def test_the_recorded_spend_carries_over_and_a_raised_cap_clears_reached(tmp_path):
    assert read_budget(tmp_path, 1.0) == BudgetRecord(cap_usd=1.0)  # a new batch has spent nothing
    write_budget(tmp_path, BudgetRecord(cap_usd=0.05, spent_usd=0.04, reached="budget of $0.05 reached: ..."))
    same = read_budget(tmp_path, 0.05)
    assert same.spent_usd == 0.04 and same.reached  # the same cap: still reached
    raised = read_budget(tmp_path, 0.10)
    assert raised.spent_usd == 0.04 and raised.reached is None and raised.cap_usd == 0.10
    assert read_budget(tmp_path, None).reached is None
    assert "spent by earlier invocations" in read_budget(tmp_path, 0.03).reached  # a cap below the spend
    (tmp_path / BUDGET_FILE).write_text('{"spent_usd": "lots"}')
    with pytest.raises(Exception, match="not a budget record.*delete it to count"):
        read_budget(tmp_path, 1.0)


def _batch(tmp_path: Path, pack: Path, api_base: str, cap: float, model: str = PRICED) -> Path:
    scen = tmp_path / "scenarios.yaml"
    scen.write_text(yaml.safe_dump({"scenarios": [
        {"id": f"s{q}", "invest_quarter": q, "tickers": TICKERS, "constraints": {"max_weight": 0.6}}
        for q in ("2021Q2", "2021Q3", "2021Q4", "2022Q1")]}))
    path = tmp_path / "batch.yaml"
    path.write_text(yaml.safe_dump({
        "name": "budget", "scenarios": {"file": str(scen)},
        "configs": [str(CONFIGS / "single-causal.yaml"), str(CONFIGS / "causal-debate-3.yaml")],
        "model": {"model": model, "api_base": api_base, "send_context": True, "limits": {"max_concurrency": 16}},
        "replicates": 1, "pack": str(pack), "results_dir": str(tmp_path / "results"), "cache_dir": str(tmp_path / "cache"),
        "retries": 0, "max_in_flight": 4, "workers": 2, "max_cost_usd": cap}))
    return path


def paid_in_traces(root: Path) -> float:
    """What every trace of the batch says was paid: answers not served from the cache, and failed calls' attempts."""
    total = 0.0
    for trace, _ in run_files(root):
        for e in read_trace(trace).typed():
            if isinstance(e, LLMCall) and not e.cached:
                total += e.cost_usd or 0.0
            elif isinstance(e, LLMFailure):
                total += sum(a.get("cost_usd") or 0.0 for a in e.attempts)
    return total


def spent(root: Path) -> float:
    return json.loads((root / BUDGET_FILE).read_text())["spent_usd"]


@pytest.mark.slow
def test_the_cap_holds_across_actors_and_invocations(make_pack, tmp_path, ray_local, capsys):
    pack = make_pack(tickers=tuple(TICKERS))
    root = tmp_path / "results" / "budget"
    cap = 0.03  # about half of what the 8 runs cost
    with SimProvider() as sim:
        batch = _batch(tmp_path, pack, sim.url, cap)
        assert main(["run", str(batch), "--quiet"]) == EXIT_RUNS_FAILED
        out, err = capsys.readouterr()
        first = spent(root)
        # Several actors with several runs each in flight, and the cap is never passed: reservations, not hindsight.
        assert 0 < first <= cap, first
        assert paid_in_traces(root) == pytest.approx(first, rel=1e-9)  # every call paid is in the ledger, once
        assert "state stopped: budget reached" in out and f"budget: ${first:.4f} of $0.03 spent" in out
        assert "budget of $0.03 reached" in err and "raise max_cost_usd" in err
        status = json.loads((root / "manifest.json").read_text())["runs"]
        assert 0 < sum(r["status"] == "ok" for r in status) < 8

        # The same command again: nothing is sent, nothing more is spent, and it says why.
        requests = sim.stats.requests
        assert main(["run", str(batch), "--quiet"]) == EXIT_RUNS_FAILED
        out, err = capsys.readouterr()
        assert sim.stats.requests == requests and spent(root) == first
        assert "state stopped: budget reached" in out and "raise max_cost_usd" in err

        # A raised cap continues from the recorded spend: the runs finish, and the paid calls are not paid again.
        spec = yaml.safe_load(batch.read_text())
        batch.write_text(yaml.safe_dump(spec | {"max_cost_usd": 1.0}))
        assert main(["run", str(batch), "--quiet"]) == 0
        out, err = capsys.readouterr()
        final = spent(root)
        assert first < final <= 1.0
        assert paid_in_traces(root) == pytest.approx(final, rel=1e-9)
        assert f"(${final - first:.4f} in this one)" in out and "state finished" in out
        # runs.parquet: what the last attempts paid misses what the runs stopped at the cap had paid before it;
        # cost_paid_usd, every attempt's paid calls, adds up to what the batch paid.
        table = pd.read_parquet(root / "runs.parquet")
        assert table["cost_paid_usd"].sum() == pytest.approx(final, rel=1e-9) and table["cost_usd"].sum() < final
    budget = json.loads((root / BUDGET_FILE).read_text())
    assert budget["cap_usd"] == 1.0 and budget["reached"] is None


def test_off_the_cluster_the_driver_writes_the_budget_not_the_actor(tmp_path, ray_local):
    # A Ray client's results directory is on its own machine: the actor on the head must not write there (it would
    # write the head's disk at that path), the driver does.
    root = tmp_path / "results"
    root.mkdir()
    budget = start_budget(ray_local, root, BudgetRecord(cap_usd=1.0), actor_writes=False)

    async def pay(cost: float) -> None:
        await budget.settle(await budget.reserve(0.1), cost)
    asyncio.run(pay(0.02))
    assert read_budget(root, 1.0).spent_usd == 0.0  # the actor settled it and wrote nothing
    assert budget.persist(root)["spent_usd"] == pytest.approx(0.02) and read_budget(root, 1.0).spent_usd == pytest.approx(0.02)
    asyncio.run(pay(0.03))
    final = stop_budget(ray_local, budget, 0.0, root, driver_writes=True)
    assert read_budget(root, 1.0).spent_usd == pytest.approx(0.05) and final["spent_usd"] == pytest.approx(0.05)


def test_a_reservation_whose_caller_was_cancelled_on_the_way_is_freed_when_it_is_granted(tmp_path, ray_local):
    # A hedge that loses its race while its reservation is on the way to the budget actor is cancelled; the actor
    # grants the hold anyway, and nobody would settle it: the batch counted it in flight to its end, and one near its
    # cap waited on it.
    root = tmp_path / "results"
    root.mkdir()
    budget = start_budget(ray_local, root, BudgetRecord(cap_usd=1.0), actor_writes=False)

    async def cancelled_on_the_way() -> None:
        asking = asyncio.ensure_future(budget.reserve(0.4))
        await asyncio.sleep(0)  # the request is sent to the actor
        asking.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asking
        for _ in range(200):  # the grant comes back and is settled at 0
            await asyncio.sleep(0.05)
            if not budget.snapshot()["in_flight_usd"]:
                break

    for _ in range(5):
        asyncio.run(cancelled_on_the_way())
    state = budget.snapshot()
    assert state["in_flight_usd"] == {} and state["spent_usd"] == 0.0
    stop_budget(ray_local, budget, 0.0, root, driver_writes=True)


# -- a cap the batch could not hold, and a spend that is not known


def _offline_batch(tmp_path: Path, pack: Path, model: str, cap: float) -> Path:
    """``_batch`` without a server: the preflight and the dry run make no call (an api_base needs no key)."""
    return _batch(tmp_path, pack, "http://127.0.0.1:9/v1", cap, model)


def test_a_cap_on_a_model_without_a_price_is_refused_by_the_preflight(make_pack, tmp_path, capsys):
    batch = _offline_batch(tmp_path, make_pack(tickers=tuple(TICKERS)), "openai/madbench-sim", 0.0001)
    for argv in (["run", str(batch), "--dry-run"], ["run", str(batch), "--quiet"]):
        assert main(argv) == 2
        err = errors_only(capsys.readouterr().err)
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert ("openai/madbench-sim: unknown price (litellm's cost map has none, or lists it at $0), so max_cost_usd "
                "($0.0001) cannot be enforced for its calls (config causal-debate-3, single-causal)") in err
        assert "declare its price on its tier in the routing profile" in err and "or remove max_cost_usd" in err
    assert not (tmp_path / "results").exists()  # nothing started
    spec = yaml.safe_load(batch.read_text())
    batch.write_text(yaml.safe_dump({k: v for k, v in spec.items() if k != "max_cost_usd"}))
    assert main(["run", str(batch), "--dry-run"]) == 0  # without a cap, an unpriced model is costed as unknown, never $0
    assert "unknown price for openai/madbench-sim" in capsys.readouterr().out


def test_the_dry_run_says_when_its_estimate_does_not_fit_the_cap(make_pack, tmp_path, capsys):
    batch = _offline_batch(tmp_path, make_pack(tickers=tuple(TICKERS)), PRICED, 0.0001)
    assert main(["run", str(batch), "--dry-run", "--json"]) == 0
    out, err = capsys.readouterr()
    err = errors_only(err)
    d = json.loads(out)
    assert d["max_cost_usd"] == 0.0001 and d["estimated_cost_usd"] > 0.0001 and d["budget_note"] == err.strip()
    assert err.startswith(f"max_cost_usd: the expected cost ${d['estimated_cost_usd']:.4f} exceeds the $0.0001 left of "
                          "the $0.0001 cap: the batch would stop at the cap with runs left")
    write_budget(tmp_path / "results" / "budget", BudgetRecord(cap_usd=1.0, spent_usd=0.99))  # earlier invocations
    spec = yaml.safe_load(batch.read_text())
    batch.write_text(yaml.safe_dump(spec | {"max_cost_usd": 1.0}))
    assert main(["run", str(batch), "--dry-run"]) == 0
    assert "left of the $1 cap after $0.9900 spent by earlier invocations" in capsys.readouterr().err
    write_budget(tmp_path / "results" / "budget", BudgetRecord(cap_usd=1.0, spent_usd=0.0))
    assert main(["run", str(batch), "--dry-run"]) == 0
    assert "max_cost_usd" not in capsys.readouterr().err  # it fits: nothing to say


def test_an_unknown_cost_is_printed_as_unknown_never_as_zero():
    progress = Progress(2, BatchLine(None), enabled=False)
    progress.add(RunReport(run_id="a", status="ok", totals={"calls": 3, "cached": 0, "cost_usd": 0.0,
                                                            "calls_with_unknown_cost": 3}))
    line = progress.line(0)
    assert "unknown (3 calls of a model without a price)" in line and "$0.0000" not in line
    progress.add(RunReport(run_id="b", status="ok", totals={"calls": 1, "cost_usd": 0.25}))
    assert "$0.2500 + unknown (3 calls of a model without a price)" in progress.line(0)
    spend = {"cap_usd": None, "spent_usd": 0.0, "spent_before_usd": 0.0, "reached": None}
    assert budget_lines(spend, "b.yaml") == (None, None)
    assert budget_lines(spend, "b.yaml", unpriced=5)[0] == ("budget: unknown (5 calls of a model without a price) spent on "
                                                          "this batch over every invocation")


def test_the_final_line_counts_a_retry_apart_from_the_runs_submitted(tmp_path):
    runs = [{"run_id": f"r{i}", "scenario_id": "s", "config": "c", "replicate": 0, "status": "ok", "attempts": a}
            for i, a in enumerate([0, 0, 0, 2])]  # 3 already done; one run failed once and was retried
    write_manifest(tmp_path, {"name": "t"}, [ManifestRun(**r) for r in runs], "finished")
    assert submissions(tmp_path) == "1 submitted, 1 retry"
    write_manifest(tmp_path, {"name": "t"}, [ManifestRun(**r | {"attempts": 1}) for r in runs], "finished")
    assert submissions(tmp_path) == "4 submitted"


# -- what a run paid over all its attempts (runs.parquet cost_paid_usd), beside what its last attempt paid


def test_a_resumed_run_records_what_its_earlier_attempts_paid(make_pack, tmp_path):
    pack = load_pack(make_pack(tickers=tuple(TICKERS)))
    layout = BatchLayout(tmp_path / "results")
    scenario = Scenario(id="s", invest_quarter="2021Q3", tickers=TICKERS, constraints={"max_weight": 0.6})
    with SimProvider() as sim, ResponseCache(tmp_path / "cache") as cache:
        spec = ModelSpec(model=PRICED, api_base=sim.url, send_context=True)
        config = load_debate_config(CONFIGS / "mean3-causal.yaml").model_copy(update={"models": ModelRouting.single(spec)})
        first = asyncio.run(run_debate(scenario, pack, config, build_gateway(cache=cache), layout))
        layout.result_path(first.run_id).unlink()  # killed before its commit: resumed from the cache
        again = asyncio.run(run_debate(scenario, pack, config, build_gateway(cache=cache), layout))
    paid = first.totals["cost_usd"]
    assert paid > 0 and again.totals["cost_usd"] == 0 and again.totals["cached"] == again.totals["calls"]
    write_parts(layout, "b", again, config.model_dump(mode="json"), scenario.model_dump(mode="json"), "node")
    (logged,) = read_log(layout.rows.path)[0]
    (row,) = logged.tables["runs"]
    assert row["cost_usd"] == 0 and row["cost_paid_usd"] == pytest.approx(paid, rel=1e-9)
    assert paid_cost(read_trace(layout.trace_path(again.run_id)).typed()) == pytest.approx(paid_in_traces(layout.root))


def _cancel_at_the_provider(latency_s: float) -> tuple[CallCancelled, Budget, SimProvider, dict[str, int]]:
    """A call cancelled (as a failed run cancels its sibling turns) once its request is at the provider."""
    budget = Budget(1.0)
    request = LLMRequest(model=PRICED, messages=[Message(role="user", content="allocate")], max_tokens=200)
    with SimProvider(SimConfig(latency_median_s=latency_s, latency_sigma=0.0)) as sim:
        gateway = build_gateway(budget=budget, limiters=LimiterPool(use_ray=False))  # its lease outcomes, here
        spec = ModelSpec(model=PRICED, api_base=sim.url, send_context=True)

        async def scenario():
            task = asyncio.ensure_future(gateway.complete(request, spec))
            while sim.stats.requests == 0:  # the request is at the provider
                await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(CallCancelled) as cancelled:
                await task
            return cancelled.value

        cancelled = asyncio.run(scenario())
        return cancelled, budget, sim, gateway.limiters.get(spec.limit_key(), spec.limits).core.counts


def test_a_call_cancelled_at_the_provider_is_counted_at_what_it_billed_when_its_answer_comes():
    # The provider bills a request it holds whether or not its answer is read: the cancelled call waits for it.
    cancelled, budget, sim, lease_outcomes = _cancel_at_the_provider(latency_s=1.0)
    (attempt,) = [a for a in cancelled.attempts if a["kind"] == "cancelled"]
    (model, prompt, completion, cached) = sim.stats.billed[0]
    assert (attempt["prompt_tokens"], attempt["completion_tokens"]) == (prompt, completion)
    assert attempt["cost_usd"] == pytest.approx(token_cost(PRICED, prompt, completion, cached_tokens=cached))
    assert budget.spent_usd == pytest.approx(attempt["cost_usd"]) and budget.ledger.held == {}
    assert (lease_outcomes["ok"], lease_outcomes["error"]) == (1, 0)  # its lease handed back as the answer it got


def test_a_call_cancelled_at_the_provider_is_counted_at_its_maximum_when_no_answer_comes(monkeypatch):
    # The provider may bill a request it holds and never says how much: the budget keeps its reservation, and the
    # attempts the trace records carry that same amount.
    monkeypatch.setattr(gateway_module, "CANCELLED_ANSWER_PATIENCE_S", 0.5)
    cancelled, budget, _, lease_outcomes = _cancel_at_the_provider(latency_s=30.0)
    assert (lease_outcomes["ok"], lease_outcomes["error"]) == (0, 1)
    (attempt,) = [a for a in cancelled.attempts if a["kind"] == "cancelled"]
    assert attempt["cost_usd"] > 0 and budget.spent_usd == pytest.approx(attempt["cost_usd"])
    assert budget.spent_usd == pytest.approx(sum(a["cost_usd"] or 0 for a in cancelled.attempts))
    assert "no answer came" in attempt["reason"]


class OverloadedLate(Hanging):
    """A priced provider that answers each request, after a while, with a 503: a fault on demand."""

    name = "late503"
    calls = 0

    def cost(self, model, prompt, completion, **kwargs):
        return 1e-5 * (prompt or 0) + 1e-5 * (completion or 0)

    async def complete(self, request, spec):
        OverloadedLate.calls += 1
        await asyncio.sleep(0.3)
        raise TransientError("503 Service Unavailable")


class TimesOutLate(OverloadedLate):
    """A priced provider whose every request times out at the client after a while: the provider may have billed it."""

    async def complete(self, request, spec):
        OverloadedLate.calls += 1
        await asyncio.sleep(0.3)
        raise NoAnswer("timeout after 600 s")


def _cancelled_during_its_error(provider, budget):
    gateway = build_gateway(budget=budget)
    gateway.providers.for_model = lambda model: provider
    spec = ModelSpec(model="late503/x")
    request = LLMRequest(model="late503/x", messages=[Message(role="user", content="allocate")], max_tokens=200)
    OverloadedLate.calls = 0

    async def scenario():
        task = asyncio.ensure_future(gateway.complete(request, spec))
        while OverloadedLate.calls == 0:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(CallCancelled) as cancelled:
            await task
        return cancelled.value

    return asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_call_cancelled_at_the_provider_whose_request_then_times_out_counts_at_its_maximum():
    # No answer came, so nothing says what the provider billed: the reserved maximum, never nothing.
    budget = Budget(1.0)
    cancelled = _cancelled_during_its_error(TimesOutLate(), budget)
    assert not [a for a in cancelled.attempts if a["kind"] == "cancelled" and not a["cost_usd"]]
    assert budget.spent_usd >= 1e-5 * 200  # at least the maximum answer's 200 tokens
    assert budget.ledger.held == {}


def test_a_call_cancelled_at_the_provider_that_answers_an_error_counts_nothing():
    # The provider's error is its answer, and it bills none: not the reserved maximum of an answer that never came.
    budget = Budget(1.0)
    cancelled = _cancelled_during_its_error(OverloadedLate(), budget)
    (attempt,) = [a for a in cancelled.attempts if a["kind"] == "cancelled"]
    assert "503" in attempt["reason"] and not attempt["cost_usd"]
    assert budget.spent_usd == 0 and budget.ledger.held == {}


@pytest.mark.parametrize("cost", [float("nan"), -0.01, float("inf")])
def test_a_settlement_that_is_no_cost_is_refused_before_it_is_written(tmp_path, cost):
    journal = tmp_path / "budget-settled.jsonl"
    with pytest.raises(ValueError, match="is no cost"):
        append_settlement(journal, "call-1", cost)
    assert not journal.exists()


def test_a_budget_record_that_spent_less_than_it_counts_at_the_maximum_is_named(tmp_path):
    write_budget(tmp_path, BudgetRecord(cap_usd=1.0, spent_usd=0.001, counted_at_max={"call-1": 0.5}))
    append_settlement(tmp_path / "budget-settled.jsonl", "call-1", 0.0)
    with pytest.raises(InputError, match="less than the calls it counts"):
        read_budget(tmp_path, 1.0)


def test_a_call_in_flight_in_a_journaled_budget_is_on_disk_before_it_is_sent(tmp_path):
    """The leakage probe's ledger (in the driver, before any actor): a kill mid-call must not lose the call."""
    write_budget(tmp_path, BudgetRecord(cap_usd=1.0, spent_usd=0.1))
    budget = JournaledBudget(tmp_path, read_budget(tmp_path, 1.0))

    async def reserve_and_crash() -> int:
        return await budget.reserve(0.3)
    token = asyncio.run(reserve_and_crash())
    on_disk = json.loads((tmp_path / BUDGET_FILE).read_text())
    assert list(on_disk["in_flight_usd"].values()) == [0.3]
    assert read_budget(tmp_path, 1.0).spent_usd == pytest.approx(0.4)  # a kill now: counted at its maximum

    asyncio.run(budget.settle(token, 0.05))
    assert json.loads((tmp_path / BUDGET_FILE).read_text())["in_flight_usd"] == {}
    assert read_budget(tmp_path, 1.0).spent_usd == pytest.approx(0.15)


def test_a_journaled_budget_records_the_refusal_that_reached_its_cap(tmp_path):
    budget = JournaledBudget(tmp_path, read_budget(tmp_path, 0.2))
    with pytest.raises(BudgetExhausted):
        asyncio.run(budget.reserve(0.5))
    assert "reached" in (json.loads((tmp_path / BUDGET_FILE).read_text())["reached"] or "")
