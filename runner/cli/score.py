"""`madbench rescore`: grade stored traces again with another scorer or rubric, as a resumable job on Ray."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from madbench.data.errors import InputError
from madbench.data.markdown import markdown_table
from madbench.data.names import check_name
from madbench.gateway import ModelSpec, resolve_cache_dir
from madbench.gateway.providers.base import SendOnly
from madbench.results import BatchDirs, ScoreDirs, check_results_dir, read_manifest, read_scores
from madbench.results.layout import AGREEMENT, AUDIT_AGREEMENT, FAILED, ORIGINAL
from madbench.runner.batch import MAX_IN_FLIGHT, MAX_WORKERS
from madbench.runner.cli.commands import command_parser
from madbench.runner.cli.common import add_model_deployment, called_spec, model_deployments, number
from madbench.runner.preflight import require_endpoint, spec_problems
from madbench.runner.ray_address import check_address, split_address
from madbench.runner.rescore_job import Job, Outcome, Plan, dry_run, failure_reasons, plan, run_rescore
from madbench.scoring.rescore import agreement_tables
from madbench.scoring.rubric import load_rubric

EXIT_FAILED_RUNS = 1


def register(sub) -> None:
    p = command_parser(sub, "rescore")
    p.add_argument("results_dir", help="a batch results directory (traces/, runs/) or a `madbench debate --out` directory")
    p.add_argument("--scorer", required=True, help="model for CRIT: rules (non-LLM), local/gemma3-270m, openai/gpt-4o-mini, …")
    p.add_argument("--rubric", default="uniform", help="rubric name in configs/rubrics/ or a file (default uniform)")
    p.add_argument("--label", help="name of the new scores table under scores/ (default: scorer and rubric)")
    add_model_deployment(p, "the scorer", ("--api-base", "--api-key-env", "--rpm", "--tpm", "--max-concurrency"))
    p.add_argument("--send-context", action="store_true",
                   help="send each CRIT task beside the prompt: only for madbench's simulated provider (`madbench sim serve`)")
    p.add_argument("--cache-dir", help="LLM response cache (else $MADBENCH_CACHE_DIR, else the batch's, else $MADBENCH_HOME/llm: ~/.cache/madbench/llm)")
    p.add_argument("--address", help="join a Ray cluster (else $RAY_ADDRESS, else a local Ray)")
    p.add_argument("--workers", type=number(int, ge=1, le=MAX_WORKERS), default=2, help="runner actors (default 2)")
    p.add_argument("--max-in-flight", type=number(int, ge=1, le=MAX_IN_FLIGHT), default=8, help="runs being graded at once (default 8)")
    p.add_argument("--concurrency", type=number(int, ge=1, le=10_000), default=8, help="turns graded at once per actor (the limiter still applies; default 8)")
    p.add_argument("--dry-run", action="store_true", help="print runs, CRIT tasks, expected and cached calls and cost; call nothing")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(func=cmd_rescore)


def _scorer_spec(args) -> tuple[ModelSpec, str]:
    """The scorer's spec, and the option that gave its api_base."""
    scorer = "rules/crit" if args.scorer in ("rules", "rules/auto") else args.scorer
    if "/" not in scorer and not args.routing:  # with --routing, a tier's name
        raise InputError("--scorer", f"{args.scorer!r} is not a model", "write rules, local/gemma3-270m or a litellm model string")
    scorer_model = model_deployments(args, [scorer], "--scorer")[0]
    spec = called_spec(scorer_model, send_context=args.send_context)
    problems = spec_problems(spec)  # an unknown provider, a missing key: refused as `madbench run`'s preflight does
    for p in problems if args.dry_run else []:
        if isinstance(p, SendOnly):  # a dry run calls nothing: a missing key is said, and the estimate made
            print(f"madbench: warning: {p}", file=sys.stderr)
    problems = [p for p in problems if not (args.dry_run and isinstance(p, SendOnly))]
    if problems:
        raise InputError("--scorer", "; ".join(problems), "give a scorer that can be called")
    return spec, scorer_model.api_base_from


def _batch_cache_dir(root: Path) -> str | None:
    """The batch's own cache_dir when its manifest names an absolute one (a relative one was relative to the batch file)."""
    if not BatchDirs(root).manifest.is_file():
        return None  # a `madbench debate --out` directory: no batch, no batch cache
    value = read_manifest(root).spec.get("cache_dir")  # a damaged manifest is an error, not a silent default
    return value if value and Path(value).expanduser().is_absolute() else None


