"""Running a batch on Ray: runner actors, backpressure, retries, progress, resume.

The driver expands the batch, skips runs whose result is already committed,
and feeds the rest to a small pool of async runner actors (each hosts one
gateway, one cache handle and the loaded pack, so litellm is imported once
per actor, not per run), keeping at most ``max_in_flight`` runs outstanding
with ``ray.wait``. A run's result file is its commit point; a killed batch
resumes from its traces with paid calls served from the cache.

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
from madbench.runner.lock import ResultsLock, WriterGuard
from madbench.runner.pipeline import run_debate
from madbench.runner.progress import Progress
from madbench.runner.provider_batches import CollectorClient, journal_summary, start_collector, stop_collector
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
        if collector is not None:
            self.gateway.providers.default.warm()  # litellm now: a run slow to its first call would miss phase 1's batch
        self.batch = batch

    async def run(self, scenario: dict, config: dict, sample_index: int, retry_failed: bool, run_id: str,
                  trace: bytes | None = None) -> dict[str, Any]:
        """One run; ``trace``: the results directory's trace of it, which a staged run continues."""
        import ray

        s, c = Scenario.model_validate(scenario), DebateConfig.model_validate(config)
        t0 = time.perf_counter()
        if self.staged:
            prepare(self.layout, run_id, trace)
        # This run's calls tell the provider-batch collector whose they are (each actor call is its own asyncio task,
        # with its own copy of the context).
        current_party.set(run_id)
        try:
            result = await run_debate(s, self.pack, c, self.gateway, self.layout, sample_index, where=f"scenario {s.id}",
                                      retry_failed=retry_failed)
        except BudgetExhausted as exc:
            return {"status": "budget", "error": str(exc), "node_id": self.node_id, "staged": self.staged}
        except OSError:
            raise  # a full disk stops the batch (the driver checks errno)
        except ray.exceptions.RayActorError:
            raise  # an actor this run depends on (a limiter) was lost with its node: the driver requeues the run
        except Exception as exc:
            # Many exception types (ours included) do not survive Ray's pickling; a RuntimeError carrying the type,
            # message and traceback does, so the driver records the real reason with the failed run.
            raise RuntimeError(redact(str(exc) if isinstance(exc, InputError) else  # bad input: its one line says it all
                                      f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=8)}")) from None
        self.guard()
        write_parts(self.layout, self.batch, result, config, scenario, self.node_id)
        out = {"status": result.status, "error": result.error, "run_id": result.run_id, "totals": result.totals,
               "node_id": self.node_id, "wall_s": time.perf_counter() - t0, "staged": self.staged}
        if self.staged:
            out["artifacts"] = collect(self.layout, result.run_id)
        return out


#: Seconds between manifest rewrites during a batch (what `madbench status` reads).
STATUS_INTERVAL_S = 2.0


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


#: What a pool's actor reserves: no CPU. A runner actor mostly waits on providers, so reserving a CPU would cap the
#: actors of a node at its CPU count for nothing, and leave them pending on a local Ray with fewer CPUs than
#: ``workers``. Hence the autoscaler sees no demand from them: cluster.yaml sizes its workers itself.
ACTOR_NUM_CPUS = 0


def _pick_node(ray, load: Counter, avoid: set[str]) -> str:
    """The alive node that hosts fewest of the pool's actors (ties in node id order): the actors spread over a
    cluster even though they reserve no CPU (a soft affinity let Ray pack them all on the head node), round-robin
    as the pool starts, and a replacement goes to the least busy live node, one that joined meanwhile included.
    Nodes that lost an actor are avoided while another is alive: Ray may still list a dead node as alive for a
    few seconds."""
    alive = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])
    nodes = [n for n in alive if n not in avoid] or alive
    return min(nodes, key=lambda n: (load[n], nodes.index(n)))


