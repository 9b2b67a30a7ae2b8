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
from typing import Any

from madbench_data.paths import PROJECT_ROOT
from runner.batch import BatchSpec, RunSpec
from runner.store import TABLES, BatchLayout, compact, read_manifest, write_manifest, write_parts


class RunnerActor:
    """Hosts agents and the CRIT scorer for many runs (one gateway, one cache, one pack)."""

    def __init__(self, pack_dir: str, evidence: list[str], cache_dir: str, root: str, batch: str, max_cost_usd: float | None):
        import ray

        from madbench_data.market.pack import load_pack
        from madbench_gateway import Budget, Gateway, ResponseCache
        self.pack = load_pack(pack_dir, evidence)
        self.cache = ResponseCache(cache_dir)
        self.gateway = Gateway(cache=self.cache, budget=Budget(max_cost_usd))
        self.layout = BatchLayout(root)
        self.batch = batch
        self.node_id = ray.get_runtime_context().get_node_id()

    async def run(self, scenario: dict, config: dict, sample_index: int, retry_failed: bool) -> dict[str, Any]:
        import ray

        from debate.config import DebateConfig
        from madbench_data.scenario import Scenario
        from madbench_gateway.errors import BudgetExhausted
        from runner.pipeline import run_debate
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
            import traceback
            raise RuntimeError(f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=8)}") from None
        write_parts(self.layout, self.batch, result, config, scenario, self.node_id)
        return {"status": result.status, "error": result.error, "run_id": result.run_id, "totals": result.totals,
                "node_id": self.node_id, "wall_s": time.perf_counter() - t0}


