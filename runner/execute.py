"""Running a batch on Ray: runner actors, their reports, the manifest, the budget, resume.

The driver expands the batch, skips runs whose result is already committed, and feeds the rest to a small pool of
async runner actors (each hosts one gateway, one cache handle and the loaded pack, so litellm is imported once per
actor, not per run) through the dispatch loop `madbench rescore` shares (runner/dispatch.py: at most
``max_in_flight`` runs outstanding, retries, a stop at the budget, Ctrl-C). Each run carries the id the expansion gave
it, which the actor checks against the run's content before using it. A run's result file is its commit point; a
killed batch resumes from its traces with paid calls served from the cache.

On a cluster the results land in the driver's results directory whichever node ran a run (an actor whose node
cannot see it stages the run and the driver commits it: runner/staging.py), and the response cache is the
cluster's (runner/cache_actor.py): a call paid on one node is a hit on every other.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import psutil

from madbench.data.errors import InputError
from madbench.data.market.pack import load_pack
from madbench.data.paths import PROJECT_ROOT
from madbench.data.plugins import code_roots
from madbench.data.scenario import Scenario
from madbench.debate.config import DebateConfig
from madbench.gateway import Budget
from madbench.gateway.errors import BudgetExhausted
from madbench.gateway.hedging import HedgeSettings
from madbench.gateway.limiter import ray_limiter
from madbench.gateway.models import ModelSpec
from madbench.gateway.providers.batching import current_party
from madbench.gateway.secrets import redact, remember
from madbench.results import ManifestRun, read_manifest, read_table, write_manifest
from madbench.results.provenance import Provenance
from madbench.results.records import ManifestJournal, RunStatus
from madbench.runner.api_records import BatchOutcome
from madbench.runner.batch import BatchSpec, RunSpec
from madbench.runner.budget import (
    BudgetRecord,
    RayBudget,
    read_budget_told,
    start_budget,
    stop_budget,
    summary,
)
from madbench.runner.cache_actor import CachePlan, start_cache, stop_cache, wants_cluster_cache
from madbench.runner.dispatch import BUDGET_STOP, FINISHED, ActorPool, Dispatch, Work
from madbench.runner.lock import ResultsLock, WriterGuard
from madbench.runner.pipeline import check_run_id, run_debate
from madbench.runner.progress import BatchLine, Progress
from madbench.runner.provider_batches import CollectorClient, journal_summary, start_collector, stop_collector
from madbench.runner.ray_address import RayUnavailable
from madbench.runner.ray_home import local_ray_temp_dir, remove_stale_sessions
from madbench.runner.run_report import RunReport, Status
from madbench.runner.sequential import NOT_NEEDED, Monitor, pair_first
from madbench.runner.staging import (
    OwnerGuard,
    collect,
    commit,
    head_trace,
    job_working_dir,
    portable,
    prepare,
    sees_results,
    staging_root,
)
from madbench.runner.store import BatchLayout, compact, run_entry, write_parts
from madbench.runner.sweep import SweepMonitor
from madbench.runner.wiring import build_gateway, build_providers


class ActorReport(RunReport):
    """A runner actor's report of a run: whether the actor stages its runs (None: unknown, the actor raised), and a
    staged run's files, which the driver commits (runner/staging.py)."""

    staged: bool | None = None
    artifacts: dict[str, Any] | None = None


