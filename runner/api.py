"""The Python API: run a batch, estimate one, open its results. `madbench run`, its --dry-run and `madbench status`
call these and print what they return; a notebook calls them directly (``madbench.run``, ``madbench.estimate``,
``madbench.open_results``).

Bad input raises ``InputError`` (naming the file or argument and the fix), as the command line reports it."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from madbench.data.errors import InputError, format_validation_error
from madbench.data.memo import build_memo
from madbench.eval.stats.group_sequential import design_power
from madbench.eval.stats.sequential_record import SequentialSummary, batch_summary, read_record
from madbench.eval.stats.sweep_record import read_record as read_sweep_record
from madbench.eval.stats.sweep_record import summary as sweep_record_summary
from madbench.results import BatchDirs, ResultsDir, read_manifest
from madbench.results.provenance import Provenance, collect, dirty_warning, require_clean
from madbench.runner.api_records import (
    CalibrationSource,
    ConfigEstimate,
    EstimateFigures,
    ModelLine,
    Number,
    ProviderBatchUse,
    Rates,
    RunCounts,
    SequentialPlan,
    Spend,
    TableRows,
)
from madbench.runner.batch import BatchSpec
from madbench.runner.batch_status import FailureGroup, attempt_counts, failure_groups
from madbench.runner.batch_view import Results
from madbench.runner.budget import read_budget
from madbench.runner.dispatch import FINISHED
from madbench.runner.estimate import MemoInfo, calibrate, estimate_batch
from madbench.runner.execute import ray_client, run_batch
from madbench.runner.exit_codes import EXIT_INTERRUPTED, EXIT_RUNS_FAILED
from madbench.runner.launch import Launch, load_checked
from madbench.runner.leakage_gate import audit_batch
from madbench.runner.matching import split, with_targets
from madbench.runner.options import RunOptions
from madbench.runner.preflight import reachable_models
from madbench.runner.provider_batches import batch_problems
from madbench.runner.sequential import design_of, quarters_of
from madbench.runner.store import BatchLayout
from madbench.runner.sweep import sweep_plan


class BatchRun(BaseModel):
    """The outcome of running a batch (``madbench.run``; `madbench run` prints it)."""
    batch: str
    #: The batch file, as given (for a batch built in Python, a label naming it and its base_dir).
    batch_file: str
    #: The batch's results directory (``open_results`` reads it), relative when the batch file or results_dir was.
    results_dir: Path
    runs: int
    #: Runs committed before this invocation (not run again).
    skipped: int
    #: Runs this invocation submitted, and the retries among its attempts.
    submitted: int
    retries: int
    wall_s: float
    #: Of ``wall_s``, the final compaction's: the row logs folded into the tables (runner/store.py).
    compaction_s: float = 0.0
    #: finished, interrupted, stopped: budget reached, ...
    state: str
    ok: int
    failed: int
    pending: int
    #: Runs a sequential batch's decision made unnecessary (never started; runner/sequential.py).
    not_needed: int = 0
    #: A sequential batch's decision and looks (``sequential_record.summary``), else None.
    sequential: SequentialSummary | None = None
    #: A sweep's decisions per arm (``sweep_record.summary``), else None.
    sweep: dict[str, Any] | None = None
    #: Rows of runs.parquet, rounds.parquet and calls.parquet.
    tables: TableRows
    failures: list[FailureGroup]
    spend: Spend
    #: Provider batch mode only: batches created, requests, answered, errored, resubmitted; ``journal``: their journal.
    provider_batches: ProviderBatchUse | None = None
    #: The command that re-runs the failed runs (these options plus --retry-failed).
    retry_command: str
    #: The exit status of `madbench run`: 0, 1 when runs failed or are pending, 130 when interrupted with runs pending.
    exit_status: int

    def open(self) -> Results:
        """The batch's results."""
        return Results(self.results_dir)


