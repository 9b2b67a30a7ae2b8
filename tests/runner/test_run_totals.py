"""Per-run accounting: a run's calls, tokens and cost are its own, however many runs share a gateway.

The identity every run holds: its totals (``result.json``, ``run_end``, ``runs.parquet``) equal the sums over
the ``llm_call`` events of its trace's last attempt (``calls.parquet``); ``failed`` counts its ``llm_failure``
events. ``cost_usd`` is what was paid now, so it sums the rows that were not served from the cache.
"""

import asyncio
import json
import threading
from pathlib import Path

import pandas as pd
import pytest
import yaml

from madbench.data.market.pack import load_pack
from madbench.data.scenario import Scenario
from madbench.debate.config_file import load_debate_config
from madbench.debate.events import LLMCall, LLMFailure, RunEnd, RunStart, last_attempt
from madbench.debate.trace import read_trace
from madbench.gateway import ModelRouting, ModelSpec, RateLimits, ResponseCache
from madbench.runner.batch import expand, load_batch, resolve_configs, resolve_scenarios
from madbench.runner.execute import run_batch
from madbench.runner.pipeline import run_debate
from madbench.runner.store import BatchLayout
from madbench.runner.wiring import build_gateway
from madbench.sim.provider import SimProvider

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs" / "debate"
TICKERS = ["AAA", "BBB", "CCC", "DDD"]
PRICED = "openai/gpt-4o-mini"  # in litellm's offline cost map: the simulator's usage has a known cost
#: The totals a run reports and the calls table can check.
SUMMED = ("calls", "cached", "prompt_tokens", "completion_tokens", "cost_usd", "calls_with_unknown_cost")


def sums_of(events) -> dict:
    """What a run's totals must be: sums over the llm_call (and llm_failure) events of one attempt."""
    calls = [e for e in events if isinstance(e, LLMCall)]
    return {"calls": len(calls), "cached": sum(e.cached for e in calls),
            "failed": sum(isinstance(e, LLMFailure) for e in events),
            "prompt_tokens": sum(e.prompt_tokens or 0 for e in calls),
            "completion_tokens": sum(e.completion_tokens or 0 for e in calls),
            "cost_usd": sum(e.cost_usd or 0.0 for e in calls if not e.cached),
            "calls_with_unknown_cost": sum(e.cost_usd is None for e in calls)}


def attempt_events(trace: Path) -> list:
    return last_attempt(read_trace(trace).typed())


def assert_run_accounts_for_its_trace(result, trace: Path) -> list:
    events = attempt_events(trace)
    expected = sums_of(events)
    assert {k: result.totals[k] for k in expected} == pytest.approx(expected, abs=1e-12), result.run_id
    end = [e for e in events if isinstance(e, RunEnd)]
    assert len(end) == 1 and end[0].totals == result.totals  # the trace records the same account
    return events


def config(name: str, model: str | ModelSpec = "rules/auto"):
    return load_debate_config(CONFIGS / name).model_copy(update={"models": ModelRouting.single(model)})


@pytest.fixture
def pack(make_pack):
    return load_pack(make_pack(tickers=tuple(TICKERS)))


def scenario(max_weight: float = 0.6, quarter: str = "2021Q3") -> Scenario:
    return Scenario(id=f"syn-{quarter}-{max_weight}", invest_quarter=quarter, tickers=TICKERS,
                    constraints={"max_weight": max_weight, "min_holdings": 2})


def test_overlapping_runs_on_one_gateway_each_count_only_their_own_calls(pack, tmp_path):
    names = ["single-causal.yaml", "mean3-causal.yaml", "causal-debate-3.yaml", "a10.yaml", "desks.yaml", "tradingagents.yaml"]
    jobs = [(config(n), k) for n in names for k in (0, 1)]
    gw = build_gateway()

    async def main():
        return await asyncio.gather(*(run_debate(scenario(), pack, c, gw, tmp_path, k) for c, k in jobs))

    results = asyncio.run(main())
    assert len({r.run_id for r in results}) == 12 and all(r.status == "ok" for r in results), [r.error for r in results]
    starts, ends = [], []
    for r in results:
        events = assert_run_accounts_for_its_trace(r, tmp_path / r.run_id / "trace.jsonl")
        starts.append(next(e.t for e in events if isinstance(e, RunStart)))
        ends.append(next(e.t for e in events if isinstance(e, RunEnd)))
        assert r.totals["calls"] > 0 and r.totals["failed"] == 0
    assert max(starts) <= min(ends)  # every run was under way while every other one was: they all overlapped
    assert len({r.totals["calls"] for r in results}) > 3  # the configs make different numbers of calls
    assert gw.totals.calls == sum(r.totals["calls"] for r in results)  # nothing counted twice, nothing lost


