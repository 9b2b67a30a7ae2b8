"""Cache keys and the on-disk cache: stable keys, JSON-only values, corruption recovery."""

import os
import pickle
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from madbench.gateway.cache import ResponseCache, UnsafeEntry, resolve_cache_dir
from madbench.gateway.request import LLMRequest, Message

BASE = dict(model="openai/gpt-4o-mini", api_base="http://h/v1", messages=[Message(role="user", content="hi")],
            temperature=0.2, top_p=0.9, max_tokens=100, seed=7,
            response_schema={"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "number"}}},
            tools=[{"type": "function", "function": {"name": "f"}}], sample_index=0)


def test_key_ignores_dict_order():
    a = LLMRequest(**BASE)
    reordered = dict(BASE, response_schema={"properties": {"b": {"type": "number"}, "a": {"type": "string"}}, "type": "object"})
    assert LLMRequest(**reordered).cache_key() == a.cache_key()


@pytest.mark.parametrize("field,value", [
    ("model", "anthropic/claude-3-5-haiku"), ("api_base", "http://other/v1"),
    ("messages", [Message(role="user", content="hi!")]), ("temperature", 0.3), ("top_p", 1.0),
    ("max_tokens", 101), ("seed", 8), ("response_schema", {"type": "object"}), ("tools", []), ("sample_index", 1),
])
def test_key_changes_with_every_keyed_field(field, value):
    assert LLMRequest(**dict(BASE, **{field: value})).cache_key() != LLMRequest(**BASE).cache_key()


def test_key_equal_across_processes():
    code = ("from madbench.gateway.request import LLMRequest, Message; "
            "print(LLMRequest(model='openai/gpt-4o-mini', messages=[Message(role='user', content='hi')], seed=3).cache_key())")
    here = LLMRequest(model="openai/gpt-4o-mini", messages=[Message(role="user", content="hi")], seed=3).cache_key()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONHASHSEED": "123"}).stdout.strip()
    assert out == here


def test_key_never_contains_credentials_or_runtime_settings():
    fields = LLMRequest(**BASE).key_fields()
    assert set(fields) == {"v", "provider", "model", "api_base", "messages", "temperature", "top_p", "max_tokens",
                           "seed", "response_schema", "tools", "sample_index"}


def test_round_trip_and_stats(tmp_path):
    with ResponseCache(tmp_path) as cache:
        assert cache.get("k1", "m") is None
        cache.put("k1", "m", {"response": {"content": "x"}})
        assert cache.get("k1", "m")["response"]["content"] == "x"
        stats = cache.stats()
    assert stats["entries"] == 1 and stats["by_model"]["m"] == {"entries": 1, "hits": 1, "misses": 1}


def test_first_writer_wins(tmp_path):
    with ResponseCache(tmp_path) as cache:
        cache.put("k", "m", {"response": {"content": "first"}})
        cache.put("k", "m", {"response": {"content": "second"}})
        assert cache.get("k", "m")["response"]["content"] == "first"


def _db(tmp_path):
    return sqlite3.connect(tmp_path / "responses" / "cache.db")


def test_flipped_bytes_in_index_are_detected_and_dropped(tmp_path):
    with ResponseCache(tmp_path) as cache:
        cache.put("k", "m", {"response": {"content": "hello"}})
        with _db(tmp_path) as con:
            (value,) = con.execute("SELECT value FROM Cache WHERE key='k'").fetchone()
            con.execute("UPDATE Cache SET value=? WHERE key='k'", (bytes(value).replace(b"hello", b"jello"),))
        assert cache.get("k", "m") is None
        assert cache.corrupt[0].reason == "checksum mismatch"
        assert len(cache) == 0  # dropped, so the next call recomputes and stores afresh


def test_truncated_value_file_is_detected(tmp_path):
    with ResponseCache(tmp_path) as cache:
        cache.put("big", "m", {"response": {"content": "x" * 100_000}})  # large values live in files
        files = list((tmp_path / "responses").rglob("*.val"))
        assert len(files) == 1
        files[0].write_bytes(files[0].read_bytes()[:5000])
        assert cache.get("big", "m") is None
        assert "undecodable JSON" in cache.corrupt[0].reason


def test_pickled_rows_are_refused_never_loaded(tmp_path):
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (Path.touch, (marker,))

    with ResponseCache(tmp_path) as cache:
        cache.put("k", "m", {"response": {"content": "ok"}})
        with _db(tmp_path) as con:  # a hostile writer plants a pickle in a shared cache
            con.execute("UPDATE Cache SET mode=4, value=? WHERE key='k'", (pickle.dumps(Evil()),))
        assert cache.get("k", "m") is None
        assert "mode 4" in cache.corrupt[0].reason
    assert not marker.exists()
    assert issubclass(UnsafeEntry, Exception)


def test_prune_older_than(tmp_path):
    with ResponseCache(tmp_path) as cache:
        cache.put("old", "m", {"response": {}})
        with _db(tmp_path) as con:
            con.execute("UPDATE Cache SET store_time = store_time - 86400 * 10 WHERE key='old'")
        cache.put("new", "m", {"response": {}})
        assert cache.prune(older_than_s=86400 * 7) == 1
        assert cache.get("new", "m") is not None and cache.get("old", "m") is None


def test_cache_dir_resolution_order(monkeypatch, tmp_path):
    monkeypatch.delenv("MADBENCH_CACHE_DIR", raising=False)
    monkeypatch.delenv("MADBENCH_HOME", raising=False)
    assert resolve_cache_dir(None, None) == Path("~/.cache/madbench/llm").expanduser()
    monkeypatch.setenv("MADBENCH_HOME", str(tmp_path / "home"))
    assert resolve_cache_dir(None, None) == tmp_path / "home" / "llm"
    assert resolve_cache_dir(None, tmp_path / "cfg") == tmp_path / "cfg"
    monkeypatch.setenv("MADBENCH_CACHE_DIR", str(tmp_path / "env"))
    assert resolve_cache_dir(None, tmp_path / "cfg") == tmp_path / "env"
    assert resolve_cache_dir(tmp_path / "cli", tmp_path / "cfg") == tmp_path / "cli"


def test_a_journal_that_ends_while_another_process_opens_the_cache_is_not_taken_for_a_read_only_cache(
        tmp_path, monkeypatch):
    # The writability check lists the databases' files, then asks whether each is writable; another process's
    # transaction can end (and its journal go) in between: three processes opening one new cache at once met that.
    ResponseCache(tmp_path / "cache").close()
    journal = tmp_path / "cache" / "responses" / "cache.db-journal"
    journal.write_bytes(b"")
    real_access = os.access

    def access_after_the_transaction_ended(path, mode):
        if Path(path) == journal:
            journal.unlink(missing_ok=True)
        return real_access(path, mode)

    monkeypatch.setattr("madbench.gateway.cache.os.access", access_after_the_transaction_ended)
    ResponseCache(tmp_path / "cache").close()
    assert not journal.exists()  # the check did meet the vanished journal
