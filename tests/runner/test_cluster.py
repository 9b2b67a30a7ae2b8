"""cluster.yaml is a valid Ray cluster-launcher config; a batch spreads over a real 2-node local cluster and
survives the loss of its worker node."""

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pandas as pd
import pytest
import ray
import yaml

from madbench.runner.dispatch import ACTOR_NUM_CPUS
from madbench.runner.execute import HEAD_DIRS
from tests.runner.test_batch import ROOT, TICKERS, write_batch


def test_cluster_yaml_validates_against_rays_schema():
    schema = json.loads((Path(ray.__file__).parent / "autoscaler" / "ray-schema.json").read_text())
    text = (ROOT / "cluster.yaml").read_text()
    config = yaml.safe_load(text)
    jsonschema.validate(config, schema)
    assert any("madbench" in c and "pip install" in c for c in config["setup_commands"])
    assert set(config["available_node_types"]) == {"head", "worker"}
    # Runner actors reserve no CPU, so the autoscaler sees no demand from them: the worker count is fixed.
    assert ACTOR_NUM_CPUS == 0
    worker = config["available_node_types"]["worker"]
    assert worker["min_workers"] == worker["max_workers"] == config["max_workers"] >= 1
    # Every node starts Ray with the same cache settings (jobs inherit them); the cache directory is made on setup.
    starts = {kind: " ".join(config[f"{kind}_start_ray_commands"]) for kind in ("head", "worker")}
    settings = {kind: dict(re.findall(r"\b(MADBENCH_CACHE_DIR|MADBENCH_CACHE_SHARED)=(\S+)", cmd)) for kind, cmd in starts.items()}
    assert settings["head"] == settings["worker"] and set(settings["head"]) == {"MADBENCH_CACHE_DIR", "MADBENCH_CACHE_SHARED"}
    assert settings["head"]["MADBENCH_CACHE_SHARED"] in {"0", "1"}
    cache = settings["head"]["MADBENCH_CACHE_DIR"]
    assert cache.startswith("/") and any("mkdir -p" in c and cache in c for c in config["setup_commands"])
    # The job API (and the keys in job runtime envs) stays on the head's loopback, reached through `ray dashboard`.
    assert "--dashboard-host=127.0.0.1" in starts["head"] and "ray dashboard cluster.yaml" in text
    # The documented job names an absolute results directory on the head and takes its key from the runtime env.
    submit = text[text.index("ray job submit"):text.index("ray rsync-down")]
    results = re.search(r"--results-dir (\S+)", submit).group(1)
    assert results.startswith("/") and any("mkdir -p" in c and results in c for c in config["setup_commands"])
    assert "--runtime-env-json" in submit and "env_vars" in submit
    # What madbench's errors suggest is what this file makes, outside the synced checkout.
    checkout = next(remote for remote, local in config["file_mounts"].items() if local == ".")
    assert {"--results-dir": results, "--cache-dir": cache} == HEAD_DIRS
    assert not any(Path(d).is_relative_to(checkout) for d in HEAD_DIRS.values())
    # Its data is not in the `--working-dir .` upload: it names the copies file_mounts puts on every node, absolute.
    data = [Path(remote) for remote, local in config["file_mounts"].items() if local != "."]
    for flag in ("--pack", "--evidence", "--scenarios"):
        path = Path(re.search(rf"{flag} (\S+)", submit).group(1))
        assert path.is_absolute() and any(path.is_relative_to(d) for d in data) and not path.is_relative_to(checkout)
    # The Ray client's port is reached through SSH, and its command names the head's cache directory.
    assert "ray attach cluster.yaml -p 10001" in text and f"--cache-dir {cache}" in text


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop_cluster(temp_dir: str) -> None:
    """Kill only this cluster's processes (`ray stop` would also stop every other Ray on the machine)."""
    import psutil
    procs = [p for p in psutil.process_iter(["cmdline"]) if any(temp_dir in a for a in (p.info["cmdline"] or []))]
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    psutil.wait_procs(procs, timeout=30)