def make_job(args) -> tuple[Job, str]:
    """The re-scoring job, and the option that gave the scorer's api_base."""
    spec, api_base_from = _scorer_spec(args)
    rubric = load_rubric(args.rubric)
    if args.label is not None and not args.label.strip():
        raise InputError("--label", "is empty", "give a label, or leave --label out for <scorer>.<rubric>")
    # the name of its folder under scores/: the one rule of names that become paths
    label = check_name(args.label or re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{spec.model}.{rubric.name}"), "--label", "label")
    if label in (ORIGINAL, FAILED):
        raise InputError("--label", f"{label!r} is reserved (scores/{label} is the layout's own)", "choose another label")
    for name, value in (("--workers", args.workers), ("--max-in-flight", args.max_in_flight), ("--concurrency", args.concurrency)):
        if value < 1:
            raise InputError(name, f"{value} is not a positive count", "give 1 or more")
    root = Path(args.results_dir)
    check_results_dir(root)
    return Job(root, label, spec, rubric, resolve_cache_dir(args.cache_dir, _batch_cache_dir(root))), api_base_from


def cmd_rescore(args) -> int:
    if args.address:
        split_address(args.address)
    job, api_base_from = make_job(args)
    p = plan(job)
    if args.dry_run:
        print(json.dumps(dry_run(job, p), indent=1))
        return 0
    check_address(args.address)
    require_endpoint(job.spec.api_base, {job.spec.model}, api_base_from)  # after every other check: it sends a request
    outcome = run_rescore(job, p, args.address, args.workers, args.max_in_flight, args.concurrency, args.quiet)
    print_summary(job, p, outcome)
    print_agreement(job)
    if outcome.interrupted:
        return 130
    return EXIT_FAILED_RUNS if outcome.failed else 0


def print_summary(job: Job, p: Plan, o: Outcome) -> None:
    t = o.totals
    print(f"rescore {job.root} -> label {job.label} ({job.spec.model}, rubric {job.rubric.name})")
    print(f"runs: {len(p.runs)} finished ok ({len(p.skipped)} other traces skipped); scored {len(o.scored)} "
          f"({o.turns} turns), already scored {len(p.already)}, failed {len(o.failed)}"
          + (f", without CRIT turns {p.no_turns}" if p.no_turns else "")
          + (f", not reached {len(p.todo) - len(o.scored) - len(o.failed)} (interrupted)" if o.interrupted else ""))
    cost = f"${t['cost_usd']:.4f}" + (f" (+{int(t['calls_with_unknown_cost'])} calls of unknown cost)"
                                      if t["calls_with_unknown_cost"] else "")
    if job.scorer_is_llm:
        print(f"scorer calls: {int(t['calls'])} ({int(t['cached'])} from cache, {int(t['http_attempts'])} provider attempts, "
              f"{int(t['failed'])} failed); cost {cost}; cache {job.cache_dir}")
    else:
        print(f"scorer calls: {int(t['calls'])} answered by the rule-based scorer (non-LLM: no provider, no cache, no cost)")
    print(f"table {ScoreDirs(job.scores_dir).table(job.label)}")
    if o.failed:
        print(f"\nfailed runs: {len(o.failed)} (records in {ScoreDirs(job.scores_dir).failed_log(job.label)}, one a line; "
              "run the same command again to retry them)")
        for reason, runs in failure_reasons(o):
            shown = ", ".join(runs[:5]) + (f" and {len(runs) - 5} more" if len(runs) > 5 else "")
            print(f"  {len(runs)} x {reason}\n      runs: {shown}")


def print_agreement(job: Job) -> None:
    pillars, audit = agreement_tables(job.scores_dir)
    new = read_scores(job.scores_dir, job.label)
    if new.empty:
        return
    tag = lambda frame: "non-LLM" if not frame.is_llm.any() else "LLM"  # noqa: E731
    for other in [lbl for lbl in dict.fromkeys([*pillars.label_a, *pillars.label_b]) if lbl != job.label]:
        pair = pillars[((pillars.label_a == other) & (pillars.label_b == job.label))
                       | ((pillars.label_a == job.label) & (pillars.label_b == other))]
        if pair.empty:
            continue
        a = read_scores(job.scores_dir, other)
        print(f"\nagreement per pillar: {other} ({a.scorer.iloc[0]}, {tag(a)}) vs {job.label} ({new.scorer.iloc[0]}, {tag(new)})")
        print(markdown_table(pair.drop(columns=["label_a", "label_b"]).rename(columns={"note": "why n/a"})))
    print(f"\nscorer counts vs deterministic audit ({job.label}):")
    print(markdown_table(audit[audit.label == job.label].drop(columns=["label", "note"])))
    print(f"\nagreement tables: {job.scores_dir / AGREEMENT}, {job.scores_dir / AUDIT_AGREEMENT}")
