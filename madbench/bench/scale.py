"""`madbench bench scale`: a batch on 3 raylets of this machine, a worker lost mid-batch and a new one joined.

The cluster (madbench/bench/local_cluster.py) is a head and two workers, each worker in a mount namespace of its
own where the head's results and cache directories are empty (where the machine allows it: then every run of
a worker is staged there and committed by the driver, and its calls go through the cluster's cache). The
driver is this process, joined to the head; the simulated provider (madbench/sim) answers every call with the
rule-based analysts (``send_context``). When a quarter of the runs are committed a third worker joins, and
once it is up the first worker's raylet is killed (SIGKILL); its actor is replaced on the least busy live
node, the new one.

Reported: every run committed exactly once (result files, table rows, the driver's count of settled results,
traces that hold more than one attempt), throughput overall and per node, the peak memory of the head's Ray
processes, of the driver and of the actors (sampled twice a second), and what the cluster's cache served to
the nodes that did not own it. A benchmark measures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import threading
import time
from pathlib import Path

import psutil

from madbench.bench.local_cluster import LocalCluster, can_hide
from madbench.bench.pack_option import add_pack_only
from madbench.data.errors import InputError
from madbench.data.market.pack import load_pack, resolve_pack_dir
from madbench.data.paths import PROJECT_ROOT
from madbench.data.scenario import load_scenarios
from madbench.gateway.models import ModelSpec, RateLimits
from madbench.results import BatchDirs, ResultsDir
from madbench.runner.api_records import BatchOutcome
from madbench.runner.batch import BatchSpec, expand, resolve_configs, resolve_scenarios
from madbench.runner.cli.common import number
from madbench.runner.execute import init_ray, run_batch
from madbench.runner.store import BatchLayout
from madbench.sim.provider import SimConfig, SimProvider

SCENARIOS = PROJECT_ROOT / "configs" / "scenarios" / "market-35.yaml"
#: One agent, no debate round, the rule-based CRIT on the provider: 2 calls a run (sized for a 2-core machine).
CONFIG = PROJECT_ROOT / "configs" / "debate" / "single-causal.yaml"
ACTOR_TITLES = ("ray::RunnerActor", "ray::CacheActor", "ray::BudgetActor")


class MemorySampler:
    """Peak RSS, twice a second, of the head's Ray processes (summed), this driver, and each actor process."""

    def __init__(self, cluster: LocalCluster):
        self.cluster = cluster
        self.head_mb = self.driver_mb = self.actor_mb = self.actors_total_mb = 0.0
        self._ours: dict[int, bool] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _is_ours(self, p: psutil.Process) -> bool:
        """An actor process of this cluster: a descendant of one of its raylets (other clusters may run here too)."""
        if p.pid not in self._ours:
            self._ours[p.pid] = any(self.cluster.dir in " ".join(a.cmdline()) for a in p.parents())
        return self._ours[p.pid]

    def _is_head(self, args: list[str]) -> bool:
        """A Ray process of the head raylet: one of its arguments names the head's temp dir."""
        mark = f"{self.cluster.dir}/h"
        return any(a.endswith(mark) or f"{mark}/" in a for a in args)

    def sample(self) -> None:
        head = actors = 0.0
        for p in psutil.process_iter(["cmdline", "memory_info"]):
            try:
                args, rss = p.info["cmdline"] or [], p.info["memory_info"].rss / 2**20
                if p.pid == os.getpid():
                    self.driver_mb = max(self.driver_mb, rss)
                elif " ".join(args).startswith(ACTOR_TITLES) and self._is_ours(p):
                    actors += rss
                    self.actor_mb = max(self.actor_mb, rss)
                elif self._is_head(args):
                    head += rss
            except (psutil.Error, AttributeError):
                continue
        self.head_mb, self.actors_total_mb = max(self.head_mb, head), max(self.actors_total_mb, actors)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(0.5)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def figures(self) -> dict:
        return {"head_ray_processes_peak_mb": round(self.head_mb), "driver_peak_mb": round(self.driver_mb),
                "actor_peak_mb": round(self.actor_mb), "actors_total_peak_mb": round(self.actors_total_mb)}


def committed(root: Path) -> int:
    return len(BatchDirs(root).result_files())


def lose_and_join(cluster: LocalCluster, root: Path, at: int, hide: list[Path], events: dict, done: threading.Event) -> None:
    """When ``at`` runs are committed: a new worker (w3) joins; once it is up, w1's raylet is killed (unless the
    batch is ``done`` by then)."""
    t0 = time.monotonic()
    while committed(root) < at:
        if done.wait(0.2):
            return
    events["join_at_s"], events["committed_at_join"] = round(time.monotonic() - t0, 1), committed(root)
    cluster.add_worker("w3", hide=hide)
    events["nodes"].update(cluster.wait_for_nodes(4))
    if done.is_set():
        return
    cluster.kill_worker("w1")
    events["kill_at_s"], events["committed_at_kill"] = round(time.monotonic() - t0, 1), committed(root)
    events["killed_at"] = time.time()


