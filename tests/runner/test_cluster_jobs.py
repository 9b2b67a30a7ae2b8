"""From laptop to cluster with the same command, on a real 2-node local cluster with the dashboard's job API.

The worker raylet runs in a mount namespace of its own where the head's results and cache directories are
empty, as on a cloud node without shared storage. A batch submitted with `ray job submit --working-dir` (its
pack inside the uploaded directory; its scenario file, like the paper batches', outside it, named on the head with
`--scenarios`; its key in `--runtime-env-json`) commits every run into the results directory on the head, the
worker's runs included; the same runs submitted again through the Ray client
(`madbench run --address ray://…`), each now on the other node, are all served by the cluster's cache: a run on
the worker gets what a run on the head paid for, with no request at the server. The key, echoed by the server
in its error bodies, is in no job log, no result and no cache entry.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from madbench.bench.local_cluster import LocalCluster, can_hide
from madbench.debate.trace import trace_bytes
from madbench.results import run_files
from madbench.runner.staging import staging_root
from tests.fault_server import Faults, FaultServer
from tests.runner.test_batch import ROOT, TICKERS

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not can_hide(), reason="needs a mount namespace (root) to give the worker node a disk "
                                                        "of its own")]

#: Shaped like no known key and held in a variable named like no secret: only redaction by value can scrub it.
KEY = "Zq9Lm2Xw7Pn4Rt8Vb1Yc"
VAR = "MADBENCH_JOB_AUTH"
QUARTERS = ("2021Q2", "2021Q3", "2021Q4", "2022Q1")


def job_dir(tmp_path: Path, pack: Path, url: str) -> Path:
    """The directory `ray job submit --working-dir` uploads: two batch files over the same 4 runs, in two orders.
    The first names its scenarios beside the checkout (tmp_path/shared, not uploaded), as rq2-e1.yaml does."""
    d = tmp_path / "job"
    (tmp_path / "shared").mkdir()
    shutil.copytree(pack, d / "pack")
    scenarios = [{"id": f"s{q}", "invest_quarter": q, "tickers": TICKERS, "constraints": {"max_weight": 0.6}} for q in QUARTERS]
    model = {"model": "openai/fault", "api_base": url, "api_key_env": VAR, "send_context": True,
             "retry": {"backoff_base_s": 0.01, "backoff_max_s": 0.05, "max_transient_retries": 12}}
    for name, order in (("batch", scenarios), ("batch-reversed", scenarios[::-1])):
        file = f"../shared/{name}-scenarios.yaml" if name == "batch" else f"{name}-scenarios.yaml"
        (d / file).write_text(yaml.safe_dump({"scenarios": order}))
        (d / f"{name}.yaml").write_text(yaml.safe_dump({
            "name": "jobs", "scenarios": {"file": file}, "model": model, "pack": "pack",
            "configs": [str(ROOT / "configs/debate/single-causal.yaml")], "workers": 2, "max_in_flight": 4, "retries": 0}))
    return d


def ray_cli(cluster: LocalCluster, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([str(Path(sys.executable).parent / "ray"), *args], env=cluster.env, capture_output=True,
                          text=True, timeout=timeout)


def node_of_runs(root: Path) -> dict[str, str]:
    runs = pd.read_parquet(root / "runs.parquet")
    assert len(runs) == 4 and runs.run_id.is_unique and (runs.status == "ok").all(), runs[["run_id", "status", "error"]]
    assert sorted(p.stem for p in (root / "runs").glob("*.json")) == sorted(runs.run_id)  # committed on the head
    return dict(zip(runs.run_id, runs.node_id, strict=True))


def test_a_job_commits_on_the_head_and_the_worker_is_served_what_the_head_paid_for(make_pack, tmp_path):
    hidden = [tmp_path / "results", tmp_path / "results-client", tmp_path / "cache"]
    for d in hidden:
        d.mkdir()
    with FaultServer(Faults(server_error=0.4, leak_auth=True), seed=3) as server, LocalCluster(dashboard=True) as cluster:
        work = job_dir(tmp_path, make_pack(tickers=tuple(TICKERS)), server.url)
        cluster.start_head()
        cluster.add_worker("w", hide=hidden)
        nodes = cluster.wait_for_nodes(2)
        submit = ray_cli(cluster, "job", "submit", "--address", cluster.dashboard_url, "--submission-id", "madbench-a",
                         "--working-dir", str(work), "--runtime-env-json", json.dumps({"env_vars": {VAR: KEY}}), "--",
                         "madbench", "run", "batch.yaml", "--results-dir", str(tmp_path / "results"),
                         "--scenarios", str(tmp_path / "shared" / "batch-scenarios.yaml"),
                         "--cache-dir", str(tmp_path / "cache"), "--quiet")
        logs = ray_cli(cluster, "job", "logs", "--address", cluster.dashboard_url, "madbench-a").stdout
        assert submit.returncode == 0, submit.stdout[-3000:] + submit.stderr[-3000:]
        assert "batch jobs: 4 runs" in logs and "4 ok" in logs
        paid = server.requests
        assert paid >= 8 and server.outcomes.count("server_error") > 0  # 2 calls a run; the key was echoed back
        root = tmp_path / "results" / "jobs"
        first = node_of_runs(root)
        assert set(first.values()) == {nodes["h"], nodes["w"]}  # the worker's runs too, committed by the driver
        assert not [p for p in staging_root(root).rglob("*") if p.is_file()]  # and nothing left on the worker

        # The same runs through the Ray client, each on the other node this time: all from the cluster's cache.
        env = {**cluster.env, VAR: KEY, "MADBENCH_FORWARD_ENV": VAR}
        client = subprocess.run([sys.executable, "-m", "madbench.runner.cli", "run", str(work / "batch-reversed.yaml"), "--quiet",
                                 "--address", cluster.client_address, "--results-dir", str(tmp_path / "results-client"),
                                 "--cache-dir", str(tmp_path / "cache")], cwd=work, env=env, capture_output=True, text=True,
                                timeout=600)
        assert client.returncode == 0, client.stdout[-2000:] + client.stderr[-3000:] + cluster.log_tails("ray_client_server*")
        assert server.requests == paid  # not one request at the server
    second = node_of_runs(tmp_path / "results-client" / "jobs")
    assert all(second[r] != first[r] for r in first)
    calls = pd.read_parquet(tmp_path / "results-client" / "jobs" / "calls.parquet")
    assert len(calls) >= 8 and calls.cached.all()
    head_paid = [r for r in first if first[r] == nodes["h"] and second[r] == nodes["w"]]
    assert head_paid and set(calls[calls.run_id.isin(head_paid)].node_id) == {nodes["w"]}

    assert KEY not in logs + submit.stdout + submit.stderr + client.stdout + client.stderr
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name.endswith(".jsonl.zst") for p in files) and any("responses" in p.parts for p in files)
    for p in files:  # a compressed trace read as its lines
        assert KEY.encode() not in (trace_bytes(p.with_suffix("")) if p.suffix == ".zst" else p.read_bytes()), p
    traces = b"".join(trace_bytes(t) or b"" for t, _ in run_files(root))
    assert b"internal error Bearer ***" in traces  # echoed by the server, scrubbed by value on both nodes
