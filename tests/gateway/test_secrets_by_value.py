"""Keys are scrubbed by value, whatever the variable holding them is called (a batch run with one:
tests/runner/test_secrets.py)."""

import base64
import urllib.parse

import pytest

from madbench.gateway import secrets

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
