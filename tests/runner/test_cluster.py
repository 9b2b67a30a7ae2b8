"""cluster.yaml is a valid Ray cluster-launcher config, and a batch spreads over a real 2-node local cluster."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import jsonschema
import pandas as pd
import pytest
import ray
import yaml

from tests.runner.test_batch import ROOT, TICKERS, write_batch


def test_cluster_yaml_validates_against_rays_schema():
    schema = json.loads((Path(ray.__file__).parent / "autoscaler" / "ray-schema.json").read_text())
    config = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    jsonschema.validate(config, schema)
    assert any("madbench" in c and "pip install" in c for c in config["setup_commands"])
    assert set(config["available_node_types"]) == {"head", "worker"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop_cluster(temp_dir: str) -> None:
    """Kill only this cluster's processes (`ray stop` would also stop every other Ray on the machine)."""
    import psutil
    procs = [p for p in psutil.process_iter(["cmdline"]) if any(temp_dir in a for a in (p.info["cmdline"] or []))]
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=30)


@pytest.mark.slow
def test_batch_runs_land_on_both_nodes_of_a_two_node_cluster(make_pack, tmp_path):
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
        batch = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)), workers=2)
        out = subprocess.run([sys.executable, "-m", "runner.cli", "run", str(batch), "--quiet", "--address", f"127.0.0.1:{port}"],
                             env=env, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-2000:]
    finally:
        _stop_cluster(short)
    runs = pd.read_parquet(tmp_path / "results" / "t" / "runs.parquet")
    assert len(runs) == 16 and runs.node_id.nunique() == 2
    calls = pd.read_parquet(tmp_path / "results" / "t" / "calls.parquet")
    assert calls.node_id.nunique() == 2