class RunnerActor:
    """Hosts agents and the CRIT scorer for many runs (one gateway, one cache, one pack)."""

    def __init__(self, pack_dir: str, evidence: list[str], cache: CachePlan, root: str, batch: str, budget: Budget,
                 holder: str, collector: CollectorClient | None = None, hedging: HedgeSettings | None = None):
        import ray

        ctx = ray.get_runtime_context()
        self.node_id = ctx.get_node_id()
        self.pack = load_pack(pack_dir, evidence)  # a relative path: this node's copy of the job's working directory
        # A node that sees the results directory writes there as it goes; one that does not stages each run on its
        # own disk and hands it to the driver, which commits it (runner/staging.py).
        self.staged = not sees_results(root, holder)
        self.guard: OwnerGuard | WriterGuard
        if self.staged:
            if not isinstance(budget, RayBudget):
                raise TypeError("a node that cannot see the results asks the batch's budget actor (a RayBudget) whether "
                                f"its driver lives, not a {type(budget).__name__}")
            self.guard = OwnerGuard(budget.handle)
            self.layout = BatchLayout(staging_root(root))
            self.layout.compress_traces = False  # the driver compresses what it commits
        else:
            # Stop calling and committing once the driver is gone (kill -9): see runner.lock.WriterGuard.
            self.guard = WriterGuard(root, holder)
            self.layout = BatchLayout(root)
            self.layout.guard = self.guard
            if isinstance(budget, RayBudget):
                budget.journal_settlements(root)  # what a call in flight at a kill billed outlives the driver
        self.cache = cache.open(self.node_id, ctx.get_actor_id())
        # Provider batch mode (a collector given): litellm-routed calls wait for the batch's collector.
        self.gateway = build_gateway(cache=self.cache, budget=budget, guard=self.guard, collector=collector,
                                     hedging=hedging)
        self.collector = collector
        self.running: set[str] = set()  # the runs in flight on this actor (what ``beats`` reports on)
        if collector is not None:
            self.gateway.providers.default.warm()  # litellm now: a run slow to its first call would miss phase 1's batch
        self.batch = batch

    async def totals(self) -> dict[str, Any]:
        """This actor's gateway's counts so far, every call as it settles (the progress line's live calls and tokens)."""
        return self.gateway.totals.model_dump()

    async def beats(self) -> dict[str, Any]:
        """For each run in flight here, what moves while it makes progress: its trace's size and its provider
        attempts (the driver's watchdog, runner/dispatch.py, compares them from one look to the next); None for a run
        waiting for a provider batch, which the collector watches. Unanswered when this actor's event loop is
        blocked: that is no progress either."""
        waiting = self.collector.waiting if self.collector is not None else {}
        out: dict[str, Any] = {}
        for run_id in self.running:
            path = self.layout.trace_path(run_id)
            size = path.stat().st_size if path.exists() else -1
            out[run_id] = None if waiting.get(run_id) else (size, self.gateway.activity.get(run_id, 0))
        return out

    async def run(self, scenario: dict, config: dict, sample_index: int, retry_failed: bool, run_id: str,
                  trace: bytes | None = None) -> ActorReport:
        """One run; ``run_id``: the batch's, checked against the run's content before it names a path; ``trace``:
        the results directory's trace of it, which a staged run continues."""
        import ray

        s, c = Scenario.model_validate(scenario), DebateConfig.model_validate(config)
        check_run_id(run_id, s, c, sample_index)
        t0 = time.perf_counter()
        if self.staged:
            prepare(self.layout, run_id, trace)
        # This run's calls tell the provider-batch collector whose they are (each actor call is its own asyncio task,
        # with its own copy of the context).
        current_party.set(run_id)
        self.running.add(run_id)
        try:
            result = await run_debate(s, self.pack, c, self.gateway, self.layout, sample_index, where=f"scenario {s.id}",
                                      retry_failed=retry_failed, run_id=run_id)
        except BudgetExhausted as exc:
            return ActorReport(run_id=run_id, status=Status.BUDGET_REACHED, error=str(exc), node_id=self.node_id,
                               staged=self.staged)
        except OSError:
            raise  # a full disk stops the batch (the driver checks errno)
        except ray.exceptions.RayActorError:
            raise  # an actor this run depends on (a limiter) was lost with its node: the driver requeues the run
        except Exception as exc:
            # Many exception types (ours included) do not survive Ray's pickling; a RuntimeError carrying the type,
            # message and traceback does, so the driver records the real reason with the failed run.
            raise RuntimeError(redact(str(exc) if isinstance(exc, InputError) else  # bad input: its one line says it all
                                      f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=8)}")) from None
        finally:
            self.running.discard(run_id)
            self.gateway.activity.pop(run_id, None)
        self.guard()
        entry = run_entry(self.batch, result, config, scenario, self.node_id, self.layout.history(result.run_id))
        if not self.staged:
            self.layout.rows.append(entry)
        return ActorReport(run_id=result.run_id, status=Status(result.status), error=result.error, totals=result.totals,
                           node_id=self.node_id, wall_s=time.perf_counter() - t0, staged=self.staged,
                           artifacts=collect(self.layout, result.run_id, entry) if self.staged else None)


#: Names of variables (comma-separated) whose values this driver hands to every Ray worker in the job's runtime env:
#: how keys reach a cluster joined through the Ray client (`--address ray://…`), whose workers never see the
#: driver's environment. Like `ray job submit --runtime-env-json`, it puts the values into the job's runtime env.
FORWARD_ENV = "MADBENCH_FORWARD_ENV"


def forwarded_env() -> dict[str, str]:
    """The variables ``$MADBENCH_FORWARD_ENV`` names, with their values (remembered as secrets: scrubbed by value)."""
    names = [n.strip() for n in os.environ.get(FORWARD_ENV, "").split(",") if n.strip()]
    missing = [n for n in names if not os.environ.get(n)]
    if missing:
        raise InputError(f"${FORWARD_ENV}", f"names {', '.join(missing)}, unset or empty in this environment",
                         "export them before `madbench run`, or leave them out of the list")
    for n in names:
        remember(os.environ[n])
    return {n: os.environ[n] for n in names}


def ray_client(address: str | None) -> bool:
    """Whether this driver joins through the Ray client (``ray://…``, given or in ``$RAY_ADDRESS``): it then runs off
    the cluster, and a path it names is a path on this machine, not on the nodes."""
    return (address or os.environ.get("RAY_ADDRESS") or "").startswith("ray://")


