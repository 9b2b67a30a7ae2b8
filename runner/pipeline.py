"""One debate run end to end: memo → protocol → trace → backtest → result.json.

The run directory holds ``trace.jsonl`` (append-only) and, once finished,
``result.json`` (written atomically). Re-running an interrupted or failed run
appends a new ``run_start`` marked as a resume and replays from the response
cache, so paid calls are not repeated and the result equals an uninterrupted
run. A finished run is returned as stored.
"""

from __future__ import annotations

import hashlib
import json
import platform
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from madbench.data.atomic import atomic_write_text
from madbench.data.blind import Blinded, blind_memo, pack_companies
from madbench.data.errors import InputError
from madbench.data.market.pack import Pack
from madbench.data.memo import Memo, build_memo
from madbench.data.scenario import Scenario, check_against_pack
from madbench.debate.config import DebateConfig
from madbench.debate.context import DebateFailure, RunContext
from madbench.debate.events import (
    AnyEvent,
    Backtest,
    BlindMap,
    Final,
    MemoShown,
    RunEnd,
    RunStart,
    last_attempt,
    recorded_answers,
    unblinded,
)
from madbench.debate.outcome import Outcome
from madbench.debate.profiles import load_profile
from madbench.debate.protocols import protocol_of
from madbench.debate.run_metrics import RunView, metric_extras
from madbench.debate.trace import TraceWriter, read_trace
from madbench.eval.backtest import backtest, holding_window
from madbench.eval.baselines import baseline_metrics
from madbench.eval.dynamics import agent_metrics, final_positions
from madbench.gateway import Completion, Gateway, LLMRequest, ModelSpec, Totals
from madbench.gateway.gateway import passthrough
from madbench.gateway.models import SchemaScope
from madbench.gateway.secrets import redact
from madbench.results import FORMAT_VERSION, DebateDirs, RunResult, read_history, read_result
from madbench.results.traces import check_attempts
from madbench.runner.wiring import build_scorer
from madbench.scoring.crit_judge import load_crit_prompt
from madbench.scoring.prompts import load_scorer_prompt
from madbench.scoring.rca_judge import RCA_VARIABLES
from madbench.scoring.rubric import load_rubric


def prompt_hashes(config: DebateConfig) -> dict[str, str]:
    """Hashes of every prompt text the run can use: editing a template changes the run id."""
    out = {f"{a.role}/{a.tier}": load_profile(a.role, a.tier).content_hash() for a in config.agents}
    if config.aggregation == "judge":
        out[f"judge/{config.judge_tier}"] = load_profile("judge", config.judge_tier).content_hash()
    out["crit"] = load_crit_prompt().digest
    out["rubric"] = load_rubric(config.crit_rubric).digest()
    out["rca"] = load_scorer_prompt("rca", RCA_VARIABLES).digest
    return out | protocol_of(config).prompt_hashes(config.protocol)


def config_identity(config: DebateConfig) -> dict[str, Any]:
    """What a config puts in its runs' ids: ``DebateConfig.identity`` (not its name, description or deployment
    settings) and its prompt texts' hashes. A batch computes it once per config (reading and hashing every template
    is most of a run id's cost)."""
    return {"config": config.identity(), "prompts": prompt_hashes(config)}


def run_id_for(scenario: Scenario, config: DebateConfig, sample_index: int, identity: dict[str, Any] | None = None) -> str:
    """The run's content hash: the scenario as the debate sees it (its id included, so that two scenarios of the same
    content under two ids are two runs; the config's constraint overrides applied), the config (``config_identity``,
    or ``identity`` when it is at hand) and the replicate: the SHA-256 of that payload's sorted-key JSON, its first
    16 hex digits."""
    payload = {"scenario": _seen(scenario, config).model_dump(mode="json"), "sample_index": sample_index,
               **(identity or config_identity(config))}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def _seen(scenario: Scenario, config: DebateConfig) -> Scenario:
    """The scenario as the config's debate sees it: its constraint overrides applied."""
    return scenario.model_copy(update={"constraints": config.effective_constraints(scenario.constraints,
                                                                                   "config.constraints")})