@pytest.fixture(scope="module")
def two_node_cluster():
    """A real 2-node local Ray cluster (head + one worker, separate raylets); yields (address, env, temp dir). Started
    once for this module's two batches (a start costs about 25 s on 2 cores): the raylet-kill test, which leaves the
    cluster one node short, comes last in the file, and the module's tests share one worker (conftest)."""
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONPATH": str(ROOT)}
    port = _free_port()
    import tempfile
    short = tempfile.mkdtemp(prefix="mb", dir="/tmp")  # AF_UNIX socket paths must stay under 108 bytes
    ray_bin = str(Path(sys.executable).parent / "ray")
    head = [ray_bin, "start", "--head", f"--port={port}", "--num-cpus=1", "--include-dashboard=false",
            f"--temp-dir={short}/h", "--memory=2000000000", "--object-store-memory=200000000"]
    worker = [ray_bin, "start", f"--address=127.0.0.1:{port}", "--num-cpus=1", f"--temp-dir={short}/w",
              "--memory=2000000000", "--object-store-memory=200000000"]
    try:
        subprocess.run(head, env=env, check=True, capture_output=True, timeout=120)
        subprocess.run(worker, env=env, check=True, capture_output=True, timeout=120)
        yield f"127.0.0.1:{port}", env, short
    finally:
        _stop_cluster(short)


def _run(batch, address, env, **kw):
    return subprocess.Popen([sys.executable, "-m", "madbench.runner.cli", "run", str(batch), "--quiet", "--address", address],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


@pytest.mark.slow
def test_batch_runs_land_on_both_nodes_of_a_two_node_cluster(make_pack, tmp_path, two_node_cluster):
    address, env, _ = two_node_cluster
    # One replicate (8 runs over the two actors, one on each node) shows the spread as well as 16 runs did.
    batch = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)), workers=2, replicates=1)
    proc = _run(batch, address, env)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-2000:]
    runs = pd.read_parquet(tmp_path / "results" / "t" / "runs.parquet")
    assert len(runs) == 8 and runs.node_id.nunique() == 2
    calls = pd.read_parquet(tmp_path / "results" / "t" / "calls.parquet")
    assert calls.node_id.nunique() == 2


@pytest.mark.slow
def test_killing_a_worker_nodes_raylet_mid_batch_still_completes_every_run(make_pack, tmp_path, two_node_cluster):
    import psutil

    from madbench.sim.provider import SimConfig, SimProvider
    address, env, short = two_node_cluster
    with SimProvider(SimConfig(latency_median_s=0.3, seed=5)) as sim:  # slow enough for the kill to land mid-batch
        model = {"model": "openai/madbench-sim", "api_base": sim.url, "send_context": True,
                 "retry": {"backoff_base_s": 0.2, "backoff_max_s": 2.0}}
        batch = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)), workers=2, max_in_flight=4, model=model,
                            configs=[str(ROOT / "configs/debate/causal-debate-3.yaml")], grid={"rounds": [1]})
        proc = _run(batch, address, env)
        committed = tmp_path / "results" / "t" / "runs"
        deadline = time.monotonic() + 300
        while not (committed.exists() and len(list(committed.glob("*.json"))) >= 2):
            assert proc.poll() is None and time.monotonic() < deadline, "batch ended before the kill"
            time.sleep(0.2)
        raylets = [p for p in psutil.process_iter(["name", "cmdline"])
                   if "raylet" in (p.info["name"] or "") and any(f"{short}/w" in a for a in (p.info["cmdline"] or []))]
        assert len(raylets) == 1
        raylets[0].kill()
        out, err = proc.communicate(timeout=600)
    manifest = tmp_path / "results" / "t" / "manifest.json"
    failed = [r for r in json.loads(manifest.read_text())["runs"] if r["status"] != "ok"] if manifest.exists() else []
    assert proc.returncode == 0, f"{out[-1500:]}\n{err[-1500:]}\nfailed runs: {failed}"
    runs = pd.read_parquet(tmp_path / "results" / "t" / "runs.parquet")
    assert len(runs) == 8 and runs.run_id.is_unique and (runs.status == "ok").all()
