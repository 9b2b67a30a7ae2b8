"""Running a batch on Ray: runner actors, backpressure, retries, progress, resume.

The driver expands the batch, skips runs whose result is already committed,
and feeds the rest to a small pool of async runner actors (each hosts one
gateway, one cache handle and the loaded pack, so litellm is imported once
per actor, not per run), keeping at most ``max_in_flight`` runs outstanding
with ``ray.wait``. A run's result file is its commit point; a killed batch
resumes from its traces with paid calls served from the cache.
"""

from __future__ import annotations

import errno
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from debate.config import DebateConfig
from madbench_data.market.pack import load_pack
from madbench_data.paths import PROJECT_ROOT
from madbench_data.scenario import Scenario
from madbench_gateway import Budget, Gateway, ResponseCache
from madbench_gateway.errors import BudgetExhausted
from madbench_gateway.secrets import redact
from runner.batch import BatchSpec, RunSpec
from runner.lock import ResultsLock
from runner.pipeline import run_debate
from runner.progress import Progress
from runner.store import TABLES, BatchLayout, compact, read_manifest, write_manifest, write_parts


class RunnerActor:
    """Hosts agents and the CRIT scorer for many runs (one gateway, one cache, one pack)."""

    def __init__(self, pack_dir: str, evidence: list[str], cache_dir: str, root: str, batch: str, max_cost_usd: float | None):
        import ray

        self.pack = load_pack(pack_dir, evidence)
        self.cache = ResponseCache(cache_dir)
        self.gateway = Gateway(cache=self.cache, budget=Budget(max_cost_usd))
        self.layout = BatchLayout(root)
        self.batch = batch
        self.node_id = ray.get_runtime_context().get_node_id()

    async def run(self, scenario: dict, config: dict, sample_index: int, retry_failed: bool) -> dict[str, Any]:
        import ray

        s, c = Scenario.model_validate(scenario), DebateConfig.model_validate(config)
        t0 = time.perf_counter()
        try:
            result = await run_debate(s, self.pack, c, self.gateway, self.layout, sample_index, where=f"scenario {s.id}",
                                      retry_failed=retry_failed)
        except BudgetExhausted as exc:
            return {"status": "budget", "error": str(exc), "node_id": self.node_id}
        except OSError:
            raise  # a full disk stops the batch (the driver checks errno)
        except ray.exceptions.RayActorError:
            raise  # an actor this run depends on (a limiter) was lost with its node: the driver requeues the run
        except Exception as exc:
            # Many exception types (ours included) do not survive Ray's pickling; a RuntimeError carrying the type,
            # message and traceback does, so the driver records the real reason with the failed run.
            raise RuntimeError(redact(f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=8)}")) from None
        write_parts(self.layout, self.batch, result, config, scenario, self.node_id)
        return {"status": result.status, "error": result.error, "run_id": result.run_id, "totals": result.totals,
                "node_id": self.node_id, "wall_s": time.perf_counter() - t0}


#: Seconds between manifest rewrites during a batch (what `madbench status` reads).
STATUS_INTERVAL_S = 2.0


def init_ray(address: str | None, num_cpus: int | None = None):
    import ray
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    address = address or os.environ.get("RAY_ADDRESS")
    if not ray.is_initialized():
        root = str(PROJECT_ROOT)
        env = {"env_vars": {"PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}}
        if address:
            ray.init(address=address, runtime_env=env, log_to_driver=False)
        else:
            ray.init(include_dashboard=False, num_cpus=num_cpus, runtime_env=env, log_to_driver=False, configure_logging=False)
    return ray


def _pick_node(ray, k: int, avoid: set[str]) -> str:
    """Actor k goes to alive node k mod N, so the runner's actors spread over a cluster even though they
    reserve no CPU. (A soft affinity let Ray pack them all on the head node.) Nodes that lost an actor are
    avoided while another is alive: Ray may still list a dead node as alive for a few seconds."""
    alive = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])
    nodes = [n for n in alive if n not in avoid] or alive
    return nodes[k % len(nodes)]