def _runs(n: int, url: str, pack_dir: str, in_flight: int):
    per = len(load_scenarios(SCENARIOS))
    model = ModelSpec(model="openai/madbench-sim", api_base=url, send_context=True, limits=RateLimits(max_concurrency=64))
    spec = BatchSpec(name="scale", scenarios={"file": str(SCENARIOS)}, configs=[str(CONFIG)], model=model,
                     replicates=max(1, math.ceil(n / per)), max_in_flight=in_flight, workers=3, retries=1)
    pack = load_pack(pack_dir)
    runs = expand(spec, resolve_scenarios(spec, PROJECT_ROOT, pack, "bench"), resolve_configs(spec, PROJECT_ROOT, "bench"))
    runs.sort(key=lambda r: (r.sample_index, r.scenario.id))
    return spec, runs[:n]


def per_node(root: Path, events: dict, t0: float, wall: float) -> dict:
    """Runs committed per node (result file times), and each node's rate from its first commit to the end of the
    batch, or to its loss."""
    table = ResultsDir(root).runs
    when = {r: BatchDirs(root).result_path(r).stat().st_mtime - t0 for r in table.run_id}
    names = {node: name for name, node in events["nodes"].items()}
    out = {}
    for node, group in table.groupby("node_id"):
        name = names.get(node, node[:8])
        times = sorted(when[r] for r in group.run_id)
        end = events["killed_at"] - t0 if name == "w1" and "killed_at" in events else wall
        out[name] = {"runs": len(group), "first_s": round(times[0], 1), "last_s": round(times[-1], 1),
                     "runs_per_min": round(len(group) / (end - times[0]) * 60, 1) if end > times[0] else None}
    return out


def integrity(root: Path, n: int, stats: BatchOutcome) -> dict:
    """Every run committed exactly once: a result file each, one table row each, no result settled twice."""
    table = ResultsDir(root).runs
    attempts = {p.stem: sum(json.loads(line)["event"] == "run_start" for line in p.read_text().splitlines())
                for p in BatchDirs(root).traces.glob("*.jsonl")}
    return {"runs": n, "result_files": committed(root), "table_rows": len(table), "distinct_run_ids": int(table.run_id.nunique()),
            "ok": int((table.status == "ok").sum()), "settled_twice": len(stats.committed_twice),
            "traces_with_more_than_one_attempt": sum(1 for a in attempts.values() if a > 1)}


def bench_scale(runs: int = 1000, pack: str | None = None, latency_median: float = 0.05, in_flight: int = 12) -> dict:
    pack_dir = str(resolve_pack_dir(pack))
    with tempfile.TemporaryDirectory(prefix="mbscale") as tmp_dir, LocalCluster(cpus=1) as cluster:
        tmp = Path(tmp_dir)
        hide = [tmp / "results", tmp / "cache"] if can_hide() else []
        for d in hide:
            d.mkdir()
        cluster.start_head()
        for name in ("w1", "w2"):
            cluster.add_worker(name, hide=hide)
        events = {"nodes": cluster.wait_for_nodes(3)}
        ray = init_ray(cluster.address)
        root = tmp / "results" / "scale"
        try:
            with SimProvider(SimConfig(latency_median_s=latency_median, seed=7)) as sim, MemorySampler(cluster) as memory:
                spec, batch = _runs(runs, sim.url, pack_dir, in_flight)
                done = threading.Event()
                chaos = threading.Thread(target=lose_and_join, daemon=True,
                                         args=(cluster, root, max(1, len(batch) // 4), hide, events, done))
                chaos.start()
                t0 = time.time()
                stats = run_batch(spec, batch, BatchLayout(root), pack_dir, [], str(tmp / "cache"), cluster.address, quiet=True)
                wall = time.time() - t0
                done.set()
                chaos.join(timeout=120)
                requests = sim.stats.requests
            out = {"config": "single-causal, rounds 0 (2 calls a run)", "workers_see_results": not hide,
                   "nodes": sorted(events["nodes"]), "wall_s": round(wall, 1), "runs_per_min": round(len(batch) / wall * 60, 1),
                   "http_requests": requests,
                   "lost_and_joined": {k: v for k, v in events.items() if k not in ("nodes", "killed_at")},
                   "committed_exactly_once": integrity(root, len(batch), stats),
                   "per_node": per_node(root, events, t0, wall), "memory": memory.figures(), "cluster_cache": stats.cache}
        finally:
            ray.shutdown()
    by_node = (out["cluster_cache"] or {}).get("by_node", {})
    names = {node: name for name, node in events["nodes"].items()}
    out["cluster_cache"] = {names.get(k, k[:8]): v for k, v in by_node.items()}
    return out


EXAMPLE = "madbench bench scale --runs 200"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=number(int, le=1_000_000), default=1000,
                        help="single-agent runs on 3 raylets (default 1000)")
    add_pack_only(parser)


def main(args: argparse.Namespace) -> int:
    if args.runs < 1:
        raise InputError("--runs", f"must be ≥ 1, got {args.runs}", "give a positive count")
    print(json.dumps(bench_scale(args.runs, args.pack), indent=1))
    return 0
