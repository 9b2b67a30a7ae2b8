"""What the cache offers tamper evidence: every answer's hash, fresh or cached, on its ``Completion``; a
side-effect-free look at an entry (``inspect``); and a statistics database holding a row madbench never writes,
reported as one line (exit 2) instead of a traceback."""

import asyncio
import sqlite3

import diskcache
import pytest

from madbench.gateway import Gateway, LLMRequest, Message, ModelSpec, ResponseCache, RetryPolicy
from madbench.gateway.cache import EntryState, answer_sha256
from madbench.runner.cli import main
from tests.fault_server import Faults, FaultServer


def test_fresh_and_cached_answers_carry_the_hash_of_their_exact_text(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_PROVIDER_KEY", "fake-key-value-1234")
    request = LLMRequest(model="openai/fake", messages=[Message(role="user", content="hello")])
    with FaultServer(Faults()) as server, ResponseCache(tmp_path) as cache:
        spec = ModelSpec(model="openai/fake", api_base=server.url, api_key_env="FAKE_PROVIDER_KEY", retry=RetryPolicy(timeout_s=5))
        gw = Gateway(cache=cache)
        fresh = asyncio.run(gw.complete(request, spec))
        served = asyncio.run(gw.complete(request, spec))
        state = cache.inspect(fresh.key)
    assert (fresh.cached, served.cached) == (False, True)
    assert fresh.answer_sha256 == served.answer_sha256 == answer_sha256(fresh.content) == state.answer_sha256
    assert state.status == "present"


def test_inspect_counts_nothing_and_drops_nothing(tmp_path):
    with ResponseCache(tmp_path) as cache:
        cache.put("k", "m", {"response": {"content": "hello"}})
        assert cache.inspect("k") == EntryState("present", answer_sha256("hello"))
        assert cache.inspect("absent") == EntryState("missing")
        with sqlite3.connect(tmp_path / "responses" / "cache.db") as con:
            (value,) = con.execute("SELECT value FROM Cache WHERE key='k'").fetchone()
            con.execute("UPDATE Cache SET value=? WHERE key='k'", (bytes(value).replace(b"hello", b"jello"),))
        assert cache.inspect("k") == EntryState("corrupt", reason="checksum mismatch")
        assert len(cache) == 1 and cache.stats()["by_model"]["m"] == {"entries": 1, "hits": 0, "misses": 0}


@pytest.mark.parametrize("key,value", [(("hits", "m"), 3), ("hits|m", ("pickled", "value")), ("nobar", 1)])
def test_cache_stats_on_a_foreign_statistics_row_is_one_line(tmp_path, capsys, key, value):
    with ResponseCache(tmp_path) as cache:
        cache.put("k", "m", {"response": {"content": "x"}})
        cache.get("k", "m")
    with diskcache.Cache(str(tmp_path / "stats")) as stats:  # plain diskcache: pickles what is not str, bytes or int
        stats[key] = value
    assert main(["cache", "stats", "--cache-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert f"{tmp_path / 'stats'}: the cache's statistics database holds" in err
    assert f"delete {tmp_path / 'stats'}; the cached answers are unaffected" in err
