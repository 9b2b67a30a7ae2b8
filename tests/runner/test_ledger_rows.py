"""calls.parquet agrees with the ledger: the paid calls budget.json counts that no trace records (a call a kill of the
driver left in flight, the leakage probe's calls) are rows of their own, so that the table's ``cost_usd`` sums to the
batch's spend."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from madbench.bench.reliability import _settle, _wait_for_requests, priced_batch, start_driver, stop_group
from madbench.data.market.pack import resolve_pack_dir
from madbench.results import BatchDirs
from madbench.results.table_schemas import CALLS, read_table, to_table
from madbench.runner.budget import BudgetRecord, CallTag, JournaledBudget, UntracedCall, read_budget, write_budget
from madbench.runner.replay import replay
from madbench.runner.store import PROBE_PHASE, ledger_calls, ledger_rows
from madbench.sim.provider import SimConfig, SimProvider

RUN, KEY = "run-a", "k" * 64


def _orphan(reserved: float, run_id: str | None = RUN, key: str | None = KEY, cost: float | None = None,
            orphaned: bool = True):
    return UntracedCall(run_id=run_id, model="openai/gpt-4o-mini", key=key, reserved_usd=reserved, cost_usd=cost,
                        orphaned=orphaned)


def test_an_orphaned_call_is_a_row_at_its_settled_cost_else_at_its_reserved_maximum():
    untraced = {"inv-1": _orphan(0.5), "inv-2": _orphan(0.25, key="other"), "probe-x-1": _orphan(0.3, None, None, 0.01,
                                                                                                  orphaned=False)}
    traced = {(RUN, KEY): {"agent": "a1", "phase": "propose", "round": 0, "label": "propose"}}
    rows = ledger_rows(untraced, {"inv-1": 0.02}, traced, {})
    by_call = {r["call_id"]: r for r in rows}
    assert by_call["inv-1"]["cost_usd"] == 0.02 and by_call["inv-1"]["orphaned"] is True  # its settlement line
    assert by_call["inv-2"]["cost_usd"] == 0.25  # no line: its reserved maximum, as the ledger counts it
    assert by_call["probe-x-1"]["cost_usd"] == 0.01 and by_call["probe-x-1"]["phase"] == PROBE_PHASE
    assert by_call["probe-x-1"]["orphaned"] is False and by_call["probe-x-1"]["run_id"] is None
    assert (by_call["inv-1"]["agent"], by_call["inv-1"]["phase"]) == ("a1", "propose")  # from the run's trace
    assert by_call["inv-1"]["model_requested"] == "openai/gpt-4o-mini" and by_call["inv-1"]["run_id"] == RUN
    assert sorted(r["seq"] for r in rows) == [-3, -2, -1]  # no trace event: unique, never a traced seq
    table = to_table(rows, "calls", "calls.parquet")  # the declared schema takes them
    assert table.schema.names[:len(CALLS)] == CALLS.names


def test_an_orphaned_call_whose_answer_a_committed_row_counts_gets_no_row_of_its_own():
    rows = ledger_rows({"inv-1": _orphan(0.5), "inv-2": _orphan(0.5, key="other")}, {"inv-1": 0.02}, {},
                       {(RUN, KEY): 0.02})
    assert [r["call_id"] for r in rows] == ["inv-2"]


def test_of_two_kills_orphans_of_one_request_only_the_one_whose_answer_the_row_counts_is_left_out():
    untraced = {"first-1": _orphan(0.5), "second-1": _orphan(0.5)}  # each kill left the same request in flight
    rows = ledger_rows(untraced, {"first-1": 0.03, "second-1": 0.02}, {}, {(RUN, KEY): 0.02})
    assert [(r["call_id"], r["cost_usd"]) for r in rows] == [("first-1", 0.03)]


def test_the_calls_a_crash_left_in_flight_are_kept_as_untraced_calls_across_reads(tmp_path):
    write_budget(tmp_path, BudgetRecord(spent_usd=1.0, in_flight_usd={"inv-1": 0.5},
                                        in_flight_calls={"inv-1": CallTag(run_id=RUN, model="m", key=KEY)}))
    read = read_budget(tmp_path, None)
    assert read.spent_usd == pytest.approx(1.5)
    assert read.untraced["inv-1"].run_id == RUN and read.untraced["inv-1"].orphaned
    write_budget(tmp_path, read)  # the next start writes what it read: the orphan stays, counted once
    again = read_budget(tmp_path, None)
    assert again.spent_usd == pytest.approx(1.5) and set(again.untraced) == {"inv-1"}
    rows = ledger_calls(BatchDirs(tmp_path))
    assert [(r["call_id"], r["cost_usd"]) for r in rows] == [("inv-1", 0.5)]


def test_the_probes_settled_calls_are_untraced_calls_at_what_they_billed(tmp_path):
    async def go():
        budget = JournaledBudget(tmp_path, BudgetRecord(cap_usd=1.0))
        token = await budget.reserve(0.4)
        await budget.settle(token, 0.03)

    asyncio.run(go())
    record = read_budget(tmp_path, 1.0)
    [(call, probe)] = record.untraced.items()
    assert call.startswith("probe-") and probe.cost_usd == 0.03 and not probe.orphaned
    assert sum(r["cost_usd"] for r in ledger_rows(record.untraced, {}, {}, {})) == pytest.approx(record.spent_usd)


@pytest.mark.slow
def test_after_two_kills_of_the_driver_calls_parquet_sums_to_the_ledger(tmp_path, monkeypatch):
    """A priced batch against the simulator, its driver killed with SIGKILL twice with requests in flight, resumed to
    its end: the orphaned calls are rows, and calls.parquet's cost_usd sums to budget.json's spend."""
    monkeypatch.setenv("MADBENCH_CACHE_DIR", str(tmp_path / "cache"))  # never the user's
    log = tmp_path / "driver.log"
    with SimProvider(SimConfig(latency_median_s=0.5, seed=7)) as sim:
        batch = priced_batch(tmp_path, sim.url, 5.0, 2, resolve_pack_dir(None))
        root = tmp_path / "results" / "kills"
        proc = None
        try:
            for _ in range(2):
                proc = start_driver(batch, log)
                assert _wait_for_requests(sim, proc, 6, timeout_s=600), log.read_text()[-2000:]
                os.kill(proc.pid, signal.SIGKILL)  # the driver alone, as a crash would
                proc.wait()
            proc = start_driver(batch, log)
            assert proc.wait(timeout=1200) == 0, log.read_text()[-2000:]
        finally:
            if proc is not None and proc.poll() is None:
                stop_group(proc)
        _settle(sim)
    calls = read_table(root / "calls.parquet", "calls").to_pandas()
    spent = read_budget(root, None).spent_usd
    assert calls["orphaned"].fillna(False).any(), calls[["run_id", "seq", "cost_usd", "call_id"]].tail(10)
    assert abs(calls["cost_usd"].sum() - spent) <= 1e-4, (calls["cost_usd"].sum(), spent)
    orphans = calls[calls["orphaned"].fillna(False)]
    assert orphans["call_id"].notna().all() and orphans["run_id"].notna().all() and (orphans["seq"] < 0).all()
    # replay rebuilds the same rows, the ledger's included (a row with no trace behind it)
    result = replay(root, cache_dir=tmp_path / "cache")
    assert not [d for d in result.differences if d.table == "calls"], [d.line() for d in result.differences][:5]
