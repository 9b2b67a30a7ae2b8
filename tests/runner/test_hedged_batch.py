"""Hedged requests in a batch: calls.parquet records both copies of a hedged call, the spend counts every hedge, and
hedging changes no answer (the unhedged batch ends the same; replay finds no difference)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from madbench.bench.tail_latency import critical_paths
from madbench.results.table_schemas import CALLS, to_table
from madbench.runner.batch import load_batch, resolve_configs, with_settings
from madbench.runner.cli import main
from madbench.runner.launch import parse_settings
from madbench.runner.store import hedge_columns
from tests.conftest import requires_shared
from tests.runner.test_routing_profiles import CONFIGS, expanded, write_batch


def _attempt(kind: str, cost: float | None = 0.01, hedge: bool | None = None) -> dict:
    return {"model": "m", "kind": kind, "prompt_tokens": 10, "cost_usd": cost, "hedge": hedge}


def test_a_calls_hedge_columns_say_which_copy_answered_and_what_the_closed_one_costs():
    assert hedge_columns([_attempt("ok")]) == {"hedged": False, "hedge_won": None, "outraced_cost_usd": None}
    assert hedge_columns([_attempt("outraced", 0.03), _attempt("ok", hedge=True)]) == {
        "hedged": True, "hedge_won": True, "outraced_cost_usd": 0.03}
    assert hedge_columns([_attempt("outraced", 0.02, hedge=True), _attempt("ok")]) == {
        "hedged": True, "hedge_won": False, "outraced_cost_usd": 0.02}
    # the first copy failed (a 429 past its retries) and the hedge answered: hedged, nothing closed
    assert hedge_columns([_attempt("rate_limited", None), _attempt("ok", hedge=True)]) == {
        "hedged": True, "hedge_won": True, "outraced_cost_usd": None}
    # attempts written before hedging existed carry no "hedge"
    assert hedge_columns([{"model": "m", "kind": "ok"}])["hedged"] is False


def test_the_hedge_columns_are_declared_in_calls_parquet():
    row = {"run_id": "r", "seq": 1, "hedged": True, "hedge_won": False, "outraced_cost_usd": 0.5}
    table = to_table([dict.fromkeys(CALLS.names) | row], "calls", "calls.parquet")
    assert table.column("hedge_won").to_pylist() == [False] and table.column("outraced_cost_usd").to_pylist() == [0.5]


def test_hedging_settings_reach_the_models_and_leave_run_ids_alone(tmp_path):
    configs = [CONFIGS / "paper-debate3-causal.yaml"]
    plain = [r.run_id for r in expanded(write_batch(tmp_path, configs))]
    hedged = write_batch(tmp_path, configs, hedging={"quantile": 0.75, "max_share": 0.1},
                         routing={"tiers": {"strong": {"hedge": True}}})
    assert [r.run_id for r in expanded(hedged)] == plain
    spec, base = load_batch(hedged)
    assert (spec.hedging.quantile, spec.hedging.max_share, spec.hedging.enabled) == (0.75, 0.1, True)
    spec = with_settings(spec, parse_settings(["agents.hedge=false"]), "--set")
    [cfg] = resolve_configs(spec, base, str(hedged))
    assert cfg.models.resolve("judge", "crit").hedge is True  # strong
    assert cfg.models.resolve("macro", "propose").hedge is False  # agents


def test_a_runs_critical_path_sums_the_slowest_call_of_each_step():
    calls = pd.DataFrame({"run_id": ["a", "a", "a", "b", "a"], "phase": ["propose", "propose", "judge", "propose", "x"],
                          "round": [0, 0, 1, 0, 0], "label": ["p", "p", "j", "p", "x"],
                          "latency_s": [3.0, 5.0, 2.0, 4.0, 9.0], "call_id": [None, None, None, None, "inv-1"]})
    assert critical_paths(calls).to_dict() == {"a": 7.0, "b": 4.0}  # the ledger's untraced row is on no path


@requires_shared
@pytest.mark.slow
def test_a_hedged_a7_batch_counts_every_hedge_and_ends_as_the_unhedged_one(tmp_path, capsys):
    # 4 runs of the paper's a7 against the simulator with a long latency tail (σ 1), hedging past the median after 3
    # answers, up to half the requests: hedges are sure to be sent, won and lost.
    assert main(["bench", "hedging", "--runs", "4", "--latency-median", "0.4", "--latency-sigma", "1", "--quantile", "0.5",
                 "--max-share", "0.5", "--min-samples", "3", "--min-delay", "0.3", "--keep", str(tmp_path)]) == 0
    out = json.loads(capsys.readouterr().out)
    off, on = out["off"], out["on"]
    assert off["ok_runs"] == on["ok_runs"] == 4 and off["hedged_calls"] == 0 and off["closed_by_client"] == 0
    assert on["hedged_calls"] > 0 and on["hedged_share"] <= 0.5
    assert on["closed_by_client"] > 0 and on["outraced_cost_usd"] > 0  # the losers were closed, and counted
    # the spend counts every request, hedges and closed copies included: the calls paid for now sum to the ledger,
    # which is never below what the simulator billed
    for mode in (off, on):
        assert mode["paid_calls_cost_usd"] == pytest.approx(mode["spent_usd"], abs=1e-6)
        assert mode["spent_usd"] >= mode["simulator_billed_usd"] - 1e-6
    assert on["requests"] == on["calls"] + on["hedged_calls"] + on["refused_429"]
    assert out["runs_changed_in_outcome"] == 0
    assert out["replay_of_hedged"] == {"identical": True, "differences": 0, "provider_requests": 0}
    calls = pd.read_parquet(tmp_path / "on" / "results" / "calls.parquet")
    hedged = calls[calls["hedged"].fillna(False)]
    assert len(hedged) == on["hedged_calls"] and hedged["hedge_won"].notna().all()
    assert (calls.loc[~calls["hedged"].fillna(False), "hedge_won"].isna()).all()