#: Ray's variable for its workers' niceness (``ray._private.ray_constants.RAY_WORKER_NICENESS``).
WORKER_NICENESS = "RAY_worker_niceness"


def worker_env(address: str | None) -> dict[str, Any]:
    """The runtime env this driver gives its Ray workers: the forwarded variables, and the project (with the folders
    of plug-ins imported by path, ``madbench.data.plugins.code_roots``) on PYTHONPATH only where its path means
    something to them. Not in a ``--working-dir`` job (Ray puts each node's copy of the
    upload on the path itself, and this process's copy is one of them), nor through the Ray client (the checkout is
    on this machine; the nodes import the madbench installed on them)."""
    # Ray starts its workers at niceness 15 (to keep its own daemons responsive), so any process at the default 0
    # (a build, a second batch, a test suite) starves the actors that run the debates: on a loaded 2-core machine a
    # batch of four runs took minutes instead of seconds. madbench's actors are the job, so they compete as equals
    # (Ray's own job supervisor does the same); a user's RAY_worker_niceness is kept.
    env_vars = {WORKER_NICENESS: os.environ.get(WORKER_NICENESS, "0"), **forwarded_env()}
    if job_working_dir() is None and not ray_client(address):
        # and the folders of the researcher's own protocols, scorers and metrics (import paths in the configs)
        path = [str(PROJECT_ROOT), *map(str, code_roots()), os.environ.get("PYTHONPATH", "")]
        env_vars = {"PYTHONPATH": os.pathsep.join(path), **env_vars}
    return {"env_vars": env_vars}


#: Joining through the Ray client starts a server process for this driver on the head, and on a busy head that
#: process can fail to come up (the head then aborts the connection); that start is tried this many times, a few
#: seconds apart, before it is reported. An unreachable address is reported at once.
CLIENT_CONNECT_ATTEMPTS = 3


def init_ray(address: str | None, num_cpus: int | None = None):
    import ray
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    address = address or os.environ.get("RAY_ADDRESS")
    if not ray.is_initialized():
        env = worker_env(address)
        if address:
            _join_cluster(ray, address, env)
        else:
            _start_local_ray(ray, num_cpus, env)
    ray_messages_to_stderr()
    return ray


def ray_messages_to_stderr() -> None:
    """Send the cluster's messages that Ray's driver prints (a raylet's "N worker processes have been started", an
    actor killed for memory) to stderr. Ray prints them on stdout, at any moment from a background thread, and a
    command's stdout is its output (`--json`); in a process that keeps Ray up (the Python API), that is every later
    command's. Ray looks its printer up at each message, so replacing it reaches a driver already connected."""
    from ray._private import worker
    printer = worker.print_to_stdstream
    if getattr(printer, "to_stderr", False):
        return

    @functools.wraps(printer)
    def print_on_stderr(data: dict[str, Any], ignore_prefix: bool) -> None:
        printer({**data, "is_err": True}, ignore_prefix)

    print_on_stderr.to_stderr = True  # type: ignore[attr-defined]
    worker.print_to_stdstream = print_on_stderr


#: A local Ray's settings. Ray starts a Python worker per CPU for the first driver's tasks; madbench sends none (its
#: work runs on actors, each in a worker process of its own), so they only took a second of CPU at every start.
LOCAL_RAY_CONFIG = {"prestart_worker_first_driver": False}

#: A local Ray's node must register within a 30 s Ray does not let a caller change; on a busy machine it may not.
#: The start is tried this many times (each failed one shut down first) before it is reported.
LOCAL_START_ATTEMPTS = 3


def _start_local_ray(ray, num_cpus: int | None, env: dict[str, Any]) -> None:
    temp = local_ray_temp_dir()
    remove_stale_sessions(temp)
    for attempt in range(1, LOCAL_START_ATTEMPTS + 1):
        before = _children()
        try:
            # address="local": a Ray of this process's own, even where `ray start` left a cluster running on this
            # machine (Ray would join that one, from /tmp/ray/ray_current_cluster); a cluster is joined by its address.
            ray.init(address="local", include_dashboard=False, num_cpus=num_cpus, runtime_env=env, log_to_driver=False,
                     configure_logging=False, _system_config=dict(LOCAL_RAY_CONFIG), _temp_dir=str(temp))  # a copy: Ray adds to it
            global _local_ray_started
            _local_ray_started = True
            return
        except Exception as exc:  # Ray raises a bare Exception when its node does not come up in time
            reason = " ".join(str(exc).split())[:300]
            ray.shutdown()
            # A node that failed half-way is not Ray's to shut down: its GCS server or raylet would outlive us.
            _stop_children_since(before)
            if attempt == LOCAL_START_ATTEMPTS:
                raise RayUnavailable(f"a local Ray did not start ({attempt} tries): {reason}; its logs: "
                                     f"{temp}/session_latest/logs") from exc
            print(f"madbench: warning: a local Ray did not start ({reason[:80]}...); trying again ({attempt + 1} of "
                  f"{LOCAL_START_ATTEMPTS})", file=sys.stderr, flush=True)