class Estimate(BaseModel):
    """The dry run's figures for the runs left (runner/estimate/): expected and worst case per config and in all."""
    model_config = ConfigDict(extra="forbid")  # a figure runner/estimate/ adds is declared here, never dropped
    batch: str
    runs: int
    expected_calls: Number
    expected_tokens: Number
    estimated_cost_usd: Number | None
    worst_cost_usd: Number | None
    models_without_price: list[str]
    max_in_flight: int
    workers: int
    execution: str
    estimated_batch_cost_usd: Number | None
    worst_batch_cost_usd: Number | None
    configs: list[ConfigEstimate]
    total: EstimateFigures
    batch_wall_s: Number
    bottleneck: str
    by_model: list[ModelLine]
    #: The rates of the optional calls the estimate assumed (expected, and the worst case's).
    rates: Rates
    worst_rates: Rates
    #: Where the rates came from when calibrated from a pilot batch (source, runs, rate_sources, latency_cv, observed).
    calibration: CalibrationSource | None
    max_cost_usd: float | None
    #: Set when the estimate does not fit in what is left of max_cost_usd.
    budget_note: str | None
    #: Why provider batch mode could not run this batch (a model without a batch API madbench can use); empty: it can.
    provider_batch_unsupported: list[str] = []
    #: A sequential batch's plan (``sequential_plan``): its looks, and its maximum and expected scenarios, cost and
    #: time under the null and under the planned effect.
    sequential: SequentialPlan | None = None
    #: A sweep's plan (``runner.sweep.sweep_plan``): its looks and bounds, its runs and cost at most and expected under
    #: the global null and under one better arm.
    sweep: dict[str, Any] | None = None


class BatchEstimate(BaseModel):
    """What `madbench run --dry-run` computes (``madbench.estimate``): runs already committed are left out."""
    batch: str
    results_dir: Path
    #: Runs in the batch, and those already committed (which a run would skip).
    runs: int
    committed: int
    #: None when every run is committed: nothing is left to run.
    estimate: Estimate | None
    #: What a run would refuse that a dry run, which sends nothing, only reports (a missing key, an unknown model).
    warnings: list[str] = []


#: What ``run`` and ``estimate`` take as a batch: a batch file, a ``BatchSpec`` built in Python, or its fields as a mapping
#: (as the YAML file would hold them).
BatchInput = str | os.PathLike[str] | BatchSpec | Mapping[str, Any]


def batch_fields(batch: BatchInput, base_dir: str | os.PathLike[str] | None, where: str) -> dict[str, Any]:
    """The ``RunOptions`` fields naming ``batch``: a file's path, or a batch built in Python (checked again here: a
    model changed after it was built is validated like a file) with the folder its relative paths are read from,
    ``base_dir`` or else the current directory, made absolute now."""
    if isinstance(batch, (str, os.PathLike)):
        if base_dir is not None:
            raise InputError(f"{where}: base_dir", "is for a batch built in Python: a batch file's relative paths are "
                             "read from the file's folder", "leave base_dir out, or pass a BatchSpec")
        return {"batch": batch}
    if not isinstance(batch, (BatchSpec, Mapping)):
        raise InputError(f"{where}: batch", f"is of type {type(batch).__name__}",
                         "pass a batch file's path, a madbench.BatchSpec or a mapping of its fields")
    fields = batch.model_dump(exclude_unset=True) if isinstance(batch, BatchSpec) else dict(batch)
    try:
        spec = BatchSpec.model_validate(fields)
    except ValidationError as exc:
        raise InputError(f"{where}: batch", format_validation_error(exc),
                         "fix the listed fields (unknown keys are rejected)") from None
    base = Path(base_dir if base_dir is not None else Path.cwd()).expanduser().resolve()
    if not base.is_dir():
        raise InputError(f"{where}: base_dir", f"{base} is not a folder",
                         "give the folder the batch's relative paths are read from (default: the current directory)")
    return {"batch": f"batch {spec.name} (built in Python, paths from {base})", "spec": spec, "base_dir": str(base)}


def run(batch: BatchInput, *, base_dir: str | os.PathLike[str] | None = None, model: str | None = None, routing: str | None = None, settings: list[str] | None = None,
        results_dir: str | Path | None = None,
        cache_dir: str | Path | None = None, scenarios: str | Path | None = None, pack: str | Path | None = None,
        evidence: Sequence[str | Path] | None = None, address: str | None = None, provider_batch: bool = False,
        max_runs: int | None = None, retry_failed: bool = False, progress: bool = False,
        continue_past: bool = False, require_clean: bool = False) -> BatchRun:
    """Run a batch (resumable: committed runs are kept), exactly as `madbench run BATCH` with the same options.

    ``batch``: a batch file, or a ``BatchSpec`` built in Python (or a mapping of its fields) whose relative paths
    are read from ``base_dir`` (default: the current directory);

    ``model`` runs every role on one model (e.g. ``rules/auto``: any batch offline) with results in <batch>@<model>;
    ``routing`` puts every config on a routing profile (``configs/routing/NAME.yaml``) with results in <batch>@<NAME>;
    ``settings`` are deployment overrides (``"agents.limits.rpm=200"``), which leave the run ids as they are;
    ``results_dir`` is the parent of the batch's results directory. A local Ray started here stays up for the next
    call (``ray.shutdown()`` stops it). Failed runs are reported in the result, not raised. ``continue_past``: a
    sequential batch goes on past its recorded decision (`--continue`). ``require_clean`` refuses a git checkout with
    uncommitted changes (else they are warned about and recorded in the manifest)."""
    return run_with(RunOptions.of(**batch_fields(batch, base_dir, "madbench.run"), model=model, routing=routing, settings=settings or [], results_dir=results_dir, cache_dir=cache_dir,
                                  scenarios=scenarios, pack=pack, evidence=evidence, address=address,
                                  provider_batch=provider_batch, max_runs=max_runs, retry_failed=retry_failed,
                                  progress=progress, continue_past=continue_past, require_clean=require_clean))


