"""`madbench probe recall`: how far a model's memory of past quarters beats chance (no memo, no debate)."""

from __future__ import annotations

import asyncio
import json
import sys

import pandas as pd

from madbench.data.errors import InputError
from madbench.data.markdown import markdown_table
from madbench.data.market.pack import load_pack, resolve_pack_dir
from madbench.data.scenario import load_scenarios
from madbench.eval.stats.frame import json_safe
from madbench.gateway import ModelSpec, ResponseCache, resolve_cache_dir
from madbench.runner.cli.commands import command_parser
from madbench.runner.cli.common import (
    CACHE_DIR_HELP,
    add_model_deployment,
    called_spec,
    check_out,
    endpoints,
    model_deployments,
    number,
)
from madbench.runner.cutoffs import CUTOFFS_FILE, load_cutoffs
from madbench.runner.exit_codes import EXIT_RUNS_FAILED
from madbench.runner.preflight import require_endpoint, spec_problems
from madbench.runner.recall_probe import PROBE_FILE, ProbeFailed, check_model, load_recall_prompt, probe_recall, write_recall
from madbench.runner.wiring import build_gateway

SHOWN = ["model", "quarter", "cutoff", "post_cutoff", "n", "hits", "hit_rate", "chance_rate", "excess", "kappa", "p_value"]


def register(sub) -> None:
    p = command_parser(sub, "probe")
    probe = p.add_subparsers(dest="probe_cmd", required=True, metavar="PROBE", help="what to probe")
    p = probe.add_parser("recall", help="ask a model, without a memo, which return bucket each ticker of each scenario "
                                        "fell in during its quarter, and test its hit rate against chance",
                         description="Ask each model, with no memo, which of five return buckets each ticker of each "
                                     "scenario fell in over the scenario's holding quarter, score the answers against the "
                                     "realised returns in the pack, and report per model and quarter the hit rate, the "
                                     "chance rate (from the bucket frequencies), kappa and a one-sided binomial test.")
    p.add_argument("--model", action="append", required=True, metavar="M",
                   help="a model string, e.g. openai/gpt-4o-mini or local/gemma3-270m (repeatable; rules/… is refused: it "
                        "remembers nothing by construction)")
    p.add_argument("--scenarios", required=True, metavar="F", help="scenario YAML file (e.g. configs/scenarios/market-35.yaml)")
    p.add_argument("--out", default="results/probe-recall",
                   help="folder for recall.parquet and recall_summary.parquet (default results/probe-recall)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON records instead of a table")
    add_model_deployment(p, "every --model")
    p.add_argument("--send-context", action="store_true",
                   help="send each request's structured task beside the prompt: only for madbench's simulated provider "
                        "(`madbench sim serve`), never for a real one")
    p.add_argument("--prompt", default=str(PROBE_FILE), help="the probe's prompt YAML (default configs/probes/recall.yaml)")
    p.add_argument("--cutoffs", default=str(CUTOFFS_FILE), help="model-cutoff registry (default configs/model_cutoffs.yaml)")
    p.add_argument("--temperature", type=number(ge=0, le=2), default=0.0, help="sampling temperature (default 0)")
    p.add_argument("--max-tokens", type=number(int, ge=1, le=1_000_000), default=None, help="most tokens in one answer (default: the provider's)")
    p.add_argument("--timeout", type=number(gt=0, le=3600), default=120.0, help="seconds per attempt (default 120)")
    p.add_argument("--pack", help="data pack with the realised prices (else $MADBENCH_PACK, else ../shared/data/market)")
    p.add_argument("--cache-dir", help=CACHE_DIR_HELP)
    p.add_argument("--no-cache", action="store_true", help="neither read nor write the response cache")
    p.set_defaults(func=cmd_probe_recall)


def _specs(args) -> tuple[list[ModelSpec], dict[str, tuple[str, set[str]]]]:
    """One spec per --model (given twice, once), each refused here when no call to it could succeed, as `madbench
    run`'s preflight refuses it."""
    for model in args.model if not args.routing else []:  # with --routing, tiers' names: their models checked below
        check_model(model)
    models = model_deployments(args, list(dict.fromkeys(args.model)))
    specs = [called_spec(m, send_context=args.send_context, retry=m.spec.retry.model_dump() | {"timeout_s": args.timeout})
             for m in models]
    for spec in specs:
        check_model(spec.model)
    for spec in specs:
        problems = spec_problems(spec)
        if problems:
            raise InputError("--model", "; ".join(problems), "give a model that can be called")
    return specs, endpoints(models, specs)


def shown(summary: pd.DataFrame) -> pd.DataFrame:
    """The summary as printed: p-values in scientific notation (a 3-decimal 0.000 would hide their size)."""
    out = summary[SHOWN].copy()
    out["p_value"] = [("n/a" if pd.isna(p) else f"{p:.2g}") for p in out["p_value"]]
    out["cutoff"] = out["cutoff"].fillna("not listed")
    out["post_cutoff"] = ["null" if v is None else str(v) for v in out["post_cutoff"]]
    return out


def cmd_probe_recall(args) -> int:
    out = check_out(args.out, "--out")
    specs, reached = _specs(args)
    prompt = load_recall_prompt(args.prompt)
    registry = load_cutoffs(args.cutoffs)
    scenarios = load_scenarios(args.scenarios)
    pack = load_pack(resolve_pack_dir(args.pack))  # prices only: the probe shows no memo, so no evidence
    for api_base, (flag, models) in reached.items():  # after the inputs are read: it sends a request
        require_endpoint(api_base, models, flag)
    cache = None if args.no_cache else ResponseCache(resolve_cache_dir(args.cache_dir))
    gateway = build_gateway(cache=cache)
    try:
        observations, summary = asyncio.run(probe_recall(gateway, specs, scenarios, pack, prompt, registry,
                                                         args.temperature, args.max_tokens, where=args.scenarios))
    except ProbeFailed as exc:
        print(f"madbench: probe failed: {exc}\n  Answers that came are cached: the same command resumes.", file=sys.stderr)
        return EXIT_RUNS_FAILED
    finally:
        if cache:
            cache.close()
    files = write_recall(out, observations, summary)
    if args.json:
        print(json.dumps(json_safe(summary.to_dict(orient="records")), indent=1, default=str))
        return 0
    print(markdown_table(shown(summary)))
    t = gateway.totals
    print(f"\n{len(observations)} answers (distinct quarter x ticker) | calls {t.calls} ({t.cached} cached) | tokens "
          f"{t.prompt_tokens}+{t.completion_tokens} | cost ${t.cost_usd:.4f}"
          + (f" (+{t.calls_with_unknown_cost} calls of unknown cost)" if t.calls_with_unknown_cost else ""))
    print("chance_rate: the hit rate of answers independent of the outcomes (sum over buckets of answer share x realised "
          "share); excess = hit_rate - chance_rate; p_value: one-sided binomial test of the hits against chance_rate")
    print(f"tables: {', '.join(str(f) for f in files)}")
    return 0
