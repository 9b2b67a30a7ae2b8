"""`madbench run` (a batch on Ray, resumable) and `madbench status`."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

from madbench.data.errors import InputError
from madbench.data.market.pack import load_pack, resolve_evidence_dirs, resolve_pack_dir
from madbench.data.memo import build_memo
from madbench.data.parquet import read_parquet
from madbench.gateway import resolve_cache_dir
from madbench.runner.batch import (
    MAX_RUNS,
    MAX_RUNS_CEILING,
    _rel,
    check_max_runs,
    check_size,
    expand,
    load_batch,
    resolve_configs,
    resolve_scenarios,
)
from madbench.runner.budget import read_budget, spend_text
from madbench.runner.cli.commands import EXIT_INTERRUPTED, EXIT_RUNS_FAILED, command_parser
from madbench.runner.cli.common import add_pack_args
from madbench.runner.estimate import EXPECTED_RATES, MemoInfo, calibrate, estimate_batch, estimate_run, format_table
from madbench.runner.execute import HEAD_DIRS, ray_client, run_batch
from madbench.runner.lock import lock_holder
from madbench.runner.preflight import preflight, preflight_error, reachable_models
from madbench.runner.provider_batches import batch_problems
from madbench.runner.store import BatchLayout, current_step, group_failures, read_manifest


def register(sub) -> None:
    p = command_parser(sub, "run")
    p.add_argument("batch", help="batch YAML, e.g. configs/batches/rules-35.yaml")
    p.add_argument("--address", help="join a Ray cluster (else $RAY_ADDRESS, else a local Ray)")
    p.add_argument("--results", "--results-dir", dest="results_dir", help="parent of the batch's results directory (default: the batch's results_dir)")
    p.add_argument("--cache-dir", help="LLM response cache (else $MADBENCH_CACHE_DIR, else the batch's, else ~/.cache/madbench/llm; "
                                       "through the Ray client, required: the head's cache directory)")
    p.add_argument("--scenarios", metavar="FILE", help="read the scenarios from FILE instead of the batch's scenarios "
                   "(its `ids`, if any, still select), e.g. a path on the head in a Ray job")
    p.add_argument("--dry-run", action="store_true", help="print runs, expected calls, tokens and cost; run nothing")
    p.add_argument("--calibrate-from", metavar="RESULTS", help="with --dry-run: a pilot batch's results directory, whose tokens, latencies and intervention rates replace the declared ones")
    p.add_argument("--json", action="store_true", help="with --dry-run: print the estimate as JSON")
    p.add_argument("--retry-failed", action="store_true", help="also re-run runs recorded as failed")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--model", help="every role and phase on this model, overriding the batch's `model` and each config's "
                                   "routing (e.g. rules/auto: any batch offline); results go to <batch>@<model>")
    p.add_argument("--provider-batch", action="store_true", help="answer LLM calls through the provider's batch API "
                   "(about half the price, results within hours): one provider batch per debate phase; the same as "
                   "`execution: batch` in the batch file")
    p.add_argument("--max-runs", type=int, metavar="N", help=f"allow a batch of up to N runs (default {MAX_RUNS:,}: a "
                   f"larger expansion is refused before anything is built; at most {MAX_RUNS_CEILING:,})")
    add_pack_args(p)
    p.set_defaults(func=cmd_run)

    p = command_parser(sub, "status")
    p.add_argument("results_dir", help="a batch results directory, e.g. results/rules-35")
    p.add_argument("--json", action="store_true", help="print the counts as one JSON object")
    p.set_defaults(func=cmd_status)


def prepare(args):
    """Load a batch and everything it names: (spec, runs, results root, pack, pack dir, evidence dirs, cache dir)."""
    spec, base = load_batch(args.batch)
    name = spec.name
    if getattr(args, "model", None):  # --model: one model everywhere; its results apart from the batch's own
        if "/" not in args.model:
            raise InputError("--model", f"{args.model!r} is not a model string", "write e.g. rules/auto or openai/gpt-4o-mini")
        spec = spec.model_copy(update={"model": args.model})
        name = spec.name + "@" + "".join(c if c.isalnum() or c in "_.-" else "-" for c in args.model)
    if getattr(args, "provider_batch", False) and spec.provider_batches is None:
        spec = spec.model_copy(update={"execution": "batch"})
    max_runs = getattr(args, "max_runs", None)
    check_max_runs(max_runs)
    check_size(spec, args.batch, max_runs)  # from the spec's counts, before anything is built
    check_client_cache(getattr(args, "address", None), args.cache_dir)
    if getattr(args, "scenarios", None):  # the user's path, from the working directory, like --pack
        if not Path(args.scenarios).is_file():
            raise InputError("--scenarios", f"{args.scenarios} not found", "give a scenario YAML file (a relative path is "
                             "read from the current directory)")
        source = spec.scenarios.model_copy(update={"file": str(Path(args.scenarios).resolve()), "make": None})
        spec = spec.model_copy(update={"scenarios": source})
    pack_dir = resolve_pack_dir(args.pack or (str(_rel(base, spec.pack)) if spec.pack else None))
    evidence = resolve_evidence_dirs(args.evidence or [str(_rel(base, e)) for e in spec.evidence] or None)
    pack = load_pack(pack_dir, evidence)
    scenarios = resolve_scenarios(spec, base, pack, args.batch)  # checked against the pack by the preflight
    check_size(spec, args.batch, max_runs, len(scenarios))
    configs = resolve_configs(spec, base, args.batch)
    runs = expand(spec, scenarios, configs, args.batch, max_runs)
    cache_dir = resolve_cache_dir(args.cache_dir, _rel(base, spec.cache_dir) if spec.cache_dir else None)
    # --results-dir is the user's path (from the working directory); the batch's own is relative to its file
    root = (Path(args.results_dir) if args.results_dir else _rel(base, spec.results_dir)) / name
    return spec, runs, root, pack, pack_dir, evidence, cache_dir


def check_client_cache(address: str | None, cache_cli: str | None) -> None:
    """Through the Ray client this process is off the cluster, and the cache actor opens the cache directory on the
    head (runner/cache_actor.py): a path resolved here by default (~/.cache/madbench/llm, or the batch's, relative
    to its file) or a relative one is a path nobody chose on the head. So it must be named, absolute."""
    if not ray_client(address):
        return
    given = cache_cli or os.environ.get("MADBENCH_CACHE_DIR")
    if given and Path(given).is_absolute():
        return
    problem = f"{given!r} is relative" if given else "no cache directory given"
    raise InputError("--cache-dir", f"{problem}: through the Ray client ({address or os.environ.get('RAY_ADDRESS')}) the "
                     "cache is opened on the head node, where a path resolved on this machine means nothing",
                     f"pass the head's cache directory, absolute: --cache-dir {HEAD_DIRS['--cache-dir']} (cluster.yaml's "
                     "MADBENCH_CACHE_DIR), or set MADBENCH_CACHE_DIR to it")


def expected_calls(config, scenario, memo, rates=None) -> float:
    """LLM calls (one ``llm_call`` event each) one run of ``config`` on ``scenario`` makes, from its protocol's
    phase structure with interventions and early stop at ``rates`` (default: the declared expected case);
    ``memo`` is the scenario's ``Memo`` (its desk slices decide how many desks are called). See runner/estimate/."""
    return estimate_run(config, scenario, MemoInfo.from_memo(memo), rates or EXPECTED_RATES).calls


