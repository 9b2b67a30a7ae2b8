"""`madbench bench cluster-cache`: what a cache hit costs through the cluster, against a hit on the local disk.

A real 2-node cluster on this machine (madbench/bench/local_cluster.py). The head's cache (owned by the cluster's
cache actor, runner/cache_actor.py) holds ``n`` answers; a probe actor on the worker node, which cannot see the
head's cache directory (its own mount namespace, where the machine allows one; else a copy directory of its
own), asks the gateway for each of them three times:

* through the cluster: its node-local copy misses, the cache actor serves the entry, the copy keeps it;
* again: now a hit in its node-local copy;
* on a plain local disk cache holding the same answers: the reference, a disk hit as on one machine.

Latencies are of ``Gateway.complete`` (a hit: key, lookup, validation), per call, p50 and p95. The cache
actor's own count says how many hits it served to the worker node.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from madbench.bench.local_cluster import LocalCluster, can_hide
from madbench.data.errors import InputError
from madbench.gateway import LLMRequest, Message, ModelSpec, ResponseCache
from madbench.runner.cache_actor import NODE_DIR_ENV, CachePlan, start_cache, stop_cache
from madbench.runner.cli.common import number
from madbench.runner.execute import init_ray
from madbench.runner.wiring import build_gateway

#: Never called: every request is answered from a cache.
SPEC = ModelSpec(model="openai/madbench-bench", api_base="http://127.0.0.1:9/v1")


def requests(n: int) -> list[LLMRequest]:
    return [LLMRequest(model=SPEC.model, messages=[Message(role="user", content=f"question {i}: " + "context " * 300)],
                       max_tokens=256) for i in range(n)]


def answer_body(i: int) -> dict:
    content = '{"weights": {"AAA": 0.5, "BBB": 0.5}, "rationale": "' + f"answer {i} " * 150 + '"}'
    return {"response": {"content": content, "model_used": SPEC.model, "is_llm": True, "prompt_tokens": 700,
                         "completion_tokens": 400, "cost_usd": 0.0, "weight_policy": "strict"}}


def fill(cache: ResponseCache, n: int) -> None:
    gateway = build_gateway()
    for i, req in enumerate(requests(n)):
        cache.put(gateway.cache_key(req, SPEC), SPEC.model, answer_body(i))


class Probe:
    """On the worker node: gateway hits through the cluster's cache, then from the node's copy, then a local disk."""

    def __init__(self, plan: CachePlan, local_dir: str, n: int):
        import ray
        self.node = ray.get_runtime_context().get_node_id()
        self.cluster = build_gateway(cache=plan.open(self.node, ray.get_runtime_context().get_actor_id()))
        self.local = ResponseCache(Path(local_dir))
        fill(self.local, n)
        self.n = n

    async def measure(self) -> dict:
        out = {"node": self.node}
        for name, gateway in (("through_cluster", self.cluster), ("node_copy", self.cluster),
                              ("local_disk", build_gateway(cache=self.local))):
            times = []
            for req in requests(self.n):
                t = time.perf_counter()
                c = await gateway.complete(req, SPEC)
                times.append((time.perf_counter() - t) * 1e3)
                if not c.cached:
                    raise RuntimeError(f"{name}: a request was not a cache hit")
            out[name] = times
        return out


def _summary(times: list[float]) -> dict:
    ordered = sorted(times)
    return {"p50_ms": round(statistics.median(ordered), 3), "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))], 3)}


def bench_cluster_cache(n: int = 500) -> dict:
    hide = can_hide()
    with tempfile.TemporaryDirectory(prefix="mbcc") as tmp_dir, LocalCluster() as cluster:
        tmp = Path(tmp_dir)
        head_cache = tmp / "cache"
        head_cache.mkdir()
        cluster.start_head()
        env = {} if hide else {NODE_DIR_ENV: str(tmp / "worker-copy")}
        cluster.add_worker("w", hide=[head_cache] if hide else [], env=env)
        nodes = cluster.wait_for_nodes(2)
        ray = init_ray(cluster.address)
        try:
            plan = start_cache(ray, head_cache, cluster=True)
            fill(ResponseCache(head_cache), n)
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
            probe = ray.remote(num_cpus=0)(Probe).options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=nodes["w"], soft=False)).remote(
                plan, str(tmp / "worker-local"), n)
            times = ray.get(probe.measure.remote())
            stats = stop_cache(ray, plan)
            assert stats is not None  # start_cache(cluster=True) started the actor stop_cache reads
        finally:
            ray.shutdown()
    served = stats["by_node"].get(nodes["w"], {})
    return {"entries": n, "worker_isolation": "own mount namespace" if hide else "own copy directory",
            "hit_through_cluster": _summary(times["through_cluster"]), "hit_node_copy": _summary(times["node_copy"]),
            "hit_local_disk": _summary(times["local_disk"]), "hits_served_to_worker": served.get("hits", 0),
            "misses_served_to_worker": served.get("misses", 0), "ran_on": "worker" if times["node"] == nodes["w"] else "?"}


EXAMPLE = "madbench bench cluster-cache --runs 100"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=number(int, le=1_000_000), default=500, help="cached answers asked for (default 500)")


def main(args: argparse.Namespace) -> int:
    if args.runs < 1:
        raise InputError("--runs", f"must be ≥ 1, got {args.runs}", "give a positive count")
    print(json.dumps(bench_cluster_cache(args.runs), indent=1))
    return 0
