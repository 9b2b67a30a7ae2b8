"""Keys are scrubbed by value, whatever the variable holding them is called."""

import base64
import os
import subprocess
import sys
import urllib.parse

import pytest

from madbench.gateway import secrets
from madbench.sim.provider import SimProvider
from tests.fault_server import Faults, FaultServer
from tests.runner.test_batch import ROOT, TICKERS
from tests.runner.test_secrets import leaky_batch

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
    with SimProvider() as sim, FaultServer(Faults(server_error=0.5, unauthorized=0.5, leak_auth=True)) as leaky:
        batch = leaky_batch(tmp_path, pack, sim.url, leaky.url, "LLM_AUTH", "byvalue")
        env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
        env |= {"LLM_AUTH": SECRET, "MADBENCH_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
        out = subprocess.run([sys.executable, "-m", "madbench.runner.cli", "run", str(batch)], env=env, capture_output=True,
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