#: Whether this process started the local Ray it is connected to (a cluster joined by address is not ours to stop).
_local_ray_started = False


def stop_local_ray(quiet: bool = False) -> None:
    """Shut down the local Ray this process started, saying so first: a command's Ray would otherwise be torn down
    at interpreter exit, seconds of silence after the command's last line on a busy machine."""
    global _local_ray_started
    if not _local_ray_started:
        return
    _local_ray_started = False
    import ray
    if ray.is_initialized():
        _say("stopping the local Ray (a few seconds) ...", quiet)
        ray.shutdown()


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def _stop_children_since(before: set[int]) -> None:
    """Kill this process's child processes started since ``before`` (the processes of a failed Ray start)."""
    started = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    for proc in started:
        with contextlib.suppress(psutil.NoSuchProcess):  # it ended on its own
            proc.kill()
    psutil.wait_procs(started, timeout=10)


def _say(text: str, quiet: bool) -> None:
    if not quiet:
        print(f"madbench: {text}", file=sys.stderr, flush=True)


def _ray_start_text(address: str | None) -> str:
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        return f"joining the Ray cluster at {address} (seconds; a busy head or a Ray client can take a minute)"
    return "starting a local Ray (5-30 s; longer on a busy machine)"


def _started(start: Callable[[], Any], text: str, quiet: bool) -> Any:
    """``start()``, with a line before it saying what is starting and how long it may take, and one after it."""
    import ray
    if ray.is_initialized():
        return start()
    _say(text + " ...", quiet)
    t0 = time.perf_counter()
    started = start()
    _say(f"Ray ready in {time.perf_counter() - t0:.0f} s", quiet)
    return started


def _join_cluster(ray, address: str, env: dict[str, Any]) -> None:
    attempts = CLIENT_CONNECT_ATTEMPTS if ray_client(address) else 1
    for attempt in range(1, attempts + 1):
        try:
            ray.init(address=address, runtime_env=env, log_to_driver=False)
            return
        except ConnectionError as exc:
            reason = " ".join(str(exc).split())[-300:]
            if attempt == attempts or not isinstance(exc, ConnectionAbortedError):
                raise InputError("--address", f"could not join the Ray cluster at {address} (attempt {attempt}): {reason}",
                                 "check that the cluster is up (`ray status`) and the address and port are right; the "
                                 "head's ray_client_server*.err logs say why a client server did not start") from exc
            print(f"madbench: joining {address} failed (attempt {attempt} of {attempts}): {reason}; retrying",
                  file=sys.stderr)
            time.sleep(5.0 * attempt)


#: The manifest's journal is folded into a snapshot once it is larger than the last snapshot and than this.
SNAPSHOT_MIN_BYTES = 1_000_000


