"""`madbench debate` (one debate with its backtest, outside any batch) and `madbench trace show`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from madbench.data.errors import InputError, format_validation_error
from madbench.data.market.pack import resolve_evidence_dirs, resolve_pack_dir
from madbench.data.scenario import find_scenario, load_scenarios
from madbench.debate.config_file import load_debate_config
from madbench.debate.events import (
    AnyEvent,
    Backtest,
    BlindMap,
    ControllerStep,
    Crit,
    Divergence,
    Event,
    Final,
    Intervention,
    InterventionCheck,
    LLMCall,
    LLMFailure,
    MemoShown,
    RunEnd,
    RunStart,
    Turn,
    parse_event,
)
from madbench.debate.trace import read_trace
from madbench.gateway import ResponseCache, resolve_cache_dir
from madbench.results import FORMAT_VERSION, DebateDirs
from madbench.results.records import DebateManifest, write_debate_manifest
from madbench.runner.api import checked_provenance
from madbench.runner.cli.commands import command_parser
from madbench.runner.cli.common import CACHE_DIR_HELP, add_pack_args, add_routing_args, load_pack, number
from madbench.runner.deployment import config_routing
from madbench.runner.exit_codes import EXIT_INPUT
from madbench.runner.pipeline import run_debate
from madbench.runner.wiring import build_gateway


def register(sub) -> None:
    p = command_parser(sub, "debate")
    p.add_argument("scenario_id", help="the scenario's id in the --scenarios file")
    p.add_argument("--scenarios", required=True, help="scenario YAML file")
    p.add_argument("--config", required=True, help="debate config, e.g. configs/debate/causal-debate-3.yaml")
    p.add_argument("--model", help="run every role and phase on this model (e.g. rules/auto, local/gemma3-270m, openai/gpt-4o-mini)")
    add_routing_args(p, "run the config on the routing profile configs/routing/NAME.yaml, its own routing replaced (e.g. "
                        "rules, paper-openai)", "of the config's routing (run ids do not change)")
    p.add_argument("--sample-index", type=number(int, ge=0), default=0, help="replicate number (default 0)")
    p.add_argument("--out", default="results/debates", help="directory for the run directory (default results/debates)")
    p.add_argument("--cache-dir", help=CACHE_DIR_HELP)
    p.add_argument("--no-cache", action="store_true", help="neither read nor write the response cache")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--require-clean", action="store_true", help="refuse to run from a git checkout with uncommitted changes")
    add_pack_args(p)
    p.set_defaults(func=cmd_debate)

    p = command_parser(sub, "trace")
    t = p.add_subparsers(dest="trace_cmd", required=True, metavar="ACTION", help="what to do with the trace")
    p = t.add_parser("show", help="render a run's trace readably")
    p.add_argument("run_dir", help="a run directory (holding trace.jsonl) or the trace file itself")
    p.add_argument("--responses", action="store_true", help="also print raw model responses")
    p.set_defaults(func=cmd_trace_show)


def cmd_debate(args) -> int:
    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise InputError("--out", f"{args.out} is a file, not a directory", "give a directory for the run directories "
                         "(it is made if missing)")
    config = load_debate_config(args.config)
    if args.model and "/" not in args.model:
        raise InputError("--model", f"{args.model!r} is not a model string", "write e.g. rules/auto, local/gemma3-270m or openai/gpt-4o-mini")
    if args.model or args.routing or args.settings:
        config = config.model_copy(update={"models": config_routing(config.models, args.model, args.routing, args.settings)})
    scenarios = load_scenarios(args.scenarios)
    _, scenario = find_scenario(scenarios, args.scenario_id, args.scenarios)
    pack = load_pack(args)
    provenance = checked_provenance(resolve_pack_dir(args.pack), resolve_evidence_dirs(args.evidence), Path(args.scenarios),
                                    args.require_clean)
    cache = None if args.no_cache else ResponseCache(resolve_cache_dir(args.cache_dir))
    try:
        result = asyncio.run(run_debate(scenario, pack, config, build_gateway(cache=cache), args.out, args.sample_index,
                                        where=f"{args.scenarios}: {scenario.id}"))
    finally:
        if cache:
            cache.close()
    dirs = DebateDirs(args.out)
    write_debate_manifest(dirs.manifest_path(result.run_id), DebateManifest(
        format_version=FORMAT_VERSION, run_id=result.run_id, config=config.model_dump(mode="json"),
        scenario_id=scenario.id, provenance=provenance))
    run_dir = dirs.result_path(result.run_id).parent
    if args.json:
        print(result.model_dump_json(indent=1))
        return 0 if result.status == "ok" else 1
    print(f"run {result.run_id} ({config.name} on {scenario.id}, replicate {args.sample_index}): {result.status}")
    if result.status != "ok":
        print(f"failed: {result.error}")
        print(f"trace: {dirs.trace_path(result.run_id)}")
        return 1
    held = {t: w for t, w in result.weights.items() if w > 0}
    print(f"final allocation ({result.method}): " + ", ".join(f"{t} {w:.3f}" for t, w in sorted(held.items(), key=lambda x: -x[1]))
          + (f", cash {result.cash:.3f}" if result.cash else ""))
    rho = "n/a (not scored)" if result.rho_bar is None else f"{result.rho_bar:.3f}"
    print(f"rho_bar: {rho}; by round: {', '.join(f'{r:.3f}' for r in result.rho_by_round) or '-'}")
    print("JSD: " + ", ".join(f"{k} {v:.3f}" for k, v in result.js.items()))
    if result.interventions:
        print("interventions: " + "; ".join(f"{i['name']} r{i['round']} {i.get('agent', '')} {i.get('reason', '')}".strip() for i in result.interventions))
    m = result.metrics
    assert m is not None  # an ok run holds its backtest's metrics
    print(f"metrics: return {m['total_return_pct']:.2f}% | SPY {m['spy_return_pct']:.2f}% | excess {m['excess_return_pct']:.2f}% | "
          f"Sharpe {_f(m['sharpe'])} | Sortino {_f(m['sortino'])} | vol {_f(m['volatility'])} | max DD {m['max_drawdown_pct']:.2f}%")
    for name, b in result.baselines.items():
        print(f"  baseline {name}: return {b['total_return_pct']:.2f}% | Sharpe {_f(b['sharpe'])}")
    t = result.totals
    print(f"calls: {t['calls']} answered ({t['cached']} cached), {t['failed']} failed | tokens {t['prompt_tokens']}+{t['completion_tokens']} | "
          f"cost ${t['cost_usd']:.4f}" + (f" (+{t['calls_with_unknown_cost']} calls of unknown cost)" if t['calls_with_unknown_cost'] else ""))
    print(f"run directory: {run_dir}")
    return 0


def _f(x) -> str:
    return "null" if x is None else f"{x:.3f}"


def cmd_trace_show(args) -> int:
    path = Path(args.run_dir)
    path = path / DebateDirs.TRACE if path.is_dir() else path
    if not path.is_file():
        raise InputError(args.run_dir, "no trace.jsonl here", "give a run directory from `madbench debate` or a batch's traces/")
    readout = read_trace(path)
    if not readout.events and not readout.problems:
        raise InputError(path, "the trace holds no event", "give a run's trace.jsonl, written by `madbench debate` or `madbench run`")
    for problem in readout.problems:
        print(f"! {problem}")
    unreadable = 0
    for record in readout.events:
        try:
            event = parse_event(record)
        except ValidationError as exc:  # written by another version, or edited: shown, never guessed at
            unreadable += 1
            print(f"! {path}: event {record.get('seq')} ({record.get('event')!r}) matches no trace event model: "
                  f"{format_validation_error(exc)}")
            continue
        print(render_event(event, args.responses))
    return EXIT_INPUT if unreadable or readout.problems else 0  # a damaged trace is shown, and said so


def render_event(e: AnyEvent, responses: bool = False) -> str:
    """One trace event as a line (an LLM call with ``responses`` also gets its raw response, indented)."""
    line = _RENDERERS.get(type(e), _render_other)(e)
    if responses and isinstance(e, LLMCall):
        line += "\n      " + (e.response or "")[:2000].replace("\n", "\n      ")
    return line


def _fields(e: AnyEvent, *leave_out: str) -> dict:
    """The event's fields as written in its trace line (the hash-chain fields and ``leave_out`` left out)."""
    return {k: v for k, v in {"event": e.event, **e.model_dump(mode="json", exclude_unset=True)}.items()
            if k not in ("seq", "prev", "t", *leave_out)}