def run_with(o: RunOptions) -> BatchRun:
    """``run`` from its options."""
    b = load_checked(o)
    provenance = checked_provenance(b.pack_dir, b.evidence, b.scenario_file, o.require_clean)
    # What earlier invocations spent, read before this one spends anything (its leakage probe, a first wave).
    spent_before = read_budget(b.root, b.spec.max_cost_usd).spent_usd
    if b.spec.leakage_audit is not None:  # before any debate: a refusal starts none
        audit_batch(list({r.config.name: r.config for r in b.runs}.values()),
                    list({r.scenario.id: r.scenario for r in b.runs}.values()), b.pack, b.root, o.batch,
                    b.spec.leakage_audit, None if ray_client(o.address) else Path(b.cache_dir), b.spec.max_cost_usd,
                    quiet=not o.progress)
    runs = b.runs
    first, later = split(runs)
    outcome = None
    if later:  # runs matched to others' generated tokens wait for them (runner/matching.py)
        outcome = run_batch(b.spec, first, BatchLayout(b.root), str(b.pack_dir), [str(e) for e in b.evidence],
                            str(b.cache_dir), o.address, o.retry_failed, not o.progress, provenance=provenance,
                            spent_before=spent_before)
        runs = first + with_targets(later, b.root)
    if outcome is None or outcome.state == FINISHED:  # a stopped first wave leaves the matched runs to the next run
        outcome = run_batch(b.spec, runs, BatchLayout(b.root), str(b.pack_dir), [str(e) for e in b.evidence],
                            str(b.cache_dir), o.address, o.retry_failed, not o.progress, o.continue_past,
                            provenance=provenance, spent_before=spent_before)
    manifest_runs = read_manifest(b.root).runs
    submitted, retries = attempt_counts(manifest_runs)
    pb = outcome.provider_batches
    return BatchRun(batch=b.spec.name, batch_file=o.batch, results_dir=b.root, runs=outcome.runs,
                    skipped=outcome.skipped, submitted=submitted, retries=retries, wall_s=outcome.wall_s,
                    compaction_s=outcome.compaction_s,
                    state=outcome.state, **outcome.status.model_dump(), tables=outcome.tables,
                    sequential=sequential_summary(b.root), sweep=sweep_summary(b.root),
                    failures=failure_groups(manifest_runs, root=b.root),
                    spend=outcome.budget.model_copy(update={"unpriced_calls": unpriced_calls(b.root)}),
                    provider_batches=None if pb is None else pb.model_copy(update={"journal": str(b.root / "provider_batches")}),
                    retry_command=o.retry_command(), exit_status=exit_status(outcome.state, outcome.status))


def checked_provenance(pack_dir: Path | None, evidence: Sequence[Path], scenario_file: Path | None,
                       clean: bool) -> Provenance:
    """The provenance of results made now from these inputs; with ``clean``, a checkout with uncommitted changes is
    refused (an InputError), else it is warned about on stderr and recorded as dirty."""
    provenance = collect(pack_dir, list(evidence), scenario_file)
    if clean:
        require_clean(provenance.git)
    warning = dirty_warning(provenance.git)
    if warning:
        print(f"madbench: warning: {warning}", file=sys.stderr)
    return provenance


def sweep_summary(root: Path) -> dict[str, Any] | None:
    """A sweep's decision per arm with its adjusted figures, and what it saved (None for another batch)."""
    record = read_sweep_record(root)
    if record is None:
        return None
    return sweep_record_summary(record, ResultsDir(root).runs if BatchDirs(root).table("runs").is_file() else None)