class RunWork(Work[RunSpec]):
    """`madbench run`'s unit: a run of the batch, sent to a ``RunnerActor``; its report committed (when staged) and
    recorded in the manifest's journal every few seconds (madbench.results.records.ManifestJournal)."""

    kept = "committed runs are kept"
    watched = True

    def __init__(self, pool: ActorPool, layout: BatchLayout, manifest_runs: dict[str, ManifestRun], stats: dict[str, Any],
                 retry_failed: bool, spec_json: dict[str, Any], collector=None,
                 every_status: list[Callable[[], Any]] | None = None, monitor: Monitor | SweepMonitor | None = None,
                 provenance: Provenance | None = None):
        self.pool, self.layout, self.manifest_runs, self.stats = pool, layout, manifest_runs, stats
        self.monitor = monitor  # a sequential batch's looks (runner/sequential.py)
        self.provenance = provenance
        self.retry_failed, self.spec_json = retry_failed, spec_json
        self.collector = collector  # provider batch mode: told which runs are in flight (runner/provider_batches.py)
        #: Called with the manifest every few seconds (a Ray client's driver writes its budget then).
        self.every_status = every_status or []
        self.staged: dict[int, bool] = {}  # actor index → whether it stages its runs (unknown until it answers)
        self.committed: Counter = Counter()  # run id → ok results settled: every run is committed exactly once
        stats.setdefault("committed_twice", [])
        self.journal = ManifestJournal(layout.root)
        self.changed: set[str] = set()  # runs whose manifest entry changed since the last tick
        self.snapshot_bytes = layout.manifest.stat().st_size if layout.manifest.exists() else 0

    def key(self, r: RunSpec) -> str:
        return r.run_id

    def submit(self, handle, r: RunSpec, k: int, attempt: int):
        self.changed.add(r.run_id)
        m = self.manifest_runs[r.run_id]
        m.attempts = attempt
        m.in_flight_since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        if self.collector is not None:
            self.collector.expect.remote(r.run_id)
        # An actor that stages its runs continues the results directory's trace of this one, sent along with it.
        trace = head_trace(self.layout, r.run_id) if self.staged.get(k, True) else None
        self.stats["submitted"] += 1
        return handle.run.remote(r.scenario.model_dump(mode="json"), r.config.model_dump(mode="json"), r.sample_index,
                                 self.retry_failed or attempt > 1, r.run_id, trace)

    def returned(self, r: RunSpec) -> None:
        self.changed.add(r.run_id)
        if self.collector is not None:
            self.collector.finished.remote(r.run_id)
        self.manifest_runs[r.run_id].in_flight_since = None

    def lost(self, k: int) -> None:
        self.staged.pop(k, None)

    def withdrawn(self, r: RunSpec, attempts: int) -> None:
        self.changed.add(r.run_id)
        self.manifest_runs[r.run_id].attempts = attempts

    def settle(self, r: RunSpec, report: ActorReport, k: int, handle) -> ActorReport:
        if report.staged is not None and self.pool.actors[k] is handle:
            self.staged[k] = report.staged
        if report.artifacts is not None:  # a run from a node that cannot see the results directory: committed here
            commit(self.layout, r.run_id, report.artifacts)
        if report.status is Status.BUDGET_REACHED:
            return report
        self.changed.add(r.run_id)
        m = self.manifest_runs[r.run_id]
        m.status, m.error, m.node_id = cast(RunStatus, report.status.value), report.error, report.node_id
        if report.status is Status.OK:
            self.committed[r.run_id] += 1
            if self.committed[r.run_id] == 2:
                self.stats["committed_twice"].append(r.run_id)
        if self.monitor is not None:
            self.monitor.settled(r, report.status is Status.OK)
        return report

    def enough(self) -> bool:
        return self.monitor is not None and self.monitor.enough()

    def waits(self, r: RunSpec) -> bool:
        return self.monitor is not None and self.monitor.waits(r)

    def needed(self, r: RunSpec) -> bool:
        return not isinstance(self.monitor, SweepMonitor) or self.monitor.needed(r)

    def failure(self, r: RunSpec, exc: Exception) -> ActorReport:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, OSError) and cause.errno == errno.ENOSPC:
            # Not the run's fault, and every other run would hit it too: stop the batch, loudly.
            raise OSError(errno.ENOSPC, f"No space left on device while run {r.run_id} wrote its "
                          f"results ({cause.filename or self.layout.root})") from None
        reason = redact(str(cause) if cause is not None else str(exc))
        return ActorReport(run_id=r.run_id, status=Status.FAILED, error=reason.splitlines()[0][:500])

    def beat(self, handle):
        return handle.beats.remote()

    def tick(self) -> None:
        """Journal the manifest's changed runs, so that `madbench status` sees the runs in flight; a snapshot of every
        run once the journal outgrows the last one (so reading it never costs more than twice a snapshot)."""
        if self.journal.bytes > max(self.snapshot_bytes, SNAPSHOT_MIN_BYTES):
            path = write_manifest(self.layout.root, self.spec_json, list(self.manifest_runs.values()), "running",
                                  self.provenance)
            self.snapshot_bytes, self.journal = path.stat().st_size, ManifestJournal(self.layout.root)
        elif self.changed:
            self.journal.append([self.manifest_runs[i] for i in sorted(self.changed)], "running")
        self.changed.clear()
        for hook in self.every_status:
            hook()


def earlier_provenance(layout: BatchLayout) -> Provenance | None:
    """The provenance the batch's manifest recorded (None: no manifest yet, or one written before it was recorded)."""
    return read_manifest(layout.root).provenance if layout.manifest.exists() else None


def cluster_shape(ray) -> dict[str, Any]:
    """The Ray cluster the runs are sent to: its alive nodes and their CPUs and GPUs."""
    resources = ray.cluster_resources()
    return {"nodes": sum(1 for n in ray.nodes() if n.get("Alive")), "cpus": resources.get("CPU", 0),
            "gpus": resources.get("GPU", 0)}


def settled_state(state: str, manifest_runs: dict[str, ManifestRun], monitor: Monitor | SweepMonitor | None = None) -> str:
    """``state``, unless it says ``finished`` while runs are pending: then it says how many, so that `madbench
    status` never calls a batch finished with runs left to do. A sequential batch's runs its decision made
    unnecessary are ``not_needed`` first (``Monitor.finish``), not pending."""
    if monitor is not None and state == FINISHED:
        monitor.finish()
    pending = sum(1 for m in manifest_runs.values() if m.status == "pending")
    if state == FINISHED and pending:
        return f"stopped: {pending} run(s) pending after the dispatch ended; run the same command to resume"
    return state


def _manifest_entries(runs: list[RunSpec]) -> dict[str, ManifestRun]:
    return {r.run_id: ManifestRun(run_id=r.run_id, scenario_id=r.scenario.id, config=r.config.name,
                                  replicate=r.sample_index, status="pending") for r in runs}