def dry_run(spec, runs, pack, calibrate_from: str | None = None) -> dict:
    """The batch's size and its estimated calls, tokens, cost and time (runner/estimate/), without running
    anything: expected and worst case per config, and the batch's wall time on its max_in_flight and rate limits.
    With ``calibrate_from`` (a pilot batch's results directory), its rates, tokens and latencies replace the
    declared ones."""
    calib = calibrate(calibrate_from) if calibrate_from else None
    memos = {}
    for r in runs:
        if r.scenario.id not in memos:
            memos[r.scenario.id] = MemoInfo.from_memo(build_memo(r.scenario, pack))
    est = estimate_batch(runs, memos, spec.max_in_flight, calib)
    total = est["total"]
    out = {"batch": spec.name, "runs": len(runs), "expected_calls": total["calls"],
           "expected_tokens": total["prompt_tokens"] + total["completion_tokens"],
           "estimated_cost_usd": total["cost_usd"], "worst_cost_usd": total["cost_usd_worst"],
           "models_without_price": est["models_without_price"], "max_in_flight": spec.max_in_flight,
           "workers": spec.workers, "execution": "sync" if spec.provider_batches is None else "batch",
           "estimated_batch_cost_usd": total["cost_batch_usd"], "worst_batch_cost_usd": total["cost_batch_usd_worst"], **est}
    out["calibration"] = None if calib is None else {
        "source": calib.source, "runs": calib.runs, "rate_sources": calib.rate_sources,
        "latency_cv": round(calib.latency_cv, 3), "observed": calib.observed}
    return out