def broken_judge(context, content):
    """The judge of a scenario with max_weight 0.5 never answers in JSON: those runs fail at the judge."""
    if context.get("phase") == "judge" and context["constraints"]["max_weight"] == 0.5:
        return "I would rather not say."
    return content


def test_tokens_cost_and_failures_are_the_runs_own_and_a_replay_costs_nothing(pack, tmp_path):
    with SimProvider(answer_filter=broken_judge) as sim, ResponseCache(tmp_path / "cache") as cache:
        spec = ModelSpec(model=PRICED, api_base=sim.url, send_context=True, limits=RateLimits(max_concurrency=8))
        judged = config("mean3-causal.yaml", spec).model_copy(update={"aggregation": "judge"})  # 3 proposals, a judge
        jobs = [(scenario(0.6), config("single-causal.yaml", spec), k) for k in (0, 1)]
        jobs += [(scenario(0.6), config("causal-debate-3.yaml", spec), 0)]  # with CRIT, asked by the scorer
        jobs += [(scenario(w), judged, k) for w in (0.6, 0.5) for k in (0, 1)]

        def batch(out: Path):
            gw = build_gateway(cache=cache)

            async def main():
                return await asyncio.gather(*(run_debate(s, pack, c, gw, out, k) for s, c, k in jobs))

            return gw, asyncio.run(main())

        gw, first = batch(tmp_path / "first")
        replay_gw, replay = batch(tmp_path / "replay")
    assert [r.status for r in first] == [r.status for r in replay] == ["ok"] * 5 + ["failed"] * 2
    failure_cost = 0.0
    for r in first:
        events = assert_run_accounts_for_its_trace(r, tmp_path / "first" / r.run_id / "trace.jsonl")
        assert r.totals["prompt_tokens"] > 0 and r.totals["completion_tokens"] > 0 and r.totals["cost_usd"] > 0
        assert r.totals["calls_with_unknown_cost"] == 0
        assert r.totals["failed"] == (r.status == "failed")
        if r.config_name == "causal-debate-3":  # the scorer's CRIT calls go through the run's context too
            assert sum(isinstance(e, LLMCall) and e.phase == "crit" for e in events) == 6
        failure_cost += sum(a.get("cost_usd") or 0.0 for e in events if isinstance(e, LLMFailure) for a in e.attempts)
    assert failure_cost > 0  # the judge's rejected answers were paid for: the budget counts them, the run's table not
    assert gw.budget.spent_usd == pytest.approx(sum(r.totals["cost_usd"] for r in first) + failure_cost)
    for a, b in zip(first, replay, strict=True):
        assert_run_accounts_for_its_trace(b, tmp_path / "replay" / b.run_id / "trace.jsonl")
        assert b.run_id == a.run_id and b.totals["cached"] == b.totals["calls"] == a.totals["calls"]
        assert b.totals["cost_usd"] == 0.0 and b.totals["failed"] == a.totals["failed"]
        assert (b.totals["prompt_tokens"], b.totals["completion_tokens"]) == (a.totals["prompt_tokens"], a.totals["completion_tokens"])
    for g, results in ((gw, first), (replay_gw, replay)):
        for field in ("calls", "cached", "failed", "prompt_tokens", "completion_tokens"):
            assert getattr(g.totals, field) == sum(r.totals[field] for r in results)