def _recover_committed(spec: BatchSpec, runs: list[RunSpec], layout: BatchLayout, manifest_runs: dict[str, ManifestRun]) -> int:
    """Mark committed runs with their stored status and error, and the node the manifest recorded (a later invocation
    must not forget where a run ran: its table rows say it, and replay checks them against this); rebuild the table
    rows of any committed run that lacks them. Attempts count this invocation's, so a committed run has none. Run after
    a compaction: runs.parquet then holds the rows of every committed run that has them, with the status and error of
    its commit point, which is read only for a run without rows."""
    previous = {m.run_id: m for m in read_manifest(layout.root).runs} if layout.manifest.exists() else {}
    committed = set(layout.committed_ids())
    rows = _committed_rows(layout)
    rebuilt = 0
    for r in runs:
        if r.run_id not in committed:
            continue
        m = manifest_runs[r.run_id]
        if r.run_id in previous:
            m.node_id = previous[r.run_id].node_id
        if r.run_id in rows and rows[r.run_id][0] == "ok":
            status, m.error = rows[r.run_id]
            m.status = cast(RunStatus, status)  # checked on assignment (the model validates it)
            continue
        # A failed run's commit point is read: a retry may have committed it again, its rows not yet logged.
        stored = layout.stored_result(r.run_id)
        if stored is None:
            continue
        m.status, m.error = cast(RunStatus, stored.status), stored.error
        if rows.get(r.run_id) == (stored.status, stored.error):
            continue
        # Committed, but a crash or a full disk struck before its table rows were written: rebuild them from the
        # trace, so that no committed run is missing from the tables.
        write_parts(layout, spec.name, stored, r.config.model_dump(mode="json"), r.scenario.model_dump(mode="json"),
                    m.node_id or "")
        rebuilt += 1
    return rebuilt


def _committed_rows(layout: BatchLayout) -> dict[str, tuple[str, str | None]]:
    """Run id → (status, error) of every run in the compacted runs.parquet."""
    path = layout.table("runs")
    if not path.exists():
        return {}
    table = read_table(path, "runs").select(["run_id", "status", "error"]).to_pydict()
    return {r: (s, e) for r, s, e in zip(table["run_id"], table["status"], table["error"], strict=True)}


#: cluster.yaml's results and cache directories on the head, outside the synced checkout (~/madbench): what an error
#: about a path on the head suggests (tests/runner/test_cluster.py checks that cluster.yaml makes and uses these).
HEAD_DIRS = {"--results-dir": "/home/ubuntu/madbench-results", "--cache-dir": "/home/ubuntu/madbench-cache"}


def _refuse_paths_in_job(job_dir: Path | None, root: Path, cache_dir: str) -> None:
    """Results or a cache inside a `ray job submit --working-dir` job's working directory would be lost with it."""
    if job_dir is None:
        return
    for flag, path in (("--results-dir", root), ("--cache-dir", cache_dir)):
        if Path(path).resolve().is_relative_to(job_dir):
            raise InputError(flag, f"{path} is inside this job's working directory ({job_dir}), the copy of the upload "
                             "that Ray deletes when the job ends", f"give {flag} an absolute path on the head node (or "
                             f"on storage every node mounts), e.g. {HEAD_DIRS[flag]} (cluster.yaml's)")


def _todo(spec: BatchSpec, runs: list[RunSpec], layout: BatchLayout, manifest_runs: dict[str, ManifestRun],
          retry_failed: bool, continue_past: bool, quiet: bool) -> tuple[list[RunSpec], int, Monitor | SweepMonitor | None]:
    """(the runs to dispatch, the runs committed before, a sequential batch's monitor or None). The monitor is fed
    the committed runs (and so takes the looks an interrupted invocation had the pairs for), and the runs go in
    pair-first order, or none when a decision stands."""
    todo = [r for r in runs if manifest_runs[r.run_id].status in (("pending", "failed") if retry_failed else ("pending",))]
    skipped = len(runs) - len(todo)
    if spec.sequential is None and spec.sweep is None:
        return todo, skipped, None
    monitor: Monitor | SweepMonitor = (Monitor if spec.sequential is not None else SweepMonitor)(
        spec, runs, layout, manifest_runs, continue_past, quiet)
    for r in runs:
        if manifest_runs[r.run_id].status == "ok":
            monitor.seen(r)
    monitor.update()
    if isinstance(monitor, SweepMonitor):
        todo = [r for r in todo if monitor.needed(r)]
    return ([] if monitor.enough() else pair_first(todo, monitor.order)), skipped, monitor


def _recorded_spend(root: Path, cap_usd: float | None, quiet: bool, spent_before: float | None
                    ) -> tuple[BudgetRecord, float]:
    """The batch's recorded spend (``read_budget``), saying how the calls a crash left in flight were counted, and
    what earlier invocations spent: ``spent_before`` where this one spent some already (its leakage probe, a first
    wave), else all of it."""
    record = read_budget_told(root, cap_usd, quiet)
    return record, record.spent_usd if spent_before is None else min(spent_before, record.spent_usd)