class Progress:
    def __init__(self, total: int, budget: float | None, stream=sys.stderr):
        self.total, self.budget, self.stream = total, budget, stream
        self.done = self.failed = self.calls = self.cached = self.tokens = 0
        self.cost = 0.0
        self.t0 = time.monotonic()
        self.last = 0.0

    def add(self, summary: dict[str, Any]) -> None:
        if summary["status"] == "ok":
            self.done += 1
        else:
            self.failed += 1
        t = summary.get("totals") or {}
        self.calls += t.get("calls", 0)
        self.cached += t.get("cached", 0)
        self.tokens += t.get("prompt_tokens", 0) + t.get("completion_tokens", 0)
        self.cost += t.get("cost_usd", 0.0) or 0.0

    def show(self, running: int, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last < 2.0:
            return
        self.last = now
        el = now - self.t0
        finished = self.done + self.failed
        eta = (self.total - finished) * el / finished if finished else float("nan")
        hit = self.cached / self.calls if self.calls else 0.0
        budget = f"/{self.budget:.2f}" if self.budget else ""
        bar = "#" * int(30 * finished / max(1, self.total))
        print(f"\r[{bar:<30}] {finished}/{self.total} done {self.done} failed {self.failed} running {running} | "
              f"{self.calls / el if el else 0:.1f} calls/s, cache {hit:.0%}, {self.tokens} tok, ${self.cost:.4f}{budget} | "
              f"ETA {eta:.0f} s   ", end="" if not force else "\n", file=self.stream, flush=True)


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


def run_batch(spec: BatchSpec, runs: list[RunSpec], layout: BatchLayout, pack_dir: str, evidence: list[str], cache_dir: str,
              address: str | None = None, retry_failed: bool = False, quiet: bool = False) -> dict[str, Any]:
    manifest_runs = {r.run_id: {"run_id": r.run_id, "scenario_id": r.scenario.id, "config": r.config.name,
                                "replicate": r.sample_index, "status": "pending", "attempts": 0} for r in runs}
    previous = {m["run_id"]: m for m in read_manifest(layout.root)["runs"]} if (layout.root / "manifest.json").exists() else {}
    rebuilt = 0
    for r in runs:
        stored = layout.stored_result(r.run_id)
        if stored is not None:
            manifest_runs[r.run_id]["status"] = stored.status
            if not all(layout.part(t, r.run_id).exists() for t in TABLES):
                # Committed, but a crash or a full disk struck before its table rows were written: rebuild them
                # from the trace, so that no committed run is missing from the tables.
                node = previous.get(r.run_id, {}).get("node_id") or ""
                write_parts(layout, spec.name, stored, r.config.model_dump(mode="json"), r.scenario.model_dump(mode="json"), node)
                rebuilt += 1
    todo = [r for r in runs if manifest_runs[r.run_id]["status"] == "pending"
            or (retry_failed and manifest_runs[r.run_id]["status"] == "failed")]
    spec_json = spec.model_dump(mode="json")
    write_manifest(layout, spec_json, list(manifest_runs.values()), "running")
    progress = Progress(len(todo), spec.max_cost_usd, stream=open(os.devnull, "w") if quiet else sys.stderr)
    stats = {"runs": len(runs), "skipped": len(runs) - len(todo), "submitted": 0, "wall_s": 0.0, "parts_rebuilt": rebuilt}
    t0 = time.perf_counter()
    if todo:
        ray = init_ray(address)
        n_workers = min(spec.workers, len(todo))
        actor_cls = ray.remote(num_cpus=0, max_concurrency=max(1, spec.max_in_flight))(RunnerActor)
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        node_of: dict[int, str] = {}
        lost_nodes: set[str] = set()

        def new_actor(k: int):
            node_of[k] = _pick_node(ray, k, lost_nodes)
            return actor_cls.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_of[k], soft=False)).remote(
                pack_dir, evidence, cache_dir, str(layout.root), spec.name, spec.max_cost_usd)

        actors = [new_actor(k) for k in range(n_workers)]
        actor_of: dict[Any, int] = {}
        sent_to: dict[Any, Any] = {}
        replacements = 0
        queue = list(todo)
        in_flight: dict[Any, RunSpec] = {}
        budget_hit = False
        state = "finished"
        try:
            i = 0
            while queue or in_flight:
                while queue and len(in_flight) < spec.max_in_flight and not budget_hit:
                    r = queue.pop(0)
                    m = manifest_runs[r.run_id]
                    m["attempts"] += 1
                    ref = actors[i % n_workers].run.remote(r.scenario.model_dump(mode="json"), r.config.model_dump(mode="json"),
                                                           r.sample_index, retry_failed or m["attempts"] > 1)
                    in_flight[ref] = r
                    actor_of[ref] = i % n_workers
                    sent_to[ref] = actors[i % n_workers]
                    stats["submitted"] += 1
                    i += 1
                ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=1.0)
                for ref in ready:
                    r = in_flight.pop(ref)
                    m = manifest_runs[r.run_id]
                    k, handle = actor_of.pop(ref), sent_to.pop(ref)
                    try:
                        summary = ray.get(ref)
                    except ray.exceptions.RayActorError as exc:
                        # The actor (or its node) died: the run is not at fault. Replace the actor and requeue;
                        # the run resumes from its trace with paid calls served from the cache.
                        if actors[k] is handle:  # the first of that actor's runs to report: replace it once
                            replacements += 1
                            lost_nodes.add(node_of[k])
                            if replacements > 3 * n_workers:
                                raise RuntimeError(f"runner actors keep dying ({replacements} replacements); last error: "
                                                   f"{str(exc).splitlines()[0][:500]}") from None
                            actors[k] = new_actor(k)
                        m["attempts"] -= 1
                        queue.insert(0, r)
                        continue
                    except ray.exceptions.RayError as exc:  # a bug in a run: that run failed, the batch goes on
                        cause = getattr(exc, "cause", None)
                        if isinstance(cause, OSError) and cause.errno == errno.ENOSPC:
                            # Not the run's fault, and every other run would hit it too: stop the batch, loudly.
                            raise OSError(errno.ENOSPC, f"No space left on device while run {r.run_id} wrote its "
                                          f"results ({cause.filename or layout.root})") from None
                        reason = str(cause) if cause is not None else str(exc)
                        summary = {"status": "failed", "error": reason.splitlines()[0][:500], "node_id": None}
                    if summary["status"] == "budget":
                        budget_hit = True
                        queue.insert(0, r)
                        m["attempts"] -= 1
                        continue
                    m["status"], m["error"], m["node_id"] = summary["status"], summary.get("error"), summary.get("node_id")
                    if summary["status"] == "failed" and m["attempts"] <= spec.retries:
                        queue.append(r)  # retried with its reason kept in the trace
                        continue
                    progress.add(summary)
                progress.show(len(in_flight))
                if budget_hit and not in_flight:
                    state = "stopped: budget reached"
                    break
        except KeyboardInterrupt:
            state = "interrupted"
            print("\ninterrupted: committed runs are kept; run the same command again to resume", file=sys.stderr)
        finally:
            progress.show(len(in_flight), force=True)
            for a in actors:
                ray.kill(a)
            write_manifest(layout, spec_json, list(manifest_runs.values()), state)
    else:
        write_manifest(layout, spec_json, list(manifest_runs.values()), "finished")
    stats["tables"] = compact(layout)
    stats["wall_s"] = time.perf_counter() - t0
    stats["status"] = {s: sum(1 for m in manifest_runs.values() if m["status"] == s) for s in ("ok", "failed", "pending")}
    return stats

