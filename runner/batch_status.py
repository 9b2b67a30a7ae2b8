"""A batch's progress and outcome (`madbench status`, ``Results.status()``) and its failures grouped by reason.

Apart from ``batch_view`` so that `madbench status`, a quick look, reads the manifest and the result files without
importing the statistics and the report (scipy, plotly: most of a command's start-up).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from madbench.data.errors import InputError
from madbench.debate.trace import read_trace
from madbench.eval.stats.sequential_record import SequentialRecord, read_record
from madbench.eval.stats.sweep_record import SweepRecord
from madbench.eval.stats.sweep_record import read_record as read_sweep_record
from madbench.results import BatchDirs, Manifest, ManifestRun, check_results_dir, read_manifest
from madbench.runner.api_records import RunCounts
from madbench.runner.lock import lock_holder
from madbench.runner.sequential import NOT_NEEDED
from madbench.runner.store import BatchLayout, current_step, group_failures


class FailureGroup(BaseModel):
    """Failed runs that failed for one reason (its first lines: a traceback's tail differs from run to run)."""
    reason: str
    run_ids: list[str]
    #: Every call of these runs was answered (none failed), so their answers are in the response cache, and
    #: `--retry-failed` would ask the same requests, get the same answers and fail them again (whatever failed: the
    #: answers, or a check made after them).
    repeats_on_retry: bool = False


def repeats_on_retry(layout: BatchLayout, run_id: str) -> bool:
    """Whether the run failed after every call was answered, not on a failed call: its trace's last attempt answered
    every call it made and none failed. Those answers are in the response cache (and the trace), so a retry asks the
    same requests, gets the same answers and fails the same way. What failed is not known here: the answers as a
    whole (a protocol's check of them), or something after them (a self_consistency run matched on cost finding a
    draw's cost unknown). A run that failed after its backtest (a run metric of the researcher's own code raised) is
    not one: fixed, a retry replays its answers and succeeds."""
    events = read_trace(layout.trace_path(run_id)).events
    starts = [i for i, e in enumerate(events) if e["event"] == "run_start"]
    last = events[starts[-1]:] if starts else []
    kinds = [e["event"] for e in last]
    return "llm_call" in kinds and "llm_failure" not in kinds and "backtest" not in kinds


def failure_groups(manifest_runs: list[ManifestRun], limit_lines: int = 3, root: Path | None = None) -> list[FailureGroup]:
    """The failed runs of a manifest grouped by reason, most frequent first; with the batch's ``root``, the runs whose
    retry would repeat their failure are grouped apart (``FailureGroup.repeats_on_retry``)."""
    failed = {r.run_id: r.error for r in manifest_runs if r.status == "failed"}
    repeating = {i for i in failed if repeats_on_retry(BatchLayout(root), i)} if root is not None else set()
    groups = []
    for reason, ids in group_failures(failed, limit_lines):
        for repeats in (False, True):
            mine = [i for i in ids if (i in repeating) is repeats]
            if mine:
                groups.append(FailureGroup(reason=reason, run_ids=mine, repeats_on_retry=repeats))
    return groups


def failure_summary(groups: list[FailureGroup]) -> list[str]:
    """Failed runs grouped by reason, most frequent first, as `madbench run` and `status` print them."""
    out = []
    for g in groups:
        out.append(f"  {len(g.run_ids)} run(s), e.g. {g.run_ids[0]}:")
        out += [f"    {line}" for line in g.reason.splitlines()]
    return out


def attempt_counts(manifest_runs: list[ManifestRun]) -> tuple[int, int]:
    """(runs submitted, retries) by the last invocation, from the attempts a manifest counts: a run retried after a
    failure is one run submitted and one retry; one requeued after its actor was lost is neither."""
    attempts = [r.attempts for r in manifest_runs]
    return sum(1 for a in attempts if a), sum(max(0, a - 1) for a in attempts)


class InFlight(BaseModel):
    """A run its driver has in flight, and what it is doing now (the last event of its trace)."""
    run_id: str
    config: str
    scenario_id: str
    since: str
    step: str


class BatchStatus(BaseModel):
    """Progress and outcome of a batch (what `madbench status` prints; its --json is every field but ``failures``)."""
    batch: str
    #: finished, running, interrupted, stopped: ... (``stopped (driver gone ...)`` when a driver died holding it)
    state: str
    #: The driver holding the results directory's lock, or None.
    driver: str | None
    updated: str
    ok: int
    failed: int
    pending: int
    #: Runs a sequential batch's decision made unnecessary.
    not_needed: int = 0
    #: A sequential batch's looks so far and its decision, a line each (empty for another batch).
    looks: list[str] = []
    #: Runs whose result file is committed.
    committed: int
    in_flight: list[InFlight]
    #: Config name -> its runs by status.
    by_config: dict[str, RunCounts]
    failures: list[FailureGroup]


def batch_state(root: Path, m: Manifest) -> tuple[str, str | None]:
    """(the batch's state, the driver holding its lock or None). A manifest that says ``running`` is believed only
    while a driver holds ``<results>/.lock``: a driver killed with ``kill -9`` leaves it saying so forever."""
    holder = lock_holder(root)
    if m.state == "running" and holder is None:
        return f"stopped (driver gone: last update {m.updated}; run the same command to resume)", None
    return m.state, holder


def look_lines(record: SequentialRecord | None) -> list[str]:
    """A sequential batch's looks so far, a line each, and its decision (what `madbench status` prints)."""
    if record is None:
        return []
    d = record.design
    out = [f"sequential: {record.treatment} − {record.control} on {record.metric}, {len(d.n)} looks at {d.n} complete "
           f"pairs, {d.spending} spending" + (", non-binding futility" if d.futility else "")]
    for x in record.looks:
        fut = "" if x.futility_t is None else f", futility {x.futility_t:.3f}"
        out.append(f"look {x.look}: {x.n} pairs, t = {x.t:.3f} (efficacy ±{x.efficacy_t:.3f}{fut}): {x.decision}")
    if record.decision:
        # Past a decision, --continue ran the runs it had made unnecessary: they are no longer not_needed.
        idle = (f"{len(record.not_needed)} not_needed" if record.stopped else
                f"continued past it: the {len(record.not_needed)} runs it had made not_needed were run")
        out.append(f"decision: {record.decision}; {len(record.overrun)} overrun, {idle}")
    return out


def sweep_look_lines(record: SweepRecord | None) -> list[str]:
    """A sweep's looks so far, a line each, with each arm's t and what the look decided (what `madbench status`
    prints)."""
    if record is None:
        return []
    d = record.design
    out = [f"sweep: {len(record.arms)} arms against {record.control} on {record.metric}, rule {d.rule}, {len(d.n)} "
           f"looks at {d.n} complete scenarios"]
    for x in record.looks:
        arms = ", ".join(f"{a.arm} t = {a.t:.2f} {a.decision}" for a in x.arms)
        out.append(f"look {x.look}: {x.n} scenarios, efficacy {x.arms[0].efficacy_t:.3f}: {arms}")
    idle = sum(len(v) for v in record.not_needed.values())
    if record.decided:
        out.append(f"every arm decided; {len(record.overrun)} overrun, " + (f"{idle} not_needed" if record.stopped else
                   "continued past the decisions: the runs they had made not_needed were run"))
    return out


def require_manifest(path: str | Path) -> None:
    """``path`` is a batch's results directory (it has a manifest), else an InputError saying what to give."""
    if not BatchDirs(Path(path)).manifest.is_file():
        raise InputError(str(path), "no manifest.json here", "give a batch results directory such as results/rules-35")


def batch_status(path: Path) -> BatchStatus:
    """The progress and outcome of the batch whose results directory is ``path``, as `madbench status` reports it."""
    check_results_dir(path)  # a linked folder or a file where the layout has a folder is named before anything is read
    require_manifest(path)
    m = read_manifest(path)  # read afresh: a batch may be running
    state, driver = batch_state(path, m)
    runs = m.runs
    layout = BatchLayout(path)
    committed = sum(1 for r in runs if layout.stored_result(r.run_id) is not None)  # a corrupt one is named
    # Runs the manifest calls in flight are in flight only while its driver lives; else they wait for the resume.
    flying = [r for r in runs if r.in_flight_since] if driver is not None else []
    in_flight = [InFlight(run_id=r.run_id, config=r.config, scenario_id=r.scenario_id, since=r.in_flight_since,
                          step=current_step(layout.trace_path(r.run_id))) for r in flying]
    by_config: dict[str, dict[str, int]] = {}
    for r in runs:
        by_config.setdefault(r.config, {"ok": 0, "failed": 0, "pending": 0, NOT_NEEDED: 0})[r.status] += 1
    counts = {s: sum(1 for r in runs if r.status == s) for s in ("ok", "failed", "pending", NOT_NEEDED)}
    return BatchStatus(batch=m.spec["name"], state=state, driver=driver, updated=m.updated, **counts,
                       looks=look_lines(read_record(path)) + sweep_look_lines(read_sweep_record(path)),
                       committed=committed, in_flight=in_flight,
                       by_config={c: RunCounts(**n) for c, n in by_config.items()}, failures=failure_groups(runs))