class FlakyJudge:
    """The first attempt of every judge call fails (three answers that are not JSON, so the run fails and is retried
    by the batch, its other calls then served from the cache); the judge of max_weight 0.5 never answers.
    (Counted per judge task: one replicate per scenario, as replicates ask the same task.)"""

    def __init__(self):
        self.seen: dict[str, int] = {}
        self.lock = threading.Lock()

    def __call__(self, context, content):
        if context.get("phase") != "judge":
            return content
        with self.lock:
            key = json.dumps(context, sort_keys=True)
            self.seen[key] = self.seen.get(key, 0) + 1
            first_attempt = self.seen[key] <= 3
        return "not JSON" if first_attempt or context["constraints"]["max_weight"] == 0.5 else content


@pytest.mark.slow
def test_batch_tables_agree_run_by_run(make_pack, tmp_path, ray_local):
    pack_dir = make_pack(tickers=tuple(TICKERS))
    with SimProvider(answer_filter=FlakyJudge()) as sim:
        scen = tmp_path / "scenarios.yaml"
        scen.write_text(yaml.safe_dump({"scenarios": [
            {"id": f"s{q}", "invest_quarter": q, "tickers": TICKERS, "constraints": {"max_weight": w}}
            for q, w in (("2021Q2", 0.6), ("2021Q3", 0.6), ("2021Q4", 0.6), ("2022Q1", 0.5))]}))
        spec_path = tmp_path / "batch.yaml"
        spec_path.write_text(yaml.safe_dump({
            "name": "acc", "scenarios": {"file": str(scen)},
            "configs": [str(CONFIGS / "single-causal.yaml"), str(CONFIGS / "causal-debate-3.yaml")],
            "model": {"model": PRICED, "api_base": sim.url, "send_context": True, "limits": {"max_concurrency": 8}},
            "replicates": 1, "pack": str(pack_dir), "retries": 1, "max_in_flight": 16, "workers": 1}))
        spec, base = load_batch(spec_path)
        pack = load_pack(pack_dir)
        runs = expand(spec, resolve_scenarios(spec, base, pack, str(spec_path)), resolve_configs(spec, base, str(spec_path)))
        layout = BatchLayout(tmp_path / "results" / "acc")
        stats = run_batch(spec, runs, layout, str(pack_dir), [], str(tmp_path / "cache"), quiet=True)
    manifest = json.loads((layout.root / "manifest.json").read_text())["runs"]
    assert stats.status.model_dump() == {"ok": 7, "failed": 1, "pending": 0, "not_needed": 0}, [(m["config"], m["attempts"], m.get("error")) for m in manifest]
    table = pd.read_parquet(layout.root / "runs.parquet").set_index("run_id")
    calls = pd.read_parquet(layout.root / "calls.parquet")
    assert len(table) == 8 and int(table["calls"].sum()) == len(calls)
    per_run = calls.groupby("run_id").agg(calls=("seq", "size"), cached=("cached", "sum"),
                                          prompt_tokens=("prompt_tokens", "sum"), completion_tokens=("completion_tokens", "sum"))
    per_run["cost_usd"] = calls[~calls["cached"]].groupby("run_id")["cost_usd"].sum()
    per_run = per_run.reindex(table.index).fillna(0)
    for field in ("calls", "cached", "prompt_tokens", "completion_tokens"):
        assert (table[field] == per_run[field]).all(), field
    assert table["cost_usd"].to_numpy() == pytest.approx(per_run["cost_usd"].to_numpy(), abs=1e-12)
    assert table["prompt_tokens"].min() > 0 and (table["cost_usd"] > 0).sum() == 7  # the failed run's last try: all cached
    retried = 0
    for run_id, row in table.iterrows():
        events = read_trace(layout.trace_path(run_id)).typed()
        attempts = sum(isinstance(e, RunStart) for e in events)
        assert row["failed"] == sums_of(last_attempt(events))["failed"]
        if row["config"] == "causal-debate-3":
            # Retried once: the table counts the last attempt only (the first one's calls stay in the trace).
            assert attempts == 2 and row["calls"] < sum(isinstance(e, LLMCall) for e in events)
            assert row["status"] == ("failed" if row["scenario_id"] == "s2022Q1" else "ok")
            retried += row["status"] == "ok"
            if row["status"] == "ok":
                assert row["cached"] == row["calls"] - 1 and row["failed"] == 0  # only the judge was asked anew
            else:
                assert row["failed"] == 1
        else:
            assert attempts == 1 and row["failed"] == 0
    assert retried == 3