class ActorPool:
    """``n_workers`` actors of ``actor_class``, spread over the cluster's nodes; a lost actor is replaced."""

    def __init__(self, ray, actor_class: type, args: tuple, n_workers: int, max_concurrency: int):
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        self.ray, self._affinity = ray, NodeAffinitySchedulingStrategy
        self._cls = ray.remote(num_cpus=0, max_concurrency=max(1, max_concurrency))(actor_class)
        self._args = args
        self.node_of: dict[int, str] = {}
        self.lost_nodes: set[str] = set()
        self.replacements = 0
        self.actors = [self._start(k) for k in range(n_workers)]

    def _start(self, k: int):
        self.node_of[k] = _pick_node(self.ray, k, self.lost_nodes)
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

    def __init__(self, pool: ActorPool, spec: BatchSpec, layout: BatchLayout, manifest_runs: dict[str, dict],
                 todo: list[RunSpec], progress: Progress, stats: dict[str, Any], retry_failed: bool,
                 spec_json: dict[str, Any]):
        self.pool, self.spec, self.layout, self.manifest_runs = pool, spec, layout, manifest_runs
        self.spec_json = spec_json
        self.last_status = 0.0
        self.progress, self.stats, self.retry_failed = progress, stats, retry_failed
        self.queue = list(todo)
        self.in_flight: dict[Any, tuple[RunSpec, int, Any]] = {}  # ref → (run, actor index, actor handle)
        self.budget_hit = False
        self.sent = 0

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
            write_manifest(self.layout, self.spec_json, list(self.manifest_runs.values()), "running")

    def _submit(self) -> None:
        while self.queue and len(self.in_flight) < self.spec.max_in_flight and not self.budget_hit:
            r = self.queue.pop(0)
            m = self.manifest_runs[r.run_id]
            m["attempts"] += 1
            m["in_flight_since"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            k = self.sent % len(self.pool.actors)
            handle = self.pool.actors[k]
            ref = handle.run.remote(r.scenario.model_dump(mode="json"), r.config.model_dump(mode="json"), r.sample_index,
                                    self.retry_failed or m["attempts"] > 1)
            self.in_flight[ref] = (r, k, handle)
            self.stats["submitted"] += 1
            self.sent += 1

    def _settle(self, ref) -> None:
        ray = self.pool.ray
        r, k, handle = self.in_flight.pop(ref)
        m = self.manifest_runs[r.run_id]
        m.pop("in_flight_since", None)
        try:
            summary = ray.get(ref)
        except ray.exceptions.RayActorError as exc:
            # The actor (or its node) died: the run is not at fault. Replace the actor and requeue;
            # the run resumes from its trace with paid calls served from the cache.
            self.pool.replace(k, handle, exc)
            m["attempts"] -= 1
            self.queue.insert(0, r)
            return
        except ray.exceptions.RayError as exc:  # a bug in a run: that run failed, the batch goes on
            summary = self._failure(r, exc)
        if summary["status"] == "budget":
            self.budget_hit = True
            self.queue.insert(0, r)
            m["attempts"] -= 1
            return
        m["status"], m["error"], m["node_id"] = summary["status"], summary.get("error"), summary.get("node_id")
        if summary["status"] == "failed" and m["attempts"] <= self.spec.retries:
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


def _manifest_entries(runs: list[RunSpec]) -> dict[str, dict[str, Any]]:
    return {r.run_id: {"run_id": r.run_id, "scenario_id": r.scenario.id, "config": r.config.name,
                       "replicate": r.sample_index, "status": "pending", "attempts": 0} for r in runs}


def _recover_committed(spec: BatchSpec, runs: list[RunSpec], layout: BatchLayout, manifest_runs: dict[str, dict]) -> int:
    """Mark committed runs with their stored status; rebuild the table rows of any committed run that lacks them."""
    previous = {m["run_id"]: m for m in read_manifest(layout.root)["runs"]} if (layout.root / "manifest.json").exists() else {}
    rebuilt = 0
    for r in runs:
        stored = layout.stored_result(r.run_id)
        if stored is None:
            continue
        manifest_runs[r.run_id]["status"] = stored.status
        if not all(layout.part(t, r.run_id).exists() for t in TABLES):
            # Committed, but a crash or a full disk struck before its table rows were written: rebuild them
            # from the trace, so that no committed run is missing from the tables.
            node = previous.get(r.run_id, {}).get("node_id") or ""
            write_parts(layout, spec.name, stored, r.config.model_dump(mode="json"), r.scenario.model_dump(mode="json"), node)
            rebuilt += 1
    return rebuilt


def run_batch(spec: BatchSpec, runs: list[RunSpec], layout: BatchLayout, pack_dir: str, evidence: list[str], cache_dir: str,
              address: str | None = None, retry_failed: bool = False, quiet: bool = False) -> dict[str, Any]:
    """Run the batch's pending runs, holding the results directory's lock (runner/lock.py) throughout: a second
    driver on the same directory fails at once, naming this one."""
    with ResultsLock(layout.root, "madbench run"):
        manifest_runs = _manifest_entries(runs)
        rebuilt = _recover_committed(spec, runs, layout, manifest_runs)
        todo = [r for r in runs if manifest_runs[r.run_id]["status"] == "pending"
                or (retry_failed and manifest_runs[r.run_id]["status"] == "failed")]
        # The cache this batch really used, resolved: re-scoring and the estimate find it from the manifest.
        spec_json = spec.model_dump(mode="json") | {"cache_dir": str(Path(cache_dir).resolve())}
        write_manifest(layout, spec_json, list(manifest_runs.values()), "running")
        progress = Progress(len(todo), spec.max_cost_usd, enabled=not quiet)
        stats = {"runs": len(runs), "skipped": len(runs) - len(todo), "submitted": 0, "wall_s": 0.0, "parts_rebuilt": rebuilt}
        t0 = time.perf_counter()
        state = "finished"
        if todo:
            ray = init_ray(address)
            pool = ActorPool(ray, RunnerActor, (pack_dir, evidence, cache_dir, str(layout.root), spec.name, spec.max_cost_usd),
                             min(spec.workers, len(todo)), spec.max_in_flight)
            dispatch = Dispatch(pool, spec, layout, manifest_runs, todo, progress, stats, retry_failed, spec_json)
            try:
                state = dispatch.loop()
            except KeyboardInterrupt:
                state = "interrupted"
                print("\ninterrupted: committed runs are kept; run the same command again to resume", file=sys.stderr)
            finally:
                progress.close(len(dispatch.in_flight))
                for m in manifest_runs.values():
                    m.pop("in_flight_since", None)
                pool.kill_all()
                write_manifest(layout, spec_json, list(manifest_runs.values()), state)
        else:
            write_manifest(layout, spec_json, list(manifest_runs.values()), state)
        stats["state"] = state
        stats["tables"] = compact(layout)
        stats["wall_s"] = time.perf_counter() - t0
        stats["status"] = {s: sum(1 for m in manifest_runs.values() if m["status"] == s) for s in ("ok", "failed", "pending")}
        return stats