def sequential_summary(root: Path) -> SequentialSummary | None:
    """A sequential batch's decision, its look and adjusted figures, and what it saved (None for another batch)."""
    record = read_record(root)
    if record is None:
        return None
    summary = batch_summary(record, ResultsDir(root).runs if BatchDirs(root).table("runs").is_file() else None)
    return SequentialSummary.model_validate(summary)


def exit_status(state: str, status: RunCounts) -> int:
    """`madbench run`'s exit status: interrupted with runs pending, runs failed or pending, or all ok."""
    if state == "interrupted" and status.pending:
        return EXIT_INTERRUPTED
    return EXIT_RUNS_FAILED if status.failed or status.pending else 0


def unpriced_calls(root: Path) -> int:
    """Calls of models without a price in the batch's committed runs (runs.parquet): its spend is unknown, not $0."""
    if not BatchDirs(root).table("runs").is_file():
        return 0  # no run committed yet
    return int(ResultsDir(root).runs["calls_with_unknown_cost"].fillna(0).sum())


def estimate(batch: BatchInput, *, base_dir: str | os.PathLike[str] | None = None, model: str | None = None,
             routing: str | None = None,
             settings: list[str] | None = None, calibrate_from: str | Path | None = None,
             results_dir: str | Path | None = None, cache_dir: str | Path | None = None, scenarios: str | Path | None = None,
             pack: str | Path | None = None, evidence: Sequence[str | Path] | None = None, address: str | None = None,
             provider_batch: bool = False, max_runs: int | None = None, retry_failed: bool = False) -> BatchEstimate:
    """What `madbench run BATCH --dry-run` computes: the runs a run would do now (committed ones are skipped, failed
    ones too unless ``retry_failed``) and their estimated calls, tokens, cost and time, without running anything.
    ``calibrate_from``: a pilot batch's results directory, whose measured rates, tokens and latencies replace the
    declared ones. ``batch`` and ``base_dir`` as ``run`` takes them."""
    return estimate_with(RunOptions.of(**batch_fields(batch, base_dir, "madbench.estimate"), model=model, routing=routing, settings=settings or [],
                                       calibrate_from=calibrate_from, results_dir=results_dir,
                                       cache_dir=cache_dir, scenarios=scenarios, pack=pack, evidence=evidence, address=address,
                                       provider_batch=provider_batch, max_runs=max_runs, retry_failed=retry_failed))


def estimate_with(o: RunOptions) -> BatchEstimate:
    """``estimate`` from its options."""
    b = load_checked(o, dry_run=True)
    layout = BatchLayout(b.root)
    stored = {r.run_id: layout.stored_result(r.run_id) for r in b.runs}
    todo = [r for r in b.runs if (done := stored[r.run_id]) is None or (o.retry_failed and done.status == "failed")]
    figures = dry_run(b, todo, o.calibrate_from, o.progress) if todo else None
    return BatchEstimate(batch=b.spec.name, results_dir=b.root, runs=len(b.runs), committed=len(b.runs) - len(todo),
                         estimate=figures, warnings=list(b.warnings))