def _render_other(e: AnyEvent) -> str:
    return f"   {e.event} " + json.dumps(_fields(e), sort_keys=True)[:300]


def _run_start(e: RunStart) -> str:
    c = e.config
    agents = ", ".join(f"{a.get('id') or a['role']}({a['tier']})" for a in c["agents"])
    return (f"== run {e.run_id} attempt {e.attempt}{' (resumed)' if e.resumed else ''}: config {c['name']} "
            f"[{agents}] rounds={c['rounds']} aggregation={c['aggregation']} scenario {e.scenario['id']} "
            f"replicate {e.sample_index}")


def _memo(e: MemoShown) -> str:
    return f"   memo {e.sha256[:12]} as of {e.as_of}, {e.n_items} evidence items"


def _llm_call(e: LLMCall) -> str:
    tag = "cache" if e.cached else f"{e.latency_s:.2f}s"
    retries = [a for a in e.attempts if a["kind"] != "ok"]
    return (f"   call r{e.round} {e.agent:<12} {e.label:<16} {e.model_used}{'' if e.is_llm else ' (non-LLM)'} "
            f"[{tag}, {e.prompt_tokens}+{e.completion_tokens} tok" + (f", {len(retries)} retries" if retries else "") + "]")


def _llm_failure(e: LLMFailure) -> str:
    return f"   FAILED r{e.round} {e.agent} {e.label}: {e.reason}"