def _stop_services(ray, budget, spent_usd: float, root: Path, off_cluster: bool, cache, collector) -> dict[str, Any]:
    """Stop the batch's budget, cache and collector actors: what each reports, for the batch's stats."""
    stopped = {"budget": stop_budget(ray, budget, spent_usd, root, driver_writes=off_cluster), "cache": stop_cache(ray, cache)}
    if collector is not None:
        stopped["provider_batches"] = stop_collector(ray, collector) | journal_summary(root)
    return stopped


def _services_up(ray, pool: ActorPool, budget: RayBudget, cache: CachePlan, runs: list[RunSpec]) -> None:
    """Start the limiters of ``runs``' models (``start_limiters``) and wait until they, the budget actor and the
    cluster's cache actor answer, all at once. One that fails to start fails the batch before any run is sent; the
    runner actors, started meanwhile, are stopped with it (a Ray that stays up, the Python API's, would keep them)."""
    try:
        refs = [*cache.ready(), *start_limiters(runs)]
        budget.snapshot()
        ray.get(refs)
    except BaseException:
        pool.kill_all()
        raise


def _collector_ready(ray, ready, quiet: bool) -> None:
    """Wait until the provider-batch collector has read its journal (it starts while the runner actors do)."""
    if ready is not None:
        ray.get(ready)
        _say("provider batch mode: each phase's requests go to the provider as one batch; a provider answers within "
             "its completion window (24 h at most, usually minutes), and progress moves as batches end", quiet)


def _model_specs(runs: list[RunSpec]) -> dict[str, ModelSpec]:
    """Each distinct model spec the runs' configs name (a config's once, however many runs it has)."""
    return {s.model_dump_json(): s for r in {r.config.name: r for r in runs}.values() for s in r.config.models.named_specs()}


def start_models(runs: list[RunSpec], address: str | None = None) -> None:
    """Start what answers the runs' models on this machine (``Provider.start``: the embedded model's file and server,
    each saying so), here, before the runs: the runner actors then find it running. Not for a cluster (``address`` or
    $RAY_ADDRESS), whose nodes each start their own."""
    if address or os.environ.get("RAY_ADDRESS"):
        return
    providers = build_providers()
    specs = _model_specs(runs)
    for spec in specs.values():
        provider = providers.for_model(spec.model)
        provider.start(provider.prepare(spec))


def start_limiters(runs: list[RunSpec]) -> list[Any]:
    """Start the cluster's limiter actor (``madbench.gateway.limiter.ray_limiter``) of each rate-limited model the
    runs name, from the driver; what answers once each is up, for ``ray.get``. A runner actor's gateway would start
    it at the batch's first call, so the first requests waited seconds for a Python process to start (longer on a
    busy machine) after everything else was up; started here, it comes up while the runner actors do. The gateway
    then finds it by name (``get_if_exists``) and configures it with the same limits. Not in provider batch mode,
    whose calls take no lease."""
    providers = build_providers()
    specs = _model_specs(runs)
    limits = {}
    for spec in specs.values():
        provider = providers.for_model(spec.model)
        if provider.rate_limited:
            prepared = provider.prepare(spec)  # as the gateway prepares it before it asks for the limiter
            limits[prepared.limit_key()] = prepared.limits
    return [ray_limiter(key, lim).actor.snapshot.remote() for key, lim in limits.items()]


def _start_actors(ray, spec: BatchSpec, todo: list[RunSpec], layout: BatchLayout, record: BudgetRecord, holder: str,
                  off_cluster: bool, data: tuple[str, list[str], Path | None], cache_dir: str, cluster_cache: bool,
                  quiet: bool) -> tuple[Any, Any, Any, ActorPool]:
    """The batch's budget, cache and collector actors and its runner actors, up and answering: (budget, cache,
    collector or None, pool). ``data``: the pack, the evidence folders and the job's working directory.

    Every actor of the batch starts at once: each is a Python process that takes seconds to come up on a busy
    machine, the runner actors longest (litellm, the pack). Waiting for the budget's before starting them, and
    leaving the limiter to the first call, put those seconds one after another before the first request. No run is
    sent before the budget, cache and limiter actors have answered (``_services_up``)."""
    pack_dir, evidence, job_dir = data
    budget = start_budget(ray, layout.root, record, actor_writes=not off_cluster, holder=holder, wait=False)
    cache = start_cache(ray, cache_dir, cluster_cache, wait=False)
    batches = spec.provider_batches
    collector, ready = start_collector(ray, layout.root, holder, batches) if batches else (None, None)
    pool = ActorPool(ray, RunnerActor, (portable(pack_dir, job_dir), [portable(e, job_dir) for e in evidence], cache,
                                        str(layout.root), spec.name, budget, holder,
                                        CollectorClient(collector) if collector else None, spec.hedging),
                     min(spec.workers, len(todo)), spec.max_in_flight)
    _services_up(ray, pool, budget, cache, [] if batches else todo)  # provider batches' calls take no lease
    _collector_ready(ray, ready, quiet)
    return budget, cache, collector, pool


