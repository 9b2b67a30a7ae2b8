"""The on-disk LLM response cache.

diskcache gives us a process-safe SQLite index (several Ray workers may share
one directory). Two things are added on top:

* Values are JSON bytes, never pickles. ``SafeDisk`` refuses to store or read
  pickled keys or values, so a shared cache directory cannot run code.
* Each value carries the sha256 of its own body. A truncated file, flipped
  bytes or a malformed row is detected on read, reported, dropped, and the
  call is recomputed. Errors are never cached.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import diskcache
from diskcache.core import MODE_BINARY, MODE_RAW

from .request import canonical_json, sha256_json

log = logging.getLogger("madbench.cache")

DEFAULT_CACHE_DIR = Path("~/.cache/madbench/llm")


class CorruptEntry(Exception):
    """A cache value failed to decode or its checksum did not match."""


class UnsafeEntry(CorruptEntry):
    """A cache row asks to be unpickled; we never do that."""


class SafeDisk(diskcache.Disk):
    """A diskcache Disk that only handles str keys, and bytes values or integer counters."""

    def put(self, key):
        if not isinstance(key, str):
            raise TypeError(f"cache keys must be str, got {type(key).__name__}")
        return super().put(key)

    def get(self, key, raw):
        if not raw:
            raise UnsafeEntry("cache key stored as a pickle")
        return super().get(key, raw)

    def store(self, value, read, key=diskcache.core.UNKNOWN):
        if not isinstance(value, (bytes, int)) or isinstance(value, bool) or read:
            raise TypeError("cache values must be JSON bytes (or integer counters)")
        return super().store(value, read, key=key)

    def fetch(self, mode, filename, value, read):
        if mode not in (MODE_RAW, MODE_BINARY) or read:
            raise UnsafeEntry(f"cache value stored in mode {mode}; only raw JSON bytes are read")
        data = super().fetch(mode, filename, value, read)
        if not isinstance(data, (bytes, int)):
            raise CorruptEntry(f"cache value has type {type(data).__name__}, expected bytes")
        return data


def resolve_cache_dir(cli: str | Path | None = None, config: str | Path | None = None) -> Path:
    """--cache-dir, else $MADBENCH_CACHE_DIR, else the batch config, else ~/.cache/madbench/llm."""
    for candidate in (cli, os.environ.get("MADBENCH_CACHE_DIR") or None, config):
        if candidate:
            return Path(candidate).expanduser()
    return DEFAULT_CACHE_DIR.expanduser()


def encode_entry(body: dict[str, Any]) -> bytes:
    return canonical_json({"sha256": sha256_json(body), "body": body}).encode("utf-8")


def decode_entry(data: bytes) -> dict[str, Any]:
    try:
        wrapper = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptEntry(f"undecodable JSON ({exc})") from exc
    if not isinstance(wrapper, dict) or set(wrapper) != {"sha256", "body"} or not isinstance(wrapper["body"], dict):
        raise CorruptEntry("entry lacks the {sha256, body} envelope")
    if sha256_json(wrapper["body"]) != wrapper["sha256"]:
        raise CorruptEntry("checksum mismatch")
    return wrapper["body"]


@dataclass
class CacheEvent:
    """A corrupt entry that was found and dropped (kept for the caller's trace)."""

    key: str
    reason: str


@dataclass
class ResponseCache:
    """Get/put validated responses by request key; count hits and misses per model."""

    directory: Path
    corrupt: list[CacheEvent] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.directory = Path(self.directory).expanduser()
        self.directory.mkdir(parents=True, exist_ok=True)
        self._store = diskcache.Cache(str(self.directory / "responses"), disk=SafeDisk, timeout=60)
        self._stats = diskcache.Cache(str(self.directory / "stats"), disk=SafeDisk, timeout=60)

    def close(self) -> None:
        self._store.close()
        self._stats.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- lookups

    def contains(self, key: str) -> bool:
        """Whether an answer is stored under ``key`` (a presence test: the hit and miss counts are left alone)."""
        return key in self._store

    def get(self, key: str, model: str) -> dict[str, Any] | None:
        try:
            data = self._store.get(key)
            body = None if data is None else decode_entry(data)
        except CorruptEntry as exc:
            self._drop_corrupt(key, str(exc))
            body = None
        if body is not None and body.get("key") != key:
            self._drop_corrupt(key, "entry stored under another key")
            body = None
        self._stats.incr(f"{'hits' if body is not None else 'misses'}|{model}", default=0)
        return body

    def put(self, key: str, model: str, body: dict[str, Any]) -> None:
        """Store a validated response. ``add`` keeps the first writer's answer when workers race."""
        body = {**body, "key": key, "model": model, "stored_at": time.time()}
        self._store.add(key, encode_entry(body), tag=model)

    def delete(self, key: str) -> bool:
        return bool(self._store.delete(key))

    def _drop_corrupt(self, key: str, reason: str) -> None:
        log.warning("cache: dropped corrupt entry %s (%s); the call will be recomputed", key[:12], reason)
        self.corrupt.append(CacheEvent(key, reason))
        self._store.delete(key)
        self._stats.incr("corrupt|*", default=0)

    # -- maintenance (reads the index directly: diskcache has no group-by)

    def _index_rows(self, sql: str, args: tuple = ()) -> list[tuple]:
        con = sqlite3.connect(f"file:{self.directory / 'responses' / 'cache.db'}?mode=ro", uri=True, timeout=60)
        try:
            return con.execute(sql, args).fetchall()
        finally:
            con.close()

    def stats(self) -> dict[str, Any]:
        by_model: dict[str, dict[str, Any]] = {}
        for tag, count, size in self._index_rows("SELECT tag, COUNT(*), SUM(size) FROM Cache GROUP BY tag"):
            by_model.setdefault(str(tag), {"entries": 0, "hits": 0, "misses": 0})["entries"] = count
        for key in self._stats.iterkeys():
            kind, model = key.split("|", 1)
            if kind in ("hits", "misses"):
                by_model.setdefault(model, {"entries": 0, "hits": 0, "misses": 0})[kind] = int(self._stats[key])
        entries = sum(v["entries"] for v in by_model.values())
        return {"directory": str(self.directory), "entries": entries, "size_bytes": int(self._store.volume()),
                "corrupt_dropped": int(self._stats.get("corrupt|*", 0)), "by_model": by_model}

    def prune(self, older_than_s: float, model: str | None = None) -> int:
        cutoff = time.time() - older_than_s
        sql, args = "SELECT key FROM Cache WHERE store_time < ?", (cutoff,)
        if model is not None:
            sql, args = sql + " AND tag = ?", (cutoff, model)
        removed = 0
        for (key,) in self._index_rows(sql, args):
            removed += self.delete(key)
        return removed

    def __len__(self) -> int:
        return len(self._store)