def run_ids_for(scenario: Scenario, config: DebateConfig, sample_indices: list[int],
                identity: dict[str, Any] | None = None) -> list[str]:
    """``run_id_for`` of each of ``sample_indices``, the scenario and config serialized once: the payload's JSON is
    ``{"config": …, "prompts": …, "sample_index": k, "scenario": …}`` (its keys sorted), so the digest of everything
    before ``k`` is computed once and copied, and only ``k`` and the scenario's text are hashed per replicate. A
    batch's expansion then costs a hash per run, not a serialization (tests check it against ``run_id_for``)."""
    identity = identity or config_identity(config)
    if sorted(identity) != ["config", "prompts"]:
        raise ValueError(f"a config identity has the keys config and prompts, not {sorted(identity)}")
    head = hashlib.sha256(("{" + ", ".join(f"{json.dumps(k)}: {json.dumps(identity[k], sort_keys=True)}"
                                             for k in ("config", "prompts")) + ', "sample_index": ').encode())
    tail = (', "scenario": ' + json.dumps(_seen(scenario, config).model_dump(mode="json"), sort_keys=True) + "}").encode()
    ids = []
    for k in sample_indices:
        digest = head.copy()
        digest.update(json.dumps(k).encode())
        digest.update(tail)
        ids.append(digest.hexdigest()[:16])
    return ids


def check_run_id(run_id: str, scenario: Scenario, config: DebateConfig, sample_index: int) -> str:
    """``run_id`` (a batch computes it once, when it expands) checked against the run's own content before it names
    the run's trace, result or parts: an ``InputError`` when that content hashes to another id."""
    actual = run_id_for(scenario, config, sample_index)
    if run_id != actual:
        raise InputError(f"run {run_id}", f"the id does not match the run's content: scenario {scenario.id} × config "
                         f"{config.name} × replicate {sample_index} hash to {actual} here", "give every node the same "
                         "madbench, configs and prompt templates as the driver (the id hashes them all), then run the "
                         "batch again")
    return run_id


class RunLayout:
    """How a run commits: its result written last, atomically, once the guard allows. Where its files are comes from a
    results layout (``madbench.results``): ``DebateLayout`` for ``madbench debate --out``, a batch's ``BatchLayout``."""

    root: Path
    #: Raises (``DriverGone``) when this process may no longer commit here (runner.lock.WriterGuard); None: always may.
    guard: Callable[[], None] | None = None
    trace_path: Callable[[str], Path]  # from the results layout it is mixed with
    result_path: Callable[[str], Path]

    def commit(self, result: RunResult, history: list[AnyEvent]) -> None:
        """Write the run's result: its commit point. ``history``: its whole trace, read once for the commit (a batch
        builds the run's table rows from it)."""
        if self.guard is not None:
            self.guard()
        atomic_write_text(self.result_path(result.run_id), result.model_dump_json(indent=1))


class DebateLayout(RunLayout, DebateDirs):
    """``<out>/<run_id>/``: a run of ``madbench debate --out``."""


