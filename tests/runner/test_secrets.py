"""A batch run with keys in its environment leaves them nowhere: traces, cache, Parquet, manifest, logs. One batch
serves both tests: a key under OPENAI_API_KEY, and one under a name that looks like no secret (only scrubbing by
value catches it), each sent to an honest provider and to one that echoes it back in its error bodies."""

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from madbench.data.market.write import write_pack
from madbench.debate.trace import trace_bytes
from madbench.results import run_files
from madbench.sim.provider import SimProvider
from tests.conftest import synthetic_tables
from tests.fault_server import Faults, FaultServer
from tests.gateway.test_secrets_by_value import SECRET as BY_VALUE_SECRET
from tests.gateway.test_secrets_by_value import forms
from tests.runner.test_batch import ROOT, TICKERS

pytestmark = pytest.mark.slow

SECRET = "sk-test-SECRET"
#: Each key's variable: the suffix of its configs' names, and its value.
KEYS = {"OPENAI_API_KEY": ("openai", SECRET), "LLM_AUTH": ("byvalue", BY_VALUE_SECRET)}
#: Each key's debate (where a model is reached, and with what key, is no part of a run's identity: the two keys'
#: configs must differ in their debate to be two runs).
ROLES = {"openai": ["macro", "value"], "byvalue": ["macro", "risk"]}


def leaky_batch(tmp_path: Path, pack: Path, sim_url: str, leaky_url: str) -> Path:
    """A one-scenario batch: for each key of ``KEYS``, a config on the simulator and one on a fault server that fails
    every request and echoes its Authorization header in the error body (as some providers do)."""
    scen = tmp_path / "s.yaml"
    scen.write_text(yaml.safe_dump({"scenarios": [{"id": "s", "invest_quarter": "2021Q3", "tickers": TICKERS,
                                                  "constraints": {"max_weight": 0.6}}]}))
    configs = []
    for key_env, (suffix, _) in KEYS.items():
        for kind, spec in (("honest", {"model": "openai/sim", "api_base": sim_url, "send_context": True}),
                           ("leaky", {"model": "openai/leaky", "api_base": leaky_url,
                                      "retry": {"backoff_base_s": 0.01, "max_transient_retries": 3, "outage_patience_s": 0}})):
            name = f"{kind}-{suffix}"
            cfg = {"name": name, "agents": [{"role": r} for r in ROLES[suffix]], "rounds": 1,
                   "models": {"tiers": {"deep": {**spec, "api_key_env": key_env}, "quick": {**spec, "api_key_env": key_env}}}}
            (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(cfg))
            configs.append(str(tmp_path / f"{name}.yaml"))
    batch = tmp_path / "batch.yaml"
    batch.write_text(yaml.safe_dump({"name": "secrets", "scenarios": {"file": str(scen)}, "configs": configs,
                                     "pack": str(pack), "results_dir": str(tmp_path / "results"), "retries": 0,
                                     # one actor writes every artifact a second would (and starts in half the time)
                                     "workers": 1}))
    return batch


@dataclass
class LeakyRun:
    tmp: Path
    out: subprocess.CompletedProcess
    leaky_requests: int

    def files(self) -> list[Path]:
        return [p for p in self.tmp.rglob("*") if p.is_file() and p.suffix not in (".yaml",)]

    def traces(self) -> bytes:
        return b"".join(trace_bytes(t) or b"" for t, _ in run_files(self.tmp / "results" / "secrets"))


@pytest.fixture(scope="module")
def leaky_run(tmp_path_factory) -> LeakyRun:
    """The batch, run by `madbench run` in its own process with both keys in its environment only."""
    tmp = tmp_path_factory.mktemp("secrets")
    pack = write_pack(tmp / "pack", synthetic_tables(tickers=tuple(TICKERS)))
    with SimProvider() as sim, FaultServer(Faults(server_error=0.5, unauthorized=0.5, leak_auth=True)) as leaky:
        batch = leaky_batch(tmp, pack, sim.url, leaky.url)
        env = {k: v for k, v in os.environ.items() if k not in KEYS}
        env |= {var: secret for var, (_, secret) in KEYS.items()}
        env |= {"MADBENCH_CACHE_DIR": str(tmp / "cache"), "PYTHONPATH": str(ROOT)}
        out = subprocess.run([sys.executable, "-m", "madbench.runner.cli", "run", str(batch)], env=env, capture_output=True,
                             text=True, timeout=600)
        requests = leaky.requests
    return LeakyRun(tmp, out, requests)


def test_no_secret_in_any_artifact(leaky_run):
    out = leaky_run.out
    assert out.returncode == 1, out.stderr[-2000:]  # the leaky provider's runs failed, loudly
    assert SECRET not in out.stdout + out.stderr
    files = leaky_run.files()
    assert any(p.suffix == ".parquet" for p in files) and any(p.name.endswith(".jsonl.zst") for p in files)
    assert any(p.parent.name == "responses" or "responses" in p.parts for p in files)  # the cache was written
    for p in files:  # a compressed trace read as its lines
        assert SECRET.encode() not in (trace_bytes(p.with_suffix("")) if p.suffix == ".zst" else p.read_bytes()), p
    traces = leaky_run.traces()
    assert b"Incorrect API key provided" in traces and b"***" in traces  # the provider echoed it; we scrubbed it


def test_a_key_under_an_unusual_name_is_nowhere_in_results_or_cache(leaky_run):
    out = leaky_run.out
    assert leaky_run.leaky_requests > 0 and out.returncode == 1, out.stderr[-2000:]
    files = [p for p in leaky_run.files() if "results" in p.parts or "cache" in p.parts]
    assert any("responses" in p.parts for p in files)  # the cache was written
    needles = forms(BY_VALUE_SECRET)
    for blob, where in [*((trace_bytes(p.with_suffix("")) if p.suffix == ".zst" else p.read_bytes(), str(p)) for p in files),
                        (out.stdout.encode(), "stdout"), (out.stderr.encode(), "stderr")]:
        for needle in needles:
            assert needle not in blob, (where, needle)
    manifest = json.loads((leaky_run.tmp / "results" / "secrets" / "manifest.json").read_text())
    runs = {r["config"]: r for r in manifest["runs"]}
    assert runs["leaky-byvalue"]["status"] == "failed"  # it reached the echoing provider with that key
    assert b"Bearer ***" in leaky_run.traces()  # the provider echoed it; we scrubbed it
