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

import errno
import os
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from madbench.data.errors import InputError
from madbench.data.market.pack import load_pack
from madbench.data.paths import PROJECT_ROOT
from madbench.data.scenario import Scenario
from madbench.debate.config import DebateConfig
from madbench.gateway import Budget
from madbench.gateway.errors import BudgetExhausted
from madbench.gateway.providers.batching import current_party
from madbench.gateway.secrets import redact, remember
from madbench.results import TABLES, ManifestRun, read_manifest, write_manifest
from madbench.runner.batch import BatchSpec, RunSpec
from madbench.runner.budget import read_budget, start_budget, stop_budget, summary
from madbench.runner.cache_actor import CachePlan, start_cache, stop_cache, wants_cluster_cache
from madbench.runner.dispatch import BUDGET_STOP, FINISHED, ActorPool, Dispatch, Work
from madbench.runner.lock import ResultsLock, WriterGuard
from madbench.runner.pipeline import check_run_id, run_debate
from madbench.runner.progress import BatchLine, Progress
from madbench.runner.provider_batches import CollectorClient, journal_summary, start_collector, stop_collector
from madbench.runner.run_report import RunReport, Status
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
from madbench.runner.store import BatchLayout, compact, write_parts
from madbench.runner.wiring import build_gateway


class ActorReport(RunReport):
    """A runner actor's report of a run: whether the actor stages its runs (None: unknown, the actor raised), and a
    staged run's files, which the driver commits (runner/staging.py)."""

    staged: bool | None = None
    artifacts: dict[str, bytes] | None = None


class RunnerActor:
    """Hosts agents and the CRIT scorer for many runs (one gateway, one cache, one pack)."""

    def __init__(self, pack_dir: str, evidence: list[str], cache: CachePlan, root: str, batch: str, budget: Budget,
                 holder: str, collector: CollectorClient | None = None):
        import ray

        ctx = ray.get_runtime_context()
        self.node_id = ctx.get_node_id()
        self.pack = load_pack(pack_dir, evidence)  # a relative path: this node's copy of the job's working directory
        # A node that sees the results directory writes there as it goes; one that does not stages each run on its
        # own disk and hands it to the driver, which commits it (runner/staging.py).
        self.staged = not sees_results(root, holder)
        if self.staged:
            self.guard = OwnerGuard(budget.handle)
            self.layout = BatchLayout(staging_root(root))
        else:
            # Stop calling and committing once the driver is gone (kill -9): see runner.lock.WriterGuard.
            self.guard = WriterGuard(root, holder)
            self.layout = BatchLayout(root)
            self.layout.guard = self.guard
        self.cache = cache.open(self.node_id, ctx.get_actor_id())
        # Provider batch mode (a collector given): litellm-routed calls wait for the batch's collector.
        self.gateway = build_gateway(cache=self.cache, budget=budget, guard=self.guard, collector=collector)
        self.collector = collector
        self.running: set[str] = set()  # the runs in flight on this actor (what ``beats`` reports on)
        if collector is not None:
            self.gateway.providers.default.warm()  # litellm now: a run slow to its first call would miss phase 1's batch
        self.batch = batch

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
        write_parts(self.layout, self.batch, result, config, scenario, self.node_id)
        return ActorReport(run_id=result.run_id, status=Status(result.status), error=result.error, totals=result.totals,
                           node_id=self.node_id, wall_s=time.perf_counter() - t0, staged=self.staged,
                           artifacts=collect(self.layout, result.run_id) if self.staged else None)


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


def worker_env(address: str | None) -> dict[str, Any]:
    """The runtime env this driver gives its Ray workers: the forwarded variables, and the project on PYTHONPATH
    only where its path means something to them. Not in a ``--working-dir`` job (Ray puts each node's copy of the
    upload on the path itself, and this process's copy is one of them), nor through the Ray client (the checkout is
    on this machine; the nodes import the madbench installed on them)."""
    env_vars = forwarded_env()
    if job_working_dir() is None and not ray_client(address):
        env_vars = {"PYTHONPATH": str(PROJECT_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), **env_vars}
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
            ray.init(include_dashboard=False, num_cpus=num_cpus, runtime_env=env, log_to_driver=False, configure_logging=False)
    return ray


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