async def run_debate(scenario: Scenario, pack: Pack, config: DebateConfig, gateway: Gateway, out_dir: str | Path | RunLayout,
                     sample_index: int = 0, where: str = "scenario", with_baselines: bool = True,
                     retry_failed: bool = True, run_id: str | None = None) -> RunResult:
    """The run of ``scenario`` × ``config`` × ``sample_index``; ``run_id``: its id as a batch computed it (checked
    against the run's content, ``check_run_id``), else computed here."""
    check_against_pack(scenario, pack, where)
    scorer = build_scorer(config)
    constraints = config.effective_constraints(scenario.constraints, "config.constraints")
    problems = constraints.problems(len(scenario.tickers))
    if problems:
        raise InputError("config.constraints", "; ".join(problems), "relax the override for this scenario")
    run_id = run_id_for(scenario, config, sample_index) if run_id is None else check_run_id(run_id, scenario, config,
                                                                                           sample_index)
    scenario = scenario.model_copy(update={"constraints": constraints})
    layout = out_dir if isinstance(out_dir, RunLayout) else DebateLayout(out_dir)
    result_path = layout.result_path(run_id)
    if result_path.exists():
        stored = read_result(result_path, run_id)
        if stored.status == "ok" or not retry_failed:
            return stored  # finished: nothing to redo
        # A failed run is attempted again (its trace keeps the failed attempt); cached calls are free.
    trace_path = layout.trace_path(run_id)
    readout = read_trace(trace_path, repair=True)  # a torn tail from a crash is cut off (and reported)
    check_attempts(readout.events, trace_path)
    memo, blinded = _memos(scenario, pack, config, where)
    base = dict(run_id=run_id, scenario_id=scenario.id, invest_quarter=scenario.invest_quarter,
                config_name=config.name, sample_index=sample_index)
    with TraceWriter(trace_path) as trace:
        attempt = sum(1 for e in readout.events if e["event"] == "run_start") + 1
        trace.write(RunStart(run_id=run_id, attempt=attempt, resumed=attempt > 1, repaired=readout.problems,
                   scenario=scenario.model_dump(mode="json"), config=config.model_dump(mode="json"),
                   config_hash=config.content_hash(), sample_index=sample_index, prompt_hashes=prompt_hashes(config),
                   python=platform.python_version(), format_version=FORMAT_VERSION))
        if blinded is not None:
            trace.write(BlindMap(mapping=blinded.mapping, options=config.blind.model_dump(mode="json"),
                                 scenario_id=blinded.scenario.id))
        trace.write(MemoShown(sha256=memo.sha256, as_of=str(memo.as_of.date()), n_items=len(memo.items),
                   ids=sorted(memo.evidence_ids), text=memo.text))  # the text lets a trace be read without the pack
        ctx = RunContext(run_id, blinded.scenario if blinded else scenario, memo, constraints, config,
                         BlindGateway(gateway, blinded) if blinded else gateway, trace,
                         scorer, sample_index, workdir=_workdir(layout, scenario, blinded),
                         past_performance=_past_performance(pack, scenario, blinded),
                         recorded_answers=recorded_answers(readout.events))
        try:
            outcome = _unblind(await protocol_of(config).run(ctx), blinded)
        except DebateFailure as exc:
            error = redact(str(exc))
            result = RunResult(**base, status="failed", error=error, totals=_totals(ctx))
            trace.write(RunEnd(status="failed", error=error, totals=result.totals))
            trace.sync()
            layout.commit(result, read_history(trace_path))
            return result
        trace.write(Final(weights=outcome.weights, cash=outcome.cash, method=outcome.method, notes=outcome.notes))
        metrics, baselines = _backtest(pack, scenario, outcome.weights, with_baselines)
        trace.write(Backtest(metrics=metrics, baselines=baselines))
        history = read_history(trace_path)  # the one read of this attempt's trace: agents' backtests, commit, tables
        view = RunView(history, outcome.weights, outcome.cash, metrics, outcome.extras, config)
        extras = outcome.extras | metric_extras([*protocol_of(config).metrics, *config.metrics], view, f"config {config.name}")
        result = RunResult(**base, status="ok", weights=outcome.weights, cash=outcome.cash, method=outcome.method,
                           rounds_run=outcome.rounds_run, rho_bar=outcome.rho_bar, rho_by_round=outcome.rho_by_round,
                           js=outcome.js, interventions=outcome.interventions, notes=outcome.notes, extras=extras, metrics=metrics,
                           baselines=baselines, agent_metrics=_agent_backtests(pack, scenario, history), totals=_totals(ctx))
        history.append(trace.write(RunEnd(status="ok", totals=result.totals)))
    layout.commit(result, history)
    return result


def _totals(ctx: RunContext) -> dict[str, Any]:
    """This attempt's own calls, tokens and cost (the gateway credits each call of the run to ``ctx.account``):
    one ``llm_call`` event of this attempt per answered call, one ``llm_failure`` per failed call. A resumed run
    counts its last attempt, the one the batch tables are built from; replayed calls count as cached."""
    return ctx.account.model_dump()


def _memos(scenario: Scenario, pack: Pack, config: DebateConfig, where: str) -> tuple[Memo, Blinded | None]:
    """The memo the debate reads: the scenario's, or its blind counterpart (with the pseudonyms) when the config is blind."""
    memo = build_memo(scenario, pack, where)
    if not config.blind.enabled:
        return memo, None
    blinded = blind_memo(memo, scenario, pack_companies(pack.universe), config.blind)
    return blinded.memo, blinded