def run_batch(spec: BatchSpec, runs: list[RunSpec], layout: BatchLayout, pack_dir: str, evidence: list[str], cache_dir: str,
              address: str | None = None, retry_failed: bool = False, quiet: bool = False, continue_past: bool = False,
              provenance: Provenance | None = None, spent_before: float | None = None) -> BatchOutcome:
    """Run the batch's pending runs holding its results directory's lock (runner/lock.py: a second driver fails at once);
    ``continue_past``: a sequential batch goes past its decision; ``spent_before``: earlier spend (None: budget.json's)."""
    job_dir = job_working_dir()
    _refuse_paths_in_job(job_dir, layout.root, cache_dir)
    cluster_cache = wants_cluster_cache(address)
    with ResultsLock(layout.root, "madbench run") as lock:
        manifest_runs = _manifest_entries(runs)
        compact(layout)  # the rows an interrupted invocation logged: what tells a committed run's rows are there
        rebuilt = _recover_committed(spec, runs, layout, manifest_runs)
        todo, skipped, monitor = _todo(spec, runs, layout, manifest_runs, retry_failed, continue_past, quiet)
        # The cache this batch really used, resolved: re-scoring and the estimate find it from the manifest.
        spec_json = spec.model_dump(mode="json") | {"cache_dir": str(Path(cache_dir).resolve())}
        if provenance is None or not todo:  # nothing runs now: the provenance of the runs is the earlier invocation's
            provenance = earlier_provenance(layout) or provenance
        # One budget for the batch, across invocations (runner/budget.py), read before the manifest says `running`: a
        # budget.json it cannot read stops the command with nothing written.
        record, before = _recorded_spend(layout.root, spec.max_cost_usd, quiet, spent_before)
        write_manifest(layout.root, spec_json, list(manifest_runs.values()), "running", provenance)
        progress = Progress(len(todo), BatchLine(spec.max_cost_usd, before, record.spent_usd), enabled=not quiet)
        stats = {"runs": len(runs), "skipped": skipped, "submitted": 0, "wall_s": 0.0, "parts_rebuilt": rebuilt,
                 "budget": summary(record.model_dump(), before)}
        t0, state = time.perf_counter(), FINISHED
        if todo and record.reached:  # stopped at this cap before: nothing more is spent until it is raised
            todo, state = [], BUDGET_STOP
        if todo:
            start_models(todo, address)
            ray = _started(lambda: init_ray(address), _ray_start_text(address), quiet)
            if provenance is not None:
                provenance = provenance.model_copy(update={"cluster": cluster_shape(ray)})
            off_cluster = ray_client(address)  # the results are on this machine: the budget is written from here
            budget, cache, collector, pool = _start_actors(ray, spec, todo, layout, record, lock.holder, off_cluster,
                                                           (pack_dir, evidence, job_dir), cache_dir, cluster_cache, quiet)
            progress.poll = lambda: {"spent_usd": budget.snapshot()["spent_usd"], **pool.totals()}
            work = RunWork(pool, layout, manifest_runs, stats, retry_failed, spec_json, collector,
                           every_status=[lambda: budget.persist(layout.root)] if off_cluster else [], monitor=monitor,
                           provenance=provenance)
            # What the manifest says if the dispatch never returns (a signal's SystemExit): never `finished`.
            state = "stopped: the driver exited before the runs settled; run the same command to resume"
            try:
                state = Dispatch(pool, work, todo, spec.max_in_flight, progress, spec.retries,
                                 spec.stall_timeout_s).run()
            except Exception as exc:  # the batch stopped on an error: the manifest says so, never `finished`
                state = "stopped: " + redact(f"{type(exc).__name__}: {exc}".splitlines()[0])[:300]
                raise
            finally:
                for m in manifest_runs.values():
                    m.in_flight_since = None
                state = settled_state(state, manifest_runs, monitor)
                write_manifest(layout.root, spec_json, list(manifest_runs.values()), state, provenance)
                stats |= _stop_services(ray, budget, before, layout.root, off_cluster, cache, collector)
        else:
            state = settled_state(state, manifest_runs, monitor)
            write_manifest(layout.root, spec_json, list(manifest_runs.values()), state, provenance)
        return BatchOutcome.model_validate(stats | _compacted(layout, state, t0, manifest_runs))


def _compacted(layout: BatchLayout, state: str, t0: float, manifest_runs: dict[str, ManifestRun]) -> dict[str, Any]:
    """The invocation's last stats: the tables compacted (and how long that took), its wall time, the runs' statuses."""
    t = time.perf_counter()
    tables = compact(layout)
    return {"state": state, "tables": tables, "compaction_s": time.perf_counter() - t, "wall_s": time.perf_counter() - t0,
            "status": {s: sum(1 for m in manifest_runs.values() if m.status == s)
                       for s in ("ok", "failed", "pending", NOT_NEEDED)}}