class RunWork(Work[RunSpec]):
    """`madbench run`'s unit: a run of the batch, sent to a ``RunnerActor``; its report committed (when staged) and
    recorded in the manifest, which is rewritten every few seconds."""

    kept = "committed runs are kept"
    watched = True

    def __init__(self, pool: ActorPool, layout: BatchLayout, manifest_runs: dict[str, ManifestRun], stats: dict[str, Any],
                 retry_failed: bool, spec_json: dict[str, Any], collector=None,
                 every_status: list[Callable[[], Any]] | None = None):
        self.pool, self.layout, self.manifest_runs, self.stats = pool, layout, manifest_runs, stats
        self.retry_failed, self.spec_json = retry_failed, spec_json
        self.collector = collector  # provider batch mode: told which runs are in flight (runner/provider_batches.py)
        #: Called with the manifest every few seconds (a Ray client's driver writes its budget then).
        self.every_status = every_status or []
        self.staged: dict[int, bool] = {}  # actor index → whether it stages its runs (unknown until it answers)
        self.committed: Counter = Counter()  # run id → ok results settled: every run is committed exactly once
        stats.setdefault("committed_twice", [])

    def key(self, r: RunSpec) -> str:
        return r.run_id

    def submit(self, handle, r: RunSpec, k: int, attempt: int):
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
        if self.collector is not None:
            self.collector.finished.remote(r.run_id)
        self.manifest_runs[r.run_id].in_flight_since = None

    def lost(self, k: int) -> None:
        self.staged.pop(k, None)

    def withdrawn(self, r: RunSpec, attempts: int) -> None:
        self.manifest_runs[r.run_id].attempts = attempts

    def settle(self, r: RunSpec, report: ActorReport, k: int, handle) -> ActorReport:
        if report.staged is not None and self.pool.actors[k] is handle:
            self.staged[k] = report.staged
        if report.artifacts is not None:  # a run from a node that cannot see the results directory: committed here
            commit(self.layout, r.run_id, report.artifacts)
        if report.status is Status.BUDGET_REACHED:
            return report
        m = self.manifest_runs[r.run_id]
        m.status, m.error, m.node_id = report.status.value, report.error, report.node_id
        if report.status is Status.OK:
            self.committed[r.run_id] += 1
            if self.committed[r.run_id] == 2:
                self.stats["committed_twice"].append(r.run_id)
        return report

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
        """Rewrite the manifest, so that `madbench status` sees the runs in flight."""
        write_manifest(self.layout.root, self.spec_json, list(self.manifest_runs.values()), "running")
        for hook in self.every_status:
            hook()


def settled_state(state: str, manifest_runs: dict[str, ManifestRun]) -> str:
    """``state``, unless it says ``finished`` while runs are pending: then it says how many, so that `madbench
    status` never calls a batch finished with runs left to do."""
    pending = sum(1 for m in manifest_runs.values() if m.status == "pending")
    if state == FINISHED and pending:
        return f"stopped: {pending} run(s) pending after the dispatch ended; run the same command to resume"
    return state


def _manifest_entries(runs: list[RunSpec]) -> dict[str, ManifestRun]:
    return {r.run_id: ManifestRun(run_id=r.run_id, scenario_id=r.scenario.id, config=r.config.name,
                                  replicate=r.sample_index, status="pending") for r in runs}


def _recover_committed(spec: BatchSpec, runs: list[RunSpec], layout: BatchLayout, manifest_runs: dict[str, ManifestRun]) -> int:
    """Mark committed runs with their stored status; rebuild the table rows of any committed run that lacks them."""
    previous = {m.run_id: m for m in read_manifest(layout.root).runs} if layout.manifest.exists() else {}
    rebuilt = 0
    for r in runs:
        stored = layout.stored_result(r.run_id)
        if stored is None:
            continue
        manifest_runs[r.run_id].status = stored.status
        if not all(layout.part(t, r.run_id).exists() for t in TABLES):
            # Committed, but a crash or a full disk struck before its table rows were written: rebuild them
            # from the trace, so that no committed run is missing from the tables.
            node = (previous[r.run_id].node_id if r.run_id in previous else None) or ""
            write_parts(layout, spec.name, stored, r.config.model_dump(mode="json"), r.scenario.model_dump(mode="json"), node)
            rebuilt += 1
    return rebuilt


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


