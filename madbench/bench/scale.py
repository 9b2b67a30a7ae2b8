"""`madbench bench scale`: what a batch costs madbench itself as it grows, on 3 raylets of this machine.

The cluster (madbench/bench/local_cluster.py) is a head and two workers, each worker in a mount namespace of its own
where the head's results and cache directories are empty (where the machine allows it: then every run of a worker
is staged there and committed by the driver). The driver is this process, joined to the head. The runs are
single-agent rule-based debates (``rules/auto``: no model latency, so every second is madbench's own).

Measured: the time from Ray ready to the first commit (expansion, manifest, actors' start), runs per second over each
tenth of the batch (from the commit points' times), the driver's CPU seconds and peak memory per run, the bytes on
disk per run (row logs at their peak and the tables, traces apart), the final compaction's time, a second invocation
with nothing left to do, and ``open_results(...).runs``. ``--lose-node``: when a quarter of the runs are committed a
third worker joins and the first worker's raylet is killed (SIGKILL), as the cluster benchmark of a lost node.
``extrapolate`` takes two such measurements to 100,000 runs by their growth (a power law through the two points),
and says which resource runs out first on a laptop and on a 10-node cluster. A benchmark measures; it asserts
nothing.
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
import pyarrow.parquet as pq

from madbench.bench.local_cluster import LocalCluster, can_hide
from madbench.bench.pack_option import add_pack_only
from madbench.data.errors import InputError
from madbench.data.market.pack import load_pack, resolve_pack_dir
from madbench.data.paths import PROJECT_ROOT
from madbench.data.scenario import load_scenarios
from madbench.debate.trace import read_trace
from madbench.results import TABLES, BatchDirs, ManifestRun, ResultsDir, run_files, write_manifest
from madbench.results.rowlog import Entry, RowLog
from madbench.runner.api import open_results
from madbench.runner.api_records import BatchOutcome
from madbench.runner.batch import MAX_RUNS, MAX_RUNS_CEILING, BatchSpec, expand, resolve_configs, resolve_scenarios
from madbench.runner.cli.common import number
from madbench.runner.execute import init_ray, run_batch
from madbench.runner.store import BatchLayout, compact

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
    return sum(1 for _ in os.scandir(BatchDirs(root).commits)) if BatchDirs(root).commits.is_dir() else 0


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else 0


class DiskSampler:
    """Peak bytes of the row logs (``parts/``) while the batch runs, once a second: what the rows cost before the
    final compaction folds them into the tables."""

    def __init__(self, root: Path):
        self.root, self.peak = root, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(1.0):
            self.peak = max(self.peak, folder_bytes(BatchDirs(self.root).parts_dir))

    def __enter__(self) -> DiskSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


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


def _runs(n: int, pack_dir: str, in_flight: int) -> tuple[BatchSpec, list]:
    per = len(load_scenarios(SCENARIOS))
    spec = BatchSpec(name="scale", scenarios={"file": str(SCENARIOS)}, configs=[str(CONFIG)], model="rules/auto",
                     replicates=max(1, math.ceil(n / per)), max_in_flight=in_flight, workers=3, retries=1)
    pack = load_pack(pack_dir)
    runs = expand(spec, resolve_scenarios(spec, PROJECT_ROOT, pack, "bench"), resolve_configs(spec, PROJECT_ROOT, "bench"),
                  max_runs=max(n, MAX_RUNS))
    runs.sort(key=lambda r: (r.sample_index, r.scenario.id))
    return spec, runs[:n]


def tenths(times: list[float]) -> list[float | None]:
    """Runs per second over each tenth of the batch: a tenth of the runs over the time between the last commit before
    it and its own last commit (commit points' times, sorted)."""
    n = len(times)
    out: list[float | None] = []
    for k in range(10):
        lo, hi = k * n // 10, (k + 1) * n // 10
        if hi <= lo:
            out.append(None)
            continue
        start = times[lo - 1] if lo else times[0]
        span = times[hi - 1] - start
        out.append(round((hi - lo - (0 if lo else 1)) / span, 2) if span > 0 else None)
    return out


def disk(root: Path, n: int) -> dict:
    dirs = BatchDirs(root)
    tables = sum(dirs.table(t).stat().st_size for t in TABLES if dirs.table(t).exists())
    return {"tables_bytes_per_run": round(tables / n), "parts_bytes_after_compaction": folder_bytes(dirs.parts_dir),
            "traces_bytes_per_run": round(folder_bytes(dirs.traces) / n),
            "commit_points_bytes_per_run": round(folder_bytes(dirs.commits) / n),
            "manifest_bytes_per_run": round(dirs.manifest.stat().st_size / n, 1),
            "files_outside_traces_and_commits": sum(1 for f in root.rglob("*") if f.is_file()
                                                    and dirs.traces not in f.parents and dirs.commits not in f.parents)}


def bench_scale(runs: int = 1000, pack: str | None = None, in_flight: int = 16, lose_node: bool = False,
                open_rows: int | None = None) -> dict:
    pack_dir = str(resolve_pack_dir(pack))
    process = psutil.Process()
    with tempfile.TemporaryDirectory(prefix="mbscale") as tmp_dir, LocalCluster(cpus=1) as cluster:
        tmp = Path(tmp_dir)
        hide = [tmp / "results", tmp / "cache"] if can_hide() else []
        for d in hide:
            d.mkdir()
        cluster.start_head()
        for name in ("w1", "w2"):
            cluster.add_worker(name, hide=hide)
        events: dict = {"nodes": cluster.wait_for_nodes(3)}
        ray = init_ray(cluster.address)
        root = tmp / "results" / "scale"
        try:
            t_ready, cpu0 = time.time(), sum(process.cpu_times()[:2])
            rss0 = process.memory_info().rss
            spec, batch = _runs(runs, pack_dir, in_flight)
            expand_s = time.time() - t_ready
            done = threading.Event()
            chaos = threading.Thread(target=lose_and_join, daemon=True,
                                     args=(cluster, root, max(1, len(batch) // 4), hide, events, done))
            if lose_node:
                chaos.start()
            with MemorySampler(cluster) as memory, DiskSampler(root) as parts:
                stats = run_batch(spec, batch, BatchLayout(root), pack_dir, [], str(tmp / "cache"), cluster.address,
                                  quiet=True)
            wall = time.time() - t_ready
            cpu = sum(process.cpu_times()[:2]) - cpu0
            done.set()
            if lose_node:
                chaos.join(timeout=120)
            t = time.perf_counter()
            again = run_batch(spec, batch, BatchLayout(root), pack_dir, [], str(tmp / "cache"), cluster.address, quiet=True)
            rerun_s = time.perf_counter() - t
            t = time.perf_counter()
            table = open_results(root).runs
            open_s = time.perf_counter() - t
            times = sorted(p.stat().st_mtime for p in BatchDirs(root).result_files())
            n = len(batch)
            out = {"runs": n, "config": "single-causal on rules/auto, rounds 0 (2 rule-based calls a run)",
                   "workers_see_results": not hide, "load_average_1m": round(os.getloadavg()[0], 2),
                   "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                   "wall_s": round(wall, 1), "expand_s": round(expand_s, 2),
                   "first_commit_s": round(times[0] - t_ready, 2) if times else None,
                   "runs_per_s_by_tenth": tenths(times), "runs_per_s": round(n / wall, 2),
                   "compaction_s": round(stats.compaction_s, 2),
                   "compaction_share": round(stats.compaction_s / wall, 4),
                   "second_invocation_s": round(rerun_s, 2), "second_invocation_submitted": again.submitted,
                   "open_results_runs_s": round(open_s, 2), "table_rows": len(table),
                   "driver_cpu_ms_per_run": round(cpu / n * 1000, 2),
                   "driver_peak_mb": memory.figures()["driver_peak_mb"],
                   "driver_kb_per_run": round(max(0, memory.driver_mb * 2**20 - rss0) / n / 1024, 2),
                   "row_logs_peak_bytes_per_run": round(parts.peak / n),
                   **disk(root, n), "committed_exactly_once": integrity(root, n, stats), "memory": memory.figures()}
            if open_rows:
                out["synthetic"] = synthetic_open(root, open_rows, tmp / "synthetic")
            if lose_node:
                out["lost_and_joined"] = {k: v for k, v in events.items() if k not in ("nodes", "killed_at")}
        finally:
            ray.shutdown()
    return out


def synthetic_open(source: Path, n: int, where: Path) -> dict:
    """``open_results(...).runs`` of a results directory of ``n`` runs built through the real writer: the measured
    batch's runs' rows repeated under new run ids, appended to row logs (one per 10,000 runs, as that many writers
    would), each run's commit point written, the manifest written and the logs compacted."""
    tables = {t: pq.read_table(BatchDirs(source).table(t)).to_pylist() for t in TABLES}
    by_run: dict[str, dict[str, list[dict]]] = {}
    for t, rows in tables.items():
        for row in rows:
            if row.get("call_id") is None:
                by_run.setdefault(row["run_id"], {name: [] for name in TABLES})[t].append(row)
    models = list(by_run.values())
    dirs = BatchDirs(where)
    dirs.commits.mkdir(parents=True)
    manifest_runs = []
    t0 = time.perf_counter()
    log = RowLog(dirs)
    for i in range(n):
        run_id = f"{i:016x}"
        if i % 10_000 == 0:
            log.close()
            log = RowLog(dirs)
        model = models[i % len(models)]
        log.append(Entry(run_id, 1, {t: [r | {"run_id": run_id} for r in rows] for t, rows in model.items()}))
        dirs.result_path(run_id).write_text("{}")
        first = model["runs"][0]
        manifest_runs.append(ManifestRun(run_id=run_id, scenario_id=first["scenario_id"], config=first["config"],
                                         replicate=i, status="ok"))
    log.close()
    write_manifest(where, {"name": "synthetic"}, manifest_runs, "finished")
    build_s = time.perf_counter() - t0
    start = time.perf_counter()
    compact(dirs)
    compaction_s = time.perf_counter() - start
    start = time.perf_counter()
    rows = len(open_results(where).runs)
    return {"runs": n, "build_s": round(build_s, 1), "compaction_s": round(compaction_s, 2),
            "open_results_runs_s": round(time.perf_counter() - start, 2), "rows": rows,
            "tables_bytes_per_run": round(sum(dirs.table(name).stat().st_size for name in TABLES) / n),
            "load_average_1m": round(os.getloadavg()[0], 2)}


def integrity(root: Path, n: int, stats: BatchOutcome) -> dict:
    """Every run committed exactly once: a result file each, one table row each, no result settled twice."""
    table = ResultsDir(root).runs
    attempts = [sum(1 for e in read_trace(t).events if e["event"] == "run_start") for t, _ in run_files(root)]
    return {"runs": n, "result_files": committed(root), "table_rows": len(table), "distinct_run_ids": int(table.run_id.nunique()),
            "ok": int((table.status == "ok").sum()), "settled_twice": len(stats.committed_twice),
            "traces_with_more_than_one_attempt": sum(1 for a in attempts if a > 1)}


#: What `extrapolate` takes a laptop and a cluster node to be.
LAPTOP = {"cores": 8, "memory_gb": 16, "free_disk_gb": 200}
CLUSTER = {"nodes": 10, "cores_per_node": 16, "memory_gb_per_node": 64, "free_disk_gb_on_head": 500}


def _power(x1: float, y1: float, x2: float, y2: float, x: float) -> tuple[float | None, float | None]:
    """y at ``x`` on the power law y = a·x^b through (x1, y1) and (x2, y2), and b; None where a value is not positive."""
    if min(x1, x2, y1, y2) <= 0 or x1 == x2:
        return None, None
    b = math.log(y2 / y1) / math.log(x2 / x1)
    return y2 * (x / x2) ** b, b


def extrapolate(small: dict, large: dict, target: int = 100_000) -> dict:
    """``target`` runs' figures from two measurements by their growth, and the first resource to run out."""
    n1, n2 = small["runs"], large["runs"]
    keys = ["wall_s", "first_commit_s", "compaction_s", "second_invocation_s", "open_results_runs_s",
            "driver_peak_mb"]
    fig: dict = {}
    for k in keys:
        y, b = _power(n1, small.get(k) or 0, n2, large.get(k) or 0, target)
        fig[k] = {"value": None if y is None else round(y, 2), "growth_exponent": None if b is None else round(b, 2)}
    per_run = {k: large[k] for k in ("driver_cpu_ms_per_run", "tables_bytes_per_run", "traces_bytes_per_run",
                                     "commit_points_bytes_per_run", "row_logs_peak_bytes_per_run")}
    disk_gb = target * (per_run["tables_bytes_per_run"] + per_run["traces_bytes_per_run"]
                        + per_run["commit_points_bytes_per_run"] + per_run["row_logs_peak_bytes_per_run"]) / 1e9
    last = [r for r in large["runs_per_s_by_tenth"] if r]
    per_core = (last[-1] if last else large["runs_per_s"]) / max(1, large.get("cpus") or 1)  # every core in use here
    driver_cap = 1000 / per_run["driver_cpu_ms_per_run"] if per_run["driver_cpu_ms_per_run"] else None
    actor_mb = large["memory"]["actor_peak_mb"]
    laptop_rate = per_core * LAPTOP["cores"]
    cluster_rate = per_core * CLUSTER["nodes"] * CLUSTER["cores_per_node"]

    def limits(rate: float, memory_gb: float, workers: int, disk_free: float) -> dict:
        driver_mb = fig["driver_peak_mb"]["value"] or 0
        memory_need = (driver_mb + actor_mb * workers) / 1024
        bound = rate if driver_cap is None else min(rate, driver_cap)
        return {"runs_per_s": round(bound, 1), "hours": round(target / bound / 3600, 2) if bound else None,
                "bound_by": "the driver's CPU (one process)" if driver_cap is not None and driver_cap < rate else "the actors' cores",
                "memory_gb_needed": round(memory_need, 1), "memory_gb": memory_gb,
                "disk_gb_needed": round(disk_gb, 1), "disk_gb_free": disk_free,
                "runs_out_first": "memory" if memory_need > memory_gb else "disk" if disk_gb > disk_free else
                ("time: the driver's CPU" if driver_cap is not None and driver_cap < rate else "time: the actors' cores")}

    return {"target_runs": target, "measured_at": [n1, n2], "figures": fig, "per_run_at_largest": per_run,
            "driver_cap_runs_per_s": None if driver_cap is None else round(driver_cap, 1),
            "laptop": {**LAPTOP, **limits(laptop_rate, LAPTOP["memory_gb"], LAPTOP["cores"], LAPTOP["free_disk_gb"])},
            "cluster": {**CLUSTER, **limits(cluster_rate, CLUSTER["memory_gb_per_node"], CLUSTER["cores_per_node"],
                                           CLUSTER["free_disk_gb_on_head"])}}


EXAMPLE = "madbench bench scale --runs 1000 20000 --open-rows 100000 --json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`bench scale`'s own options."""
    parser.add_argument("--runs", type=number(int, ge=1, le=MAX_RUNS_CEILING), nargs="+", default=[1000], metavar="N",
                        help="single-agent rule-based runs per measurement; two sizes (e.g. --runs 1000 20000) also "
                             "extrapolate to 100,000 runs by their growth (default 1000)")
    parser.add_argument("--in-flight", type=number(int, ge=1, le=10_000), default=16, help="runs in flight (default 16)")
    parser.add_argument("--lose-node", action="store_true",
                        help="at a quarter of the runs a worker joins and another's raylet is killed")
    parser.add_argument("--open-rows", type=number(int, ge=1, le=MAX_RUNS_CEILING), metavar="N",
                        help="also build a results directory of N runs from the largest measured batch's rows through "
                             "the real writer, and time open_results(...).runs on it (e.g. 100000)")
    parser.add_argument("--json", action="store_true", help="print one JSON record on one line")
    add_pack_only(parser)


def main(args: argparse.Namespace) -> int:
    sizes = list(args.runs)
    if len(sizes) > 2:
        raise InputError("--runs", f"give one or two sizes (got {len(sizes)})", "e.g. --runs 1000 20000")
    measured = [bench_scale(n, getattr(args, "pack", None), args.in_flight, args.lose_node,
                            args.open_rows if n == max(sizes) else None) for n in sizes]
    out: dict = {"measurements": measured}
    if len(measured) == 2:
        small, large = sorted(measured, key=lambda m: m["runs"])
        out["extrapolated"] = extrapolate(small, large)
    if args.json:
        print(json.dumps(out))
    else:
        print(json.dumps(out, indent=1))
    return 0