class BlindGateway:
    """The gateway as a blind run's context reaches it (it asks ``complete`` and ``schema_scope``): every message passes
    ``Blinded.prompt`` on its way out, and the request's schema and context ``Blinded.data``, so that nothing sent
    names a company, ticker or calendar date of the real scenario. Templates and protocols write only what the blind
    memo gives them (the role prompts' example ID is ``<TICKER>-RET60``, a reflection names no quarter); what this
    still catches is the models' own words quoted into later turns (a claim that names the company it guessed, a
    year). Cache keys hold the request as sent."""

    def __init__(self, gateway: Gateway, blinded: Blinded):
        self.gateway, self.blinded = gateway, blinded

    async def complete(self, request: LLMRequest, spec: ModelSpec | str | None = None, validate=passthrough,
                       account: Totals | None = None) -> Completion:
        messages = [m.model_copy(update={"content": self.blinded.prompt(m.content)}) for m in request.messages]
        sent = request.model_copy(update={"messages": messages, "context": self.blinded.data(request.context),
                                          "response_schema": self.blinded.data(request.response_schema)})
        return await self.gateway.complete(sent, spec, validate, account=account)

    def schema_scope(self, spec: ModelSpec) -> SchemaScope:
        return self.gateway.schema_scope(spec)


def _workdir(layout: RunLayout, scenario: Scenario, blinded: Blinded | None) -> Path:
    """Where a protocol keeps state across runs (TradingAgents' decision log, keyed by the universe it saw). Every
    blind universe of a size looks alike (ASSET_A, ASSET_B, ...), so a blind run's state is kept per real universe."""
    if blinded is None:
        return layout.root
    return layout.root / "blind" / hashlib.sha256(",".join(sorted(scenario.tickers)).encode()).hexdigest()[:12]


def _unblind(outcome: Outcome, blinded: Blinded | None) -> Outcome:
    """A blind debate's outcome in real tickers (its allocation, and the keys of its protocol extras), for the
    backtest, the result and runs.parquet."""
    if blinded is None:
        return outcome
    back = blinded.reverse

    def real(value):
        if isinstance(value, dict):
            return {back.get(k, k): real(v) for k, v in value.items()}
        return [real(v) for v in value] if isinstance(value, list) else value
    return replace(outcome, weights=blinded.to_real(outcome.weights), extras=real(outcome.extras))


def _past_performance(pack: Pack, scenario: Scenario, blinded: Blinded | None = None):
    """Metrics of holdings over an earlier quarter of this scenario's universe (for a protocol's reflection); a blind
    run's holdings are in its pseudonyms (the same for the universe every quarter: ``blind.pseudonyms``)."""
    def measure(quarter, weights: dict[str, float], where: str):
        window = holding_window(pack, quarter, scenario.tickers, where=where)
        held = blinded.to_real(weights) if blinded is not None else weights
        return backtest(window, held, allow_cash=True, where=where).metrics
    return measure


def _agent_backtests(pack: Pack, scenario: Scenario, history: list[AnyEvent]) -> dict[str, dict[str, Any]]:
    """Each debate agent's final allocation (from this attempt's events in the trace) backtested alone."""
    finals = final_positions(unblinded(last_attempt(history)))  # a blind run's turns in real tickers
    if not finals:
        return {}
    window = holding_window(pack, scenario.quarter, scenario.tickers, where=f"scenario {scenario.id}")
    return agent_metrics(window, finals, scenario.constraints.allow_cash)


def _backtest(pack: Pack, scenario: Scenario, weights: dict[str, float], with_baselines: bool):
    window = holding_window(pack, scenario.quarter, scenario.tickers, where=f"scenario {scenario.id}")
    result = backtest(window, weights, allow_cash=scenario.constraints.allow_cash, where=f"final allocation of {scenario.id}")
    baselines = {}
    if with_baselines:
        baselines = {k: m.model_dump(mode="json") for k, m in
                     baseline_metrics(pack, scenario.quarter, scenario.tickers, window=window).items()}
    return result.metrics.model_dump(mode="json"), baselines