def run_batch(spec: BatchSpec, runs: list[RunSpec], layout: BatchLayout, pack_dir: str, evidence: list[str], cache_dir: str,
              address: str | None = None, retry_failed: bool = False, quiet: bool = False) -> dict[str, Any]:
    """Run the batch's pending runs, holding the results directory's lock (runner/lock.py) throughout: a second
    driver on the same directory fails at once, naming this one."""
    job_dir = job_working_dir()
    _refuse_paths_in_job(job_dir, layout.root, cache_dir)
    cluster_cache = wants_cluster_cache(address)
    with ResultsLock(layout.root, "madbench run") as lock:
        manifest_runs = _manifest_entries(runs)
        rebuilt = _recover_committed(spec, runs, layout, manifest_runs)
        todo = [r for r in runs if manifest_runs[r.run_id].status in (("pending", "failed") if retry_failed else ("pending",))]
        # The cache this batch really used, resolved: re-scoring and the estimate find it from the manifest.
        spec_json = spec.model_dump(mode="json") | {"cache_dir": str(Path(cache_dir).resolve())}
        write_manifest(layout.root, spec_json, list(manifest_runs.values()), "running")
        # One budget for the batch, across invocations: what earlier ones spent is in budget.json (runner/budget.py).
        record = read_budget(layout.root, spec.max_cost_usd)
        progress = Progress(len(todo), BatchLine(spec.max_cost_usd, record.spent_usd), enabled=not quiet)
        stats = {"runs": len(runs), "skipped": len(runs) - len(todo), "submitted": 0, "wall_s": 0.0, "parts_rebuilt": rebuilt}
        t0 = time.perf_counter()
        state = FINISHED
        stats["budget"] = summary(record.model_dump(), record.spent_usd)
        if todo and record.reached:  # stopped at this cap before: nothing more is spent until it is raised
            todo, state = [], BUDGET_STOP
        if todo:
            ray = init_ray(address)
            off_cluster = ray_client(address)  # the results are on this machine: the budget is written from here
            budget = start_budget(ray, layout.root, record, actor_writes=not off_cluster)
            progress.poll = lambda: {"spent_usd": budget.snapshot()["spent_usd"]}
            cache = start_cache(ray, cache_dir, cluster_cache)
            batches = spec.provider_batches
            collector, ready = start_collector(ray, layout.root, lock.holder, batches) if batches else (None, None)
            pool = ActorPool(ray, RunnerActor, (portable(pack_dir, job_dir), [portable(e, job_dir) for e in evidence], cache,
                                                str(layout.root), spec.name, budget, lock.holder,
                                                CollectorClient(collector) if collector else None),
                             min(spec.workers, len(todo)), spec.max_in_flight)
            if ready is not None:
                ray.get(ready)  # the collector has read its journal (it starts while the runner actors do)
            work = RunWork(pool, layout, manifest_runs, stats, retry_failed, spec_json, collector,
                           every_status=[lambda: budget.persist(layout.root)] if off_cluster else [])
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
                state = settled_state(state, manifest_runs)
                write_manifest(layout.root, spec_json, list(manifest_runs.values()), state)
                stats["budget"] = stop_budget(ray, budget, record.spent_usd, layout.root if off_cluster else None)
                stats["cache"] = stop_cache(ray, cache)
                if collector is not None:
                    stats["provider_batches"] = stop_collector(ray, collector) | journal_summary(layout.root)
        else:
            write_manifest(layout.root, spec_json, list(manifest_runs.values()), state)
        stats["state"] = state
        stats["tables"] = compact(layout)
        stats["wall_s"] = time.perf_counter() - t0
        stats["status"] = {s: sum(1 for m in manifest_runs.values() if m.status == s) for s in ("ok", "failed", "pending")}
        return stats