def dry_run(b: Launch, todo: list, calibrate_from: str | None = None, progress: bool = False) -> Estimate:
    """The size of ``todo`` (runs of ``b``) and its estimated calls, tokens, cost and time (runner/estimate/):
    expected and worst case per config, and the batch's wall time on its max_in_flight and rate limits. ``progress``:
    say on stderr what takes more than a moment (building the memos the estimate counts)."""
    spec = b.spec
    calib = calibrate(calibrate_from) if calibrate_from else None
    scenarios = {r.scenario.id: r.scenario for r in todo}
    t0 = time.perf_counter()
    memos = {}
    for i, (sid, scenario) in enumerate(scenarios.items()):
        if progress and i % 10 == 0:
            print(f"madbench: building the memos the estimate counts: {i} of {len(scenarios)} ...", file=sys.stderr,
                  flush=True)
        memos[sid] = MemoInfo.from_memo(build_memo(scenario, b.pack))
    if progress:
        print(f"madbench: {len(memos)} memos built in {time.perf_counter() - t0:.0f} s; estimating ...", file=sys.stderr,
              flush=True)
    est = estimate_batch(todo, memos, spec.max_in_flight, calib)
    total = est["total"]
    out = {"batch": spec.name, "runs": len(todo), "expected_calls": total["calls"],
           "expected_tokens": total["prompt_tokens"] + total["completion_tokens"],
           "estimated_cost_usd": total["cost_usd"], "worst_cost_usd": total["cost_usd_worst"],
           "models_without_price": est["models_without_price"], "max_in_flight": spec.max_in_flight,
           "workers": spec.workers, "execution": "sync" if spec.provider_batches is None else "batch",
           "estimated_batch_cost_usd": total["cost_batch_usd"], "worst_batch_cost_usd": total["cost_batch_usd_worst"], **est}
    out["calibration"] = None if calib is None else CalibrationSource(
        source=calib.source, runs=calib.runs, rate_sources=calib.rate_sources, latency_cv=round(calib.latency_cv, 3),
        observed=calib.observed)
    out |= {"max_cost_usd": spec.max_cost_usd, "budget_note": budget_note(spec.max_cost_usd, out, b.root)}
    configs = {r.config.name: r.config for r in todo}.values()
    out["provider_batch_unsupported"] = batch_problems([m for c in configs for _, _, m in reachable_models(c)])
    if spec.sequential is not None:
        out["sequential"] = sequential_plan(spec, b.runs, todo, out)
    if spec.sweep is not None:
        out["sweep"] = sweep_plan(spec, b.runs, todo, out)
    return Estimate(**out)


def sequential_plan(spec, runs: list, todo: list, figures: dict[str, Any]) -> SequentialPlan:
    """A sequential batch's looks and the scenarios it uses at most and on average under H0 (no effect) and H1 (the
    planned effect), from the design's stopping probabilities (eval/stats/group_sequential.py), with the estimate of the
    runs left scaled by the share of scenarios used: cost and time as if every scenario cost the same."""
    n_scenarios = len({r.scenario.id for r in runs})
    design = design_of(spec, quarters_of(runs))
    share_left = len({r.scenario.id for r in todo}) / n_scenarios
    rows = {}
    for label, theta in (("h0", 0.0), ("h1", abs(spec.sequential.effect))):
        power, expected = design_power(design, theta)
        share = expected / n_scenarios
        cost = figures["estimated_cost_usd"]
        rows[label] = {"reject": round(power, 4), "expected_scenarios": round(expected, 1),
                       "expected_cost_usd": None if cost is None else round(cost * share / share_left, 4),
                       "expected_wall_s": round(figures["batch_wall_s"] * share / share_left, 1)}
    return SequentialPlan.model_validate({"looks": list(design.n), "max_scenarios": n_scenarios, "efficacy_z": [round(c, 4) for c in design.efficacy],
            "futility_z": None if design.futility is None else [round(f, 4) for f in design.futility],
            "power": round(design.power, 4), "notes": list(design.notes), "effect": spec.sequential.effect,
            "planned_power": spec.sequential.power, "detectable_effect": round(design.detectable, 4),
            "df": [round(x, 2) for x in design.df or []],
            "fixed_cost_usd": None if figures["estimated_cost_usd"] is None else
            round(figures["estimated_cost_usd"] / share_left, 4), **rows})


def budget_note(cap: float | None, d: dict, root: Path) -> str | None:
    """What the dry run says when its estimate does not fit in what is left of ``max_cost_usd`` (earlier invocations'
    spend, from budget.json, included): the batch would stop at the cap with runs left."""
    if cap is None:
        return None
    spent = read_budget(root, cap).spent_usd
    left = max(0.0, cap - spent)
    before = f" after ${spent:.4f} spent by earlier invocations" if spent else ""
    # In provider batch mode every call is billed at batch prices
    expected, worst = ((d["estimated_batch_cost_usd"], d["worst_batch_cost_usd"]) if d["execution"] == "batch"
                       else (d["estimated_cost_usd"], d["worst_cost_usd"]))
    if expected is not None and expected > left:
        return (f"max_cost_usd: the expected cost ${expected:.4f} exceeds the ${left:.4f} left of the ${cap:g} "
                f"cap{before}: the batch would stop at the cap with runs left; raise max_cost_usd or run fewer runs")
    if worst is not None and worst > left:
        return (f"max_cost_usd: the worst case ${worst:.4f} exceeds the ${left:.4f} left of the ${cap:g} "
                f"cap{before}: the batch may stop at the cap with runs left")
    return None


def open_results(path: str | Path) -> Results:
    """A batch results directory (it holds manifest.json): its tables, status, statistics and report."""
    return Results(path)