def retry_command(args) -> str:
    """The exact command that re-runs this batch's failed runs (the options this one was given, plus --retry-failed)."""
    words = ["madbench", "run", args.batch]
    for flag, value in (("--results-dir", args.results_dir), ("--cache-dir", args.cache_dir), ("--pack", args.pack),
                        ("--scenarios", getattr(args, "scenarios", None)),
                        ("--model", args.model), ("--address", args.address)):
        if value:
            words += [flag, str(value)]
    if getattr(args, "provider_batch", False):
        words.append("--provider-batch")
    for e in args.evidence or []:
        words += ["--evidence", str(e)]
    return shlex.join(words + ["--retry-failed"])


def failure_summary(runs: list[dict], limit_lines: int = 3) -> list[str]:
    """Failed runs grouped by reason (the first lines of each distinct one), most frequent first."""
    out = []
    for reason, ids in group_failures({r["run_id"]: r.get("error") for r in runs if r["status"] == "failed"}, limit_lines):
        out.append(f"  {len(ids)} run(s), e.g. {ids[0]}:")
        out += [f"    {line}" for line in reason.splitlines()]
    return out


def budget_lines(b: dict, batch: str, unpriced: int = 0) -> tuple[str | None, str | None]:
    """(the batch's spend against its cap, over every invocation; what to do when the cap stopped it) from
    ``run_batch``'s ``stats["budget"]``; ``unpriced``: calls of models without a price, which make the spend unknown."""
    cap = "" if b["cap_usd"] is None else f" of ${b['cap_usd']:g}"
    this = "" if unpriced else f" (${b['spent_usd'] - b['spent_before_usd']:.4f} in this one)"
    spent = None if not (cap or b["spent_usd"] or unpriced) else (
        f"budget: {spend_text(b['spent_usd'], unpriced)}{cap} spent on this batch over every invocation{this}")
    reached = None if not b["reached"] else (
        f"{b['reached']}: raise max_cost_usd in {batch} to continue from the ${b['spent_usd']:.4f} spent "
        "(committed runs are kept; the others resume with their paid calls served from the cache)")
    return spent, reached


def unpriced_calls(root: Path) -> int:
    """Calls of models without a price in the batch's committed runs (runs.parquet): its spend is unknown, not $0."""
    path = root / "runs.parquet"
    runs = read_parquet(path) if path.is_file() else None
    if runs is None or "calls_with_unknown_cost" not in runs.columns:
        return 0  # no run committed yet, or none with a call
    return int(runs["calls_with_unknown_cost"].fillna(0).sum())