def _turn(e: Turn) -> str:
    held = ", ".join(f"{t} {x:.2f}" for t, x in sorted((e.weights or {}).items(), key=lambda kv: -kv[1]) if x > 0)
    extra = ""
    if e.phase == "critique":
        extra = "; ".join(f"→{c['target_agent']}:{c['target_claim']} ({c['objection_confidence']:.2f})" for c in e.output["critiques"])
    elif e.phase == "revise":
        if "critique_responses" in e.output:
            extra = ", ".join(f"{r['from_agent']}:{r['target_claim']} {r['disposition']}" for r in e.output["critique_responses"])
        else:  # a basic-tier revision answers its critics in free text
            extra = f"notes: {e.output['revision_notes']}"
    notes = f" | policy: {'; '.join(e.policy_notes)}" if e.policy_notes else ""
    return f"   {e.phase:<8} r{e.round} {e.agent:<12} {held} {extra}{notes}".rstrip()


def _crit(e: Crit) -> str:
    s, p = e.score, e.score.scores
    clips = f" clipped: {'; '.join(s.clips)}" if s.clips else ""
    return (f"   CRIT     r{e.round} {e.agent:<12} rho {s.rho:.3f} (P1 {p.logical_validity:.2f} P2 {p.evidential_support:.2f} "
            f"P3 {p.alternative_consideration:.2f} P4 {p.causal_alignment:.2f}) by {s.scorer}{clips}")


def _divergence(e: Divergence) -> str:
    spread = "n/a" if e.cash_spread is None else f"{e.cash_spread:.3f}"
    return f"   JSD      {e.phase} r{e.round}: {e.jsd:.4f} (cash spread {spread})"


def _controller(e: ControllerStep) -> str:
    s = e.step
    return (f"   PID      r{e.round}: rho_bar {s['rho_bar']:.3f} JS {s['js']:.3f} e {s['error']:+.3f} u {s['u']:+.3f} "
            f"beta {s['beta_before']:.2f}→{s['beta_after']:.2f} quadrant {s['quadrant']}" + (" EARLY STOP" if s["early_stop"] else ""))


def _intervention(e: Intervention | InterventionCheck) -> str:
    return f"   {e.event.upper():<8} " + json.dumps(_fields(e, "event"), sort_keys=True)


def _blind_map(e: BlindMap) -> str:
    pairs = ", ".join(f"{p}={t}" for t, p in sorted(e.mapping.items(), key=lambda kv: kv[1]))
    opts = " ".join(f"{k}={v}" for k, v in e.options.items() if k != "enabled")
    return f"   BLIND    {pairs} ({opts}; turns below are in pseudonyms, FINAL in real tickers)"


def _final(e: Final) -> str:
    held = ", ".join(f"{t} {x:.3f}" for t, x in sorted(e.weights.items(), key=lambda kv: -kv[1]) if x > 0)
    return f"   FINAL    ({e.method}) {held}" + (f", cash {e.cash:.3f}" if e.cash else "")


def _backtest(e: Backtest) -> str:
    m = e.metrics
    return f"   BACKTEST return {m['total_return_pct']:.2f}% excess {m['excess_return_pct']:.2f}% Sharpe {_f(m['sharpe'])}"


def _run_end(e: RunEnd) -> str:
    return f"== end: {e.status}" + (f" ({e.error})" if e.error else "")


#: How `trace show` renders each event model; any other (RCA, EarlyStop, Conviction, Reflection) is its JSON fields.
_RENDERERS: dict[type[Event], Callable[[Any], str]] = {
    RunStart: _run_start, MemoShown: _memo, LLMCall: _llm_call, LLMFailure: _llm_failure, Turn: _turn, Crit: _crit,
    Divergence: _divergence, ControllerStep: _controller, Intervention: _intervention, InterventionCheck: _intervention,
    Final: _final, Backtest: _backtest, RunEnd: _run_end, BlindMap: _blind_map,
}
