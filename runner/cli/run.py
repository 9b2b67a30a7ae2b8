"""`madbench run`: a batch on Ray, resumable (or its estimate, --dry-run)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from madbench.data.errors import InputError
from madbench.results import read_manifest
from madbench.runner.api import BatchEstimate, BatchRun, estimate_with, run_with
from madbench.runner.batch import MAX_RUNS, MAX_RUNS_CEILING
from madbench.runner.batch_status import attempt_counts, failure_summary
from madbench.runner.budget import spend_text
from madbench.runner.cli.commands import command_parser
from madbench.runner.cli.common import add_pack_args, add_routing_args, number
from madbench.runner.estimate import format_table
from madbench.runner.options import RunOptions
from madbench.runner.sweep import plan_lines


def register(sub) -> None:
    p = command_parser(sub, "run")
    p.add_argument("batch", help="batch YAML, e.g. configs/batches/rules-35.yaml")
    p.add_argument("--address", help="join a Ray cluster (else $RAY_ADDRESS, else a local Ray)")
    p.add_argument("--results", "--results-dir", dest="results_dir", help="parent of the batch's results directory (default: the batch's results_dir)")
    p.add_argument("--cache-dir", help="LLM response cache (else $MADBENCH_CACHE_DIR, else the batch's, else $MADBENCH_HOME/llm; "
                                       "through the Ray client, required: the head's cache directory)")
    p.add_argument("--scenarios", metavar="FILE", help="read the scenarios from FILE instead of the batch's scenarios "
                   "(its `ids`, if any, still select), e.g. a path on the head in a Ray job")
    p.add_argument("--dry-run", action="store_true", help="print runs, expected calls, tokens and cost; run nothing")
    p.add_argument("--calibrate-from", metavar="RESULTS", help="with --dry-run: a pilot batch's results directory, whose tokens, latencies and intervention rates replace the declared ones")
    p.add_argument("--json", action="store_true", help="with --dry-run: print the estimate as JSON")
    p.add_argument("--retry-failed", action="store_true", help="also re-run runs recorded as failed")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--require-clean", action="store_true", help="refuse to run from a git checkout with uncommitted "
                   "changes (without it they are warned about, and the manifest records the commit as dirty)")
    p.add_argument("--continue", dest="continue_past", action="store_true",
                   help="a sequential batch: run on past its recorded decision (the runs it made not_needed); recorded")
    p.add_argument("--model", help="every role and phase on this model, overriding the batch's `model` and each config's "
                                   "routing (e.g. rules/auto: any batch offline); results go to <batch>@<model>")
    add_routing_args(p, "every config on the routing profile configs/routing/NAME.yaml, its own routing replaced (e.g. "
                        "rules, paper-openai); results go to <batch>@<NAME>",
                     "in every config with that tier, over the batch's `routing.tiers` (run ids do not change)")
    p.add_argument("--provider-batch", action="store_true", help="answer LLM calls through the provider's batch API "
                   "(about half the price, results within hours): one provider batch per debate phase; the same as "
                   "`execution: batch` in the batch file")
    p.add_argument("--max-runs", type=number(int), metavar="N", help=f"allow a batch of up to N runs (default {MAX_RUNS:,}: a "
                   f"larger expansion is refused before anything is built; at most {MAX_RUNS_CEILING:,})")
    add_pack_args(p)
    p.set_defaults(func=cmd_run)


def budget_lines(b: dict, batch: str, unpriced: int = 0) -> tuple[str | None, str | None]:
    """(the batch's spend against its cap, over every invocation; what to do when the cap stopped it) from
    ``BatchRun.spend``; ``unpriced``: calls of models without a price, which make the spend unknown."""
    cap = "" if b["cap_usd"] is None else f" of ${b['cap_usd']:g}"
    this = "" if unpriced else f" (${b['spent_usd'] - b['spent_before_usd']:.4f} in this one)"
    spent = None if not (cap or b["spent_usd"] or unpriced) else (
        f"budget: {spend_text(b['spent_usd'], unpriced)}{cap} spent on this batch over every invocation{this}")
    reached = None if not b["reached"] else (
        f"{b['reached']}: raise max_cost_usd in {batch} to continue from the ${b['spent_usd']:.4f} spent "
        "(committed runs are kept; the others resume with their paid calls served from the cache)")
    return spent, reached


def submissions_text(submitted: int, retries: int) -> str:
    """This invocation's submissions (a run retried after a failure is one run submitted and one retry; one requeued
    after its actor was lost is neither)."""
    return f"{submitted} submitted" + (f", {retries} retr{'y' if retries == 1 else 'ies'}" if retries else "")


def submissions(root: Path) -> str:
    """``submissions_text`` from the attempts a results directory's manifest counts."""
    return submissions_text(*attempt_counts(read_manifest(root).runs))


def cmd_run(args) -> int:
    options = RunOptions.from_args(args)
    if args.dry_run:
        return print_estimate(estimate_with(options), args.json)
    for flag, given in (("--calibrate-from", args.calibrate_from), ("--json", args.json)):
        if given:  # an estimate's option on a real run would be ignored while the batch ran
            raise InputError(flag, "is an option of the estimate", "add --dry-run, or leave it out")
    return print_run(run_with(options))