def submissions(root: Path) -> str:
    """This invocation's submissions, from the attempts the manifest counts (a run retried after a failure is one run
    submitted and one retry; one requeued after its actor was lost is neither)."""
    attempts = [r.get("attempts", 0) for r in read_manifest(root)["runs"]]
    retries = sum(max(0, a - 1) for a in attempts)
    return f"{sum(1 for a in attempts if a)} submitted" + (f", {retries} retr{'y' if retries == 1 else 'ies'}" if retries else "")


def budget_note(spec, d: dict, root: Path) -> str | None:
    """What the dry run says when its estimate does not fit in what is left of ``max_cost_usd`` (earlier invocations'
    spend, from budget.json, included): the batch would stop at the cap with runs left."""
    if spec.max_cost_usd is None:
        return None
    spent = read_budget(root, spec.max_cost_usd).spent_usd
    left = max(0.0, spec.max_cost_usd - spent)
    before = f" after ${spent:.4f} spent by earlier invocations" if spent else ""
    # In provider batch mode every call is billed at batch prices
    expected, worst = ((d["estimated_batch_cost_usd"], d["worst_batch_cost_usd"]) if d["execution"] == "batch"
                       else (d["estimated_cost_usd"], d["worst_cost_usd"]))
    if expected is not None and expected > left:
        return (f"max_cost_usd: the expected cost ${expected:.4f} exceeds the ${left:.4f} left of the ${spec.max_cost_usd:g} "
                f"cap{before}: the batch would stop at the cap with runs left; raise max_cost_usd or run fewer runs")
    if worst is not None and worst > left:
        return (f"max_cost_usd: the worst case ${worst:.4f} exceeds the ${left:.4f} left of the ${spec.max_cost_usd:g} "
                f"cap{before}: the batch may stop at the cap with runs left")
    return None


def cmd_run(args) -> int:
    spec, runs, root, pack, pack_dir, evidence, cache_dir = prepare(args)
    # Through the Ray client the cache is on the head (check_client_cache): not this machine's to check.
    problems = preflight(runs, pack, args.batch, None if ray_client(args.address) else Path(cache_dir), root,
                         spec.max_cost_usd)
    if not problems and spec.provider_batches is not None:
        configs = {r.config.name: r.config for r in runs}.values()
        problems = batch_problems([m for c in configs for _, _, m in reachable_models(c)])
    if problems:
        raise preflight_error(problems, args.batch)
    if args.dry_run:
        # What `run` would do now: committed runs are skipped (failed ones too, unless --retry-failed).
        layout = BatchLayout(root)
        stored = {r.run_id: layout.stored_result(r.run_id) for r in runs}
        todo = [r for r in runs if stored[r.run_id] is None or (args.retry_failed and stored[r.run_id].status == "failed")]
        if len(todo) < len(runs):
            print(f"{len(runs) - len(todo)} of {len(runs)} runs are already committed in {root}: estimating the "
                  f"{len(todo)} left", file=sys.stderr)
        if not todo:
            print(json.dumps({"batch": spec.name, "runs": 0}) if getattr(args, "json", False) else
                  f"batch {spec.name}: every run is committed in {root}; nothing left to run")
            return 0
        d = dry_run(spec, todo, pack, getattr(args, "calibrate_from", None))
        note = budget_note(spec, d, root)
        d |= {"max_cost_usd": spec.max_cost_usd, "budget_note": note}
        if getattr(args, "json", False):
            print(json.dumps(d, indent=1))
        else:
            print(format_table(d))
        if note:
            print(note, file=sys.stderr)
        return 0
    layout = BatchLayout(root)
    stats = run_batch(spec, runs, layout, str(pack_dir), [str(e) for e in evidence], str(cache_dir), args.address,
                      args.retry_failed, args.quiet)
    status = stats["status"]
    print(f"batch {spec.name}: {stats['runs']} runs ({stats['skipped']} already done, {submissions(root)}) in "
          f"{stats['wall_s']:.1f} s; {status['ok']} ok, {status['failed']} failed, {status['pending']} pending; "
          f"state {stats['state']}; table rows: {', '.join(f'{k} {v}' for k, v in stats['tables'].items())}; "
          f"results in {root.resolve()}")  # not configs/batches/../../results/…
    if "provider_batches" in stats:
        pb = stats["provider_batches"]
        print(f"provider batches: {pb['provider_batches']} created for {pb['requests']} requests "
              f"({pb['answered']} answered, {pb['errored']} answered with an error and asked again, {pb['resubmitted']} "
              f"resubmitted from an expired or failed batch), journaled in {root / 'provider_batches'}")
    spent, reached = budget_lines(stats["budget"], args.batch, unpriced_calls(root))
    if spent:
        print(spent)
    if reached:
        print(reached, file=sys.stderr)
    if status["failed"]:
        print(f"{status['failed']} run(s) failed:", file=sys.stderr)
        print("\n".join(failure_summary(read_manifest(root)["runs"])), file=sys.stderr)
        print(f"retry them with:\n  {retry_command(args)}", file=sys.stderr)
    if stats["state"] == "interrupted" and status["pending"]:
        return EXIT_INTERRUPTED
    if status["failed"]:
        return EXIT_RUNS_FAILED
    return 0 if status["pending"] == 0 else EXIT_RUNS_FAILED


