"""A batch's results directory as one object (``open_results``): the tables and manifest of ``madbench.results``, plus
what the runner and the statistics derive from them: its status, statistics and report.

Every file is read through ``madbench.results`` (each when first asked for), so that a notebook opening a large batch
pays only for what it looks at."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from madbench.data.errors import InputError
from madbench.eval.report.page import build_report
from madbench.eval.stats.analysis import Analysis, analyse
from madbench.eval.stats.frame import batch_order, batch_pairs, load_runs
from madbench.eval.stats.sequential_record import SequentialRecord, batch_summary, read_record
from madbench.results import Manifest, ManifestRun, ResultsDir, read_manifest
from madbench.runner.lock import lock_holder
from madbench.runner.outcome import RunCounts
from madbench.runner.sequential import NOT_NEEDED
from madbench.runner.store import BatchLayout, current_step, group_failures


class FailureGroup(BaseModel):
    """Failed runs that failed for one reason (its first lines: a traceback's tail differs from run to run)."""
    reason: str
    run_ids: list[str]


def failure_groups(manifest_runs: list[ManifestRun], limit_lines: int = 3) -> list[FailureGroup]:
    """The failed runs of a manifest grouped by reason, most frequent first."""
    failed = {r.run_id: r.error for r in manifest_runs if r.status == "failed"}
    return [FailureGroup(reason=reason, run_ids=ids) for reason, ids in group_failures(failed, limit_lines)]


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


def check_committed(results_dir: str | Path) -> None:
    """Every committed result of a batch directory reads: a corrupt one is named, with what to do, before any work."""
    ResultsDir(results_dir).results()


class Results(ResultsDir):
    """A batch results directory written by `madbench run` (or ``madbench.run``). ``runs``, ``rounds``, ``calls``
    and ``scores`` are pandas DataFrames and ``manifest`` the manifest model, each read when first used
    (``madbench.results.ResultsDir``); ``status()``, ``stats()`` and ``report()`` derive from them."""

    def __init__(self, path: str | Path):
        super().__init__(path)
        self.path = self.root
        if not self.dirs.manifest.is_file():
            raise InputError(str(path), "no manifest.json here", "give a batch results directory such as results/rules-35")
        _ = self.manifest  # read now: a manifest of another format version, or a damaged one, is refused before any table

    def __repr__(self) -> str:
        return f"Results({str(self.path)!r})"

    def status(self) -> BatchStatus:
        """The batch's progress and outcome, as `madbench status` reports it."""
        m = read_manifest(self.path)  # read afresh: a batch may be running
        state, driver = batch_state(self.path, m)
        runs = m.runs
        layout = BatchLayout(self.path)
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
                           looks=look_lines(read_record(self.path)),
                           committed=committed, in_flight=in_flight,
                           by_config={c: RunCounts(**n) for c, n in by_config.items()}, failures=failure_groups(runs))

    def stats(self, compare: list[str] | None = None, metrics: list[str] | None = None, correction: str = "holm",
              all_pairs: bool = False) -> Analysis:
        """What `madbench stats RESULTS_DIR` computes: summaries, paired tests (the batch's declared pairs unless
        ``all_pairs``), the comparison table, correlations and OLS. ``compare``: configs in column order (default: the
        batch's); ``correction``: holm (default), bh or none, over every pair × metric as one family. Its ``markdown()`` is the printed text, ``write_csvs(dir)`` the CSVs."""
        check_committed(self.path)
        runs = load_runs(self.path)  # the runs table as declared, checked for pairing as `madbench stats` reads it
        rounds = self.rounds if self.dirs.table("rounds").exists() else None
        compare = compare or batch_order(self.path, runs)
        declared = None if all_pairs else batch_pairs(self.path)
        analysis = analyse(runs, str(self.dirs.table("runs")), compare, metrics, correction, rounds, declared)
        record = read_record(self.path)
        if record is not None:  # the looks' adjusted inference leads; the plain paired tests below are naive
            analysis.sequential = batch_summary(record, self.runs)
        return analysis

    def report(self, out: str | Path | None = None, compare: list[str] | None = None, correction: str = "holm",
               max_traces: int = 500) -> Path:
        """Write the self-contained report.html (`madbench report`; default RESULTS_DIR/report.html); its path."""
        check_committed(self.path)
        return build_report(self.path, out, compare, correction, max_traces)