class ActorPool:
    """``n_workers`` actors of ``actor_class``, spread over the cluster's nodes; a lost actor is replaced."""

    def __init__(self, ray, actor_class: type, args: tuple, n_workers: int, max_concurrency: int):
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        self.ray, self._affinity = ray, NodeAffinitySchedulingStrategy
        self._cls = ray.remote(num_cpus=ACTOR_NUM_CPUS, max_concurrency=max(1, max_concurrency))(actor_class)
        self._args = args
        self.node_of: dict[int, str] = {}
        self.lost_nodes: set[str] = set()
        self.replacements = 0
        self.actors = [self._start(k) for k in range(n_workers)]

    def _start(self, k: int):
        self.node_of[k] = _pick_node(self.ray, Counter(n for j, n in self.node_of.items() if j != k), self.lost_nodes)
        strategy = self._affinity(node_id=self.node_of[k], soft=False)
        return self._cls.options(scheduling_strategy=strategy).remote(*self._args)

    def replace(self, k: int, handle, exc: Exception) -> None:
        """Actor k (``handle``) died; the first of its runs to report replaces it, once."""
        if self.actors[k] is not handle:
            return
        self.replacements += 1
        self.lost_nodes.add(self.node_of[k])
        if self.replacements > 3 * len(self.actors):
            raise RuntimeError(f"runner actors keep dying ({self.replacements} replacements); last error: "
                               f"{str(exc).splitlines()[0][:500]}") from None
        self.actors[k] = self._start(k)

    def kill_all(self) -> None:
        for a in self.actors:
            self.ray.kill(a)


