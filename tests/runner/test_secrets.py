"""A batch run with OPENAI_API_KEY set leaves the key nowhere: traces, cache, Parquet, manifest, logs."""

import os
import subprocess
import sys

import pytest
import yaml

from madbench.sim.provider import SimProvider
from tests.fault_server import Faults, FaultServer
from tests.runner.test_batch import ROOT, TICKERS

SECRET = "sk-test-SECRET"


def leaky_batch(tmp_path, pack, sim_url: str, leaky_url: str, key_env: str, name: str):
    """A one-scenario batch on two providers under ``key_env``: the simulator, and a fault server that fails half
    its requests and echoes the request's Authorization header in its error bodies (as some providers do)."""
    scen = tmp_path / "s.yaml"
    scen.write_text(yaml.safe_dump({"scenarios": [{"id": "s", "invest_quarter": "2021Q3", "tickers": TICKERS,
                                                  "constraints": {"max_weight": 0.6}}]}))
    configs = []
    for cfg_name, spec in (("honest", {"model": "openai/sim", "api_base": sim_url, "send_context": True}),
                           ("leaky", {"model": "openai/leaky", "api_base": leaky_url,
                                      "retry": {"backoff_base_s": 0.01, "max_transient_retries": 3, "outage_patience_s": 0}})):
        cfg = {"name": cfg_name, "agents": [{"role": "macro"}, {"role": "value"}], "rounds": 1,
               "models": {"tiers": {"deep": {**spec, "api_key_env": key_env}, "quick": {**spec, "api_key_env": key_env}}}}
        (tmp_path / f"{cfg_name}.yaml").write_text(yaml.safe_dump(cfg))
        configs.append(str(tmp_path / f"{cfg_name}.yaml"))
    batch = tmp_path / "batch.yaml"
    batch.write_text(yaml.safe_dump({"name": name, "scenarios": {"file": str(scen)}, "configs": configs,
                                     "pack": str(pack), "results_dir": str(tmp_path / "results"), "retries": 0,
                                     # one actor writes every artifact a second would (and starts in half the time)
                                     "workers": 1}))
    return batch


@pytest.mark.slow
def test_no_secret_in_any_artifact(make_pack, tmp_path):
    pack = make_pack(tickers=tuple(TICKERS))
    with SimProvider() as sim, FaultServer(Faults(server_error=0.5, unauthorized=0.5, leak_auth=True)) as leaky:
        batch = leaky_batch(tmp_path, pack, sim.url, leaky.url, "OPENAI_API_KEY", "secrets")
        env = {**os.environ, "OPENAI_API_KEY": SECRET, "MADBENCH_CACHE_DIR": str(tmp_path / "cache"),
               "PYTHONPATH": str(ROOT)}
        out = subprocess.run([sys.executable, "-m", "madbench.runner.cli", "run", str(batch)], env=env, capture_output=True,
                             text=True, timeout=600)
    assert out.returncode == 1, out.stderr[-2000:]  # the leaky provider's run failed, loudly
    assert SECRET not in out.stdout + out.stderr
    files = [p for p in tmp_path.rglob("*") if p.is_file() and p.suffix not in (".yaml",)]
    assert any(p.suffix == ".parquet" for p in files) and any(p.suffix == ".jsonl" for p in files)
    assert any(p.parent.name == "responses" or "responses" in p.parts for p in files)  # the cache was written
    for p in files:
        assert SECRET.encode() not in p.read_bytes(), p
    traces = b"".join(p.read_bytes() for p in (tmp_path / "results" / "secrets" / "traces").glob("*.jsonl"))
    assert b"Incorrect API key provided" in traces and b"***" in traces  # the provider echoed it; we scrubbed it
