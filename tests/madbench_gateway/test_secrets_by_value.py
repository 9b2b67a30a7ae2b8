"""Keys are scrubbed by value, whatever the variable holding them is called (issue 21, item 3)."""

import base64
import os
import subprocess
import sys
import urllib.parse

import pytest
import yaml

from madbench_gateway import secrets
from runner.sim.provider import SimProvider
from tests.fault_server import Faults, FaultServer
from tests.runner.test_batch import ROOT, TICKERS

#: No key shape, and held by a variable whose name does not look secret: only scrubbing by value catches it.
SECRET = "Zq7vLw3PpR9tXk2mNb5cYh8dJf4g"


def forms(value: str) -> list[bytes]:
    raw = value.encode()
    return [raw, b"Bearer " + raw, base64.b64encode(raw), base64.urlsafe_b64encode(raw),
            base64.b64encode(b"user:" + raw), urllib.parse.quote(value, safe="").encode()]


@pytest.fixture
def fresh_memory(monkeypatch):
    monkeypatch.setattr(secrets, "_KNOWN", set())


def test_a_key_read_from_any_variable_is_scrubbed_in_every_encoding(fresh_memory, monkeypatch):
    monkeypatch.setenv("LLM_AUTH", SECRET)
    assert secrets.redact(f"Authorization: Bearer {SECRET}") == f"Authorization: Bearer {SECRET}"  # not yet read
    assert secrets.api_key_from_env("LLM_AUTH") == SECRET
    monkeypatch.delenv("LLM_AUTH")  # remembered, not looked up again
    for form in forms(SECRET):
        for text in (form.decode(), f"echo: {form.decode()} (end)", f"Basic {form.decode()}"):
            assert SECRET not in secrets.redact(text) and form.decode() not in secrets.redact(text), text
            assert "***" in secrets.redact(text)
    basic = base64.b64encode(f"someone-else:{SECRET}".encode()).decode()  # any alignment of the key in base64
    assert basic not in secrets.redact(f"Basic {basic}")


def test_scrubbing_known_keys_leaves_other_text_alone(fresh_memory):
    secrets.remember(SECRET)
    secrets.remember("abc")  # too short to scrub safely: ignored
    text = "key-performance indicators: abc, with a sk-like word"
    assert secrets.redact_known(text, named=False) == text
    assert secrets.redact_known(f"{text} {SECRET}", named=False) == f"{text} ***"


@pytest.mark.slow
def test_a_key_under_an_unusual_name_is_nowhere_in_results_or_cache(make_pack, tmp_path):
    pack = make_pack(tickers=tuple(TICKERS))
    scen = tmp_path / "s.yaml"
    scen.write_text(yaml.safe_dump({"scenarios": [{"id": "s", "invest_quarter": "2021Q3", "tickers": TICKERS,
                                                  "constraints": {"max_weight": 0.6}}]}))
    with SimProvider() as sim, FaultServer(Faults(server_error=0.5, unauthorized=0.5, leak_auth=True)) as leaky:
        configs = []
        for name, spec in (("honest", {"model": "openai/sim", "api_base": sim.url, "send_context": True}),
                           ("leaky", {"model": "openai/leaky", "api_base": leaky.url,
                                      "retry": {"backoff_base_s": 0.01, "max_transient_retries": 3, "outage_patience_s": 0}})):
            cfg = {"name": name, "agents": [{"role": "macro"}, {"role": "value"}], "rounds": 1,
                   "models": {"tiers": {"deep": {**spec, "api_key_env": "LLM_AUTH"},
                                        "quick": {**spec, "api_key_env": "LLM_AUTH"}}}}
            (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(cfg))
            configs.append(str(tmp_path / f"{name}.yaml"))
        batch = tmp_path / "batch.yaml"
        batch.write_text(yaml.safe_dump({"name": "byvalue", "scenarios": {"file": str(scen)}, "configs": configs,
                                         "pack": str(pack), "results_dir": str(tmp_path / "results"), "retries": 0}))
        env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
        env |= {"LLM_AUTH": SECRET, "MADBENCH_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
        out = subprocess.run([sys.executable, "-m", "runner.cli", "run", str(batch)], env=env, capture_output=True,
                             text=True, timeout=600)
        assert leaky.requests > 0
    assert out.returncode == 1, out.stderr[-2000:]  # the leaky provider's run failed, loudly
    files = [p for p in (tmp_path / "results").rglob("*") if p.is_file()]
    files += [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]
    assert any(p.suffix == ".parquet" for p in files) and any(p.suffix == ".jsonl" for p in files)
    assert any("responses" in p.parts for p in files)  # the cache was written
    needles = forms(SECRET)
    for blob, where in [*((p.read_bytes(), str(p)) for p in files),
                        (out.stdout.encode(), "stdout"), (out.stderr.encode(), "stderr")]:
        for needle in needles:
            assert needle not in blob, (where, needle)
    traces = b"".join(p.read_bytes() for p in (tmp_path / "results" / "byvalue" / "traces").glob("*.jsonl"))
    assert b"Incorrect API key provided" in traces and b"Bearer ***" in traces  # the provider echoed it; we scrubbed it