def batch_state(root: Path, m: dict) -> tuple[str, str | None]:
    """(the batch's state, the driver holding its lock or None). A manifest that says ``running`` is believed only
    while a driver holds ``<results>/.lock``: a driver killed with ``kill -9`` leaves it saying so forever."""
    holder = lock_holder(root)
    if m["state"] == "running" and holder is None:
        return f"stopped (driver gone: last update {m['updated']}; run the same command to resume)", None
    return m["state"], holder


def cmd_status(args) -> int:
    root = Path(args.results_dir)
    if not (root / "manifest.json").is_file():
        raise InputError(args.results_dir, "no manifest.json here", "give a batch results directory such as results/rules-35")
    m = read_manifest(root)
    state, driver = batch_state(root, m)
    runs = m["runs"]
    counts = {s: sum(1 for r in runs if r["status"] == s) for s in ("ok", "failed", "pending")}
    layout = BatchLayout(root)
    committed = sum(1 for r in runs if layout.stored_result(r["run_id"]) is not None)  # each read: a corrupt one is named
    # Runs the manifest calls in flight are in flight only while its driver lives; else they wait for the resume.
    flying = [r for r in runs if r.get("in_flight_since")] if driver is not None else []
    in_flight = [{"run_id": r["run_id"], "config": r["config"], "scenario_id": r["scenario_id"],
                  "since": r["in_flight_since"], "step": current_step(layout.trace_path(r["run_id"]))} for r in flying]
    by_config: dict[str, dict[str, int]] = {}
    for r in runs:
        by_config.setdefault(r["config"], {"ok": 0, "failed": 0, "pending": 0})[r["status"]] += 1
    if args.json:
        print(json.dumps({"batch": m["spec"]["name"], "state": state, "driver": driver, "updated": m["updated"], **counts,
                          "committed": committed, "in_flight": in_flight, "by_config": by_config}, indent=1))
        return 0
    updated = "" if state.startswith("stopped (driver gone") else f" (updated {m['updated']})"
    print(f"batch {m['spec']['name']}: {state}{updated}; {len(runs)} runs: "
          f"{counts['ok']} ok, {counts['failed']} failed, {counts['pending']} pending ({len(in_flight)} in flight); "
          f"{committed} results committed")
    for cfg, c in by_config.items():
        print(f"  {cfg:<30} ok {c['ok']:>4}  failed {c['failed']:>4}  pending {c['pending']:>4}")
    for r in in_flight:
        print(f"  in flight {r['run_id']} ({r['config']} on {r['scenario_id']}, since {r['since']}): {r['step']}")
    if counts["failed"]:
        print(f"  {counts['failed']} failed:")
        print("\n".join("  " + line for line in failure_summary(runs)))
    return 0