def print_run(r: BatchRun) -> int:
    """What `madbench run` prints of a batch's outcome (the failures, their reasons and the retry command on stderr);
    its exit status."""
    print(f"batch {r.batch}: {r.runs} runs ({r.skipped} already done, {submissions_text(r.submitted, r.retries)}) in "
          f"{r.wall_s:.1f} s; {r.ok} ok, {r.failed} failed, {r.pending} pending"
          f"{f', {r.not_needed} not_needed' if r.not_needed else ''}; "
          f"state {r.state}; table rows: {', '.join(f'{k} {v}' for k, v in r.tables.model_dump().items())}; "
          f"results in {r.results_dir.resolve()}")  # not configs/batches/../../results/…
    if r.provider_batches is not None:
        pb = r.provider_batches
        print(f"provider batches: {pb.provider_batches} created for {pb.requests} requests "
              f"({pb.answered} answered, {pb.errored} answered with an error and asked again, {pb.resubmitted} "
              f"resubmitted from an expired or failed batch), journaled in {pb.journal}")
    if r.sequential is not None:
        print("sequential: " + "\n  ".join(r.sequential.lines))
    if r.sweep is not None:
        print("\n  ".join(r.sweep["lines"]))
    spent, reached = budget_lines(r.spend.model_dump(), r.batch_file, r.spend.unpriced_calls)
    if spent:
        print(spent)
    if reached:
        print(reached, file=sys.stderr)
    if r.failed:
        print(f"{r.failed} run(s) failed:", file=sys.stderr)
        retryable = [g for g in r.failures if not g.repeats_on_retry]
        if retryable:
            print("\n".join(failure_summary(retryable)), file=sys.stderr)
            print(f"retry them with:\n  {r.retry_command}", file=sys.stderr)
        repeating = [g for g in r.failures if g.repeats_on_retry]
        if repeating:
            print("\n".join(failure_summary(repeating)), file=sys.stderr)
            print(repeat_advice(sum(len(g.run_ids) for g in repeating), r.batch_file), file=sys.stderr)
    return r.exit_status


def repeat_advice(runs: int, batch_file: str) -> str:
    """What to say of runs that failed after every call was answered (``batch_status.repeats_on_retry``): the
    response cache holds those answers, so a retry replays them. Whatever failed (the answers, or a check made on them
    after they validated), nothing here knows more than that."""
    return (f"{'these' if runs > 1 else 'this'} {runs} run(s) failed after every call was answered (no call failed): "
            "a retry asks the same requests, replays the same answers from the response cache and fails the same way, "
            f"so --retry-failed would fail {'them' if runs > 1 else 'it'} again. For fresh answers run another sample "
            f"(raise `replicates` in {batch_file}: a new replicate asks anew) or use another --cache-dir; where the "
            "reason is not in the answers, fix what it names; or keep the failure as the run's result")


def print_estimate(e: BatchEstimate, as_json: bool) -> int:
    """The dry run: the estimate of the runs left, as a table (or JSON); what is already committed, and what a run
    would refuse (a missing key, an unknown model), on stderr."""
    for line in e.warnings:
        print(f"madbench: warning: {line} (a run would refuse to start)", file=sys.stderr)
    if e.committed:
        print(f"{e.committed} of {e.runs} runs are already committed in {e.results_dir}: estimating the "
              f"{e.runs - e.committed} left", file=sys.stderr)
    if e.estimate is None:
        print(json.dumps({"batch": e.batch, "runs": 0}) if as_json else
              f"batch {e.batch}: every run is committed in {e.results_dir}; nothing left to run")
        return 0
    d = e.estimate.model_dump()
    print(json.dumps(d, indent=1) if as_json else format_table(d))
    if e.estimate.sequential is not None and not as_json:
        print("\n".join(sequential_lines(e.estimate.sequential.model_dump())))
    if e.estimate.sweep is not None and not as_json:
        print("\n".join(plan_lines(e.estimate.sweep)))
    if e.estimate.budget_note:
        print(e.estimate.budget_note, file=sys.stderr)
    return 0


def sequential_lines(s: dict) -> list[str]:
    """The dry run's plan of a sequential batch: its looks, and scenarios, cost and time at most and expected."""
    def cost(x):
        return "unknown" if x is None else f"${x:.2f}"
    out = [f"sequential: looks at {s['looks']} complete pairs, each a quarter-clustered t (df "
           f"{', '.join(f'{x:.1f}' for x in s['df'])}); power {s['power']:.3f} at the planned effect d_z = "
           f"{s['effect']:g} (planned: {s['planned_power']:g}); the efficacy bounds alone reach power "
           f"{s['planned_power']:g} at d_z = {s['detectable_effect']:.3f} (a futility stop spends the power beyond the plan)"]
    out += [f"  at most {s['max_scenarios']} scenarios, {cost(s['fixed_cost_usd'])} (the fixed design)"]
    for label, name in (("h0", "no effect (H0)"), ("h1", "the planned effect (H1)")):
        r = s[label]
        out.append(f"  under {name}: {r['expected_scenarios']:.1f} scenarios expected, {cost(r['expected_cost_usd'])}, "
                   f"about {r['expected_wall_s'] / 60:.1f} min; rejects towards the effect {r['reject']:.1%}")
    out += [f"  note: {n}" for n in s["notes"]]
    return out