class Dispatch:
    """Feeds runs to the actors with at most ``max_in_flight`` outstanding, and settles each as it returns."""

    def __init__(self, pool: ActorPool, spec: BatchSpec, layout: BatchLayout, manifest_runs: dict[str, ManifestRun],
                 todo: list[RunSpec], progress: Progress, stats: dict[str, Any], retry_failed: bool,
                 spec_json: dict[str, Any], collector=None, every_status: list[Callable[[], Any]] | None = None):
        self.pool, self.spec, self.layout, self.manifest_runs = pool, spec, layout, manifest_runs
        self.collector = collector  # provider batch mode: told which runs are in flight (runner/provider_batches.py)
        self.spec_json = spec_json
        self.last_status = 0.0
        self.progress, self.stats, self.retry_failed = progress, stats, retry_failed
        self.queue = list(todo)
        self.in_flight: dict[Any, tuple[RunSpec, int, Any]] = {}  # ref → (run, actor index, actor handle)
        self.budget_hit = False
        self.sent = 0
        self.staged: dict[int, bool] = {}  # actor index → whether it stages its runs (unknown until it answers)
        self.committed: Counter = Counter()  # run id → ok results settled: every run is committed exactly once
        #: Called with the manifest every few seconds (a Ray client's driver writes its budget then).
        self.every_status = every_status or []
        stats.setdefault("committed_twice", [])

    def loop(self) -> str:
        ray = self.pool.ray
        while self.queue or self.in_flight:
            self._submit()
            ready, _ = ray.wait(list(self.in_flight), num_returns=1, timeout=1.0)
            for ref in ready:
                self._settle(ref)
            self.progress.show(len(self.in_flight))
            self._publish_status()
            if self.budget_hit and not self.in_flight:
                return "stopped: budget reached"
        return "finished"

    def _publish_status(self) -> None:
        """Rewrite the manifest every few seconds, so that `madbench status` sees the runs in flight."""
        now = time.monotonic()
        if now - self.last_status >= STATUS_INTERVAL_S:
            self.last_status = now
            write_manifest(self.layout.root, self.spec_json, list(self.manifest_runs.values()), "running")
            for hook in self.every_status:
                hook()

    def _submit(self) -> None:
        while self.queue and len(self.in_flight) < self.spec.max_in_flight and not self.budget_hit:
            r = self.queue.pop(0)
            m = self.manifest_runs[r.run_id]
            m.attempts += 1
            m.in_flight_since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            k = self.sent % len(self.pool.actors)
            handle = self.pool.actors[k]
            if self.collector is not None:
                self.collector.expect.remote(r.run_id)
            # An actor that stages its runs continues the results directory's trace of this one, sent along with it.
            trace = head_trace(self.layout, r.run_id) if self.staged.get(k, True) else None
            ref = handle.run.remote(r.scenario.model_dump(mode="json"), r.config.model_dump(mode="json"), r.sample_index,
                                    self.retry_failed or m.attempts > 1, r.run_id, trace)
            self.in_flight[ref] = (r, k, handle)
            self.stats["submitted"] += 1
            self.sent += 1

    def _settle(self, ref) -> None:
        ray = self.pool.ray
        r, k, handle = self.in_flight.pop(ref)
        if self.collector is not None:
            self.collector.finished.remote(r.run_id)
        m = self.manifest_runs[r.run_id]
        m.in_flight_since = None
        try:
            summary = ray.get(ref)
        except ray.exceptions.RayActorError as exc:
            # The actor (or its node) died: the run is not at fault. Replace the actor and requeue;
            # the run resumes from its trace with paid calls served from the cache.
            self.pool.replace(k, handle, exc)
            self.staged.pop(k, None)
            m.attempts -= 1
            self.queue.insert(0, r)
            return
        except ray.exceptions.RayError as exc:  # a bug in a run: that run failed, the batch goes on
            summary = self._failure(r, exc)
        if "staged" in summary and self.pool.actors[k] is handle:
            self.staged[k] = summary["staged"]
        if "artifacts" in summary:  # a run from a node that cannot see the results directory: committed here
            commit(self.layout, r.run_id, summary.pop("artifacts"))
        if summary["status"] == "budget":
            self.budget_hit = True
            self.queue.insert(0, r)
            m.attempts -= 1
            return
        m.status, m.error, m.node_id = summary["status"], summary.get("error"), summary.get("node_id")
        if summary["status"] == "ok":
            self.committed[r.run_id] += 1
            if self.committed[r.run_id] == 2:
                self.stats["committed_twice"].append(r.run_id)
        if summary["status"] == "failed" and m.attempts <= self.spec.retries:
            self.progress.add_spend(summary)  # the failed attempt's calls were paid
            self.queue.append(r)  # retried with its reason kept in the trace
            return
        self.progress.add(summary)

    def _failure(self, r: RunSpec, exc: Exception) -> dict[str, Any]:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, OSError) and cause.errno == errno.ENOSPC:
            # Not the run's fault, and every other run would hit it too: stop the batch, loudly.
            raise OSError(errno.ENOSPC, f"No space left on device while run {r.run_id} wrote its "
                          f"results ({cause.filename or self.layout.root})") from None
        reason = redact(str(cause) if cause is not None else str(exc))
        return {"status": "failed", "error": reason.splitlines()[0][:500], "node_id": None}


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
        progress = Progress(len(todo), spec.max_cost_usd, enabled=not quiet, spent_before=record.spent_usd)
        stats = {"runs": len(runs), "skipped": len(runs) - len(todo), "submitted": 0, "wall_s": 0.0, "parts_rebuilt": rebuilt}
        t0 = time.perf_counter()
        state = "finished"
        stats["budget"] = summary(record.model_dump(), record.spent_usd)
        if todo and record.reached:  # stopped at this cap before: nothing more is spent until it is raised
            todo, state = [], "stopped: budget reached"
        if todo:
            ray = init_ray(address)
            off_cluster = ray_client(address)  # the results are on this machine: the budget is written from here
            budget = start_budget(ray, layout.root, record, actor_writes=not off_cluster)
            progress.spent_source = lambda: budget.snapshot()["spent_usd"]
            cache = start_cache(ray, cache_dir, cluster_cache)
            batches = spec.provider_batches
            collector, ready = start_collector(ray, layout.root, lock.holder, batches) if batches else (None, None)
            pool = ActorPool(ray, RunnerActor, (portable(pack_dir, job_dir), [portable(e, job_dir) for e in evidence], cache,
                                                str(layout.root), spec.name, budget, lock.holder,
                                                CollectorClient(collector) if collector else None),
                             min(spec.workers, len(todo)), spec.max_in_flight)
            if ready is not None:
                ray.get(ready)  # the collector has read its journal (it starts while the runner actors do)
            dispatch = Dispatch(pool, spec, layout, manifest_runs, todo, progress, stats, retry_failed, spec_json,
                                collector, every_status=[lambda: budget.persist(layout.root)] if off_cluster else [])
            try:
                state = dispatch.loop()
            except KeyboardInterrupt:
                state = "interrupted"
                print("\ninterrupted: committed runs are kept; run the same command again to resume", file=sys.stderr)
            except Exception as exc:  # the batch stopped on an error: the manifest says so, never `finished`
                state = "stopped: " + redact(f"{type(exc).__name__}: {exc}".splitlines()[0])[:300]
                raise
            finally:
                progress.close(len(dispatch.in_flight))
                for m in manifest_runs.values():
                    m.in_flight_since = None
                pool.kill_all()
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
