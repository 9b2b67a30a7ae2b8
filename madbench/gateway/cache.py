"""The on-disk LLM response cache.

diskcache gives us a process-safe SQLite index (several Ray workers may share
one directory). Two things are added on top:

* Values are JSON bytes, never pickles. ``SafeDisk`` refuses to store or read
  pickled keys or values, so a shared cache directory cannot run code.
* Each value carries the sha256 of its own body. A truncated file, flipped
  bytes or a malformed row is detected on read, reported, dropped, and the
  call is recomputed. Errors are never cached.

The checksum catches accidents, not edits: whoever rewrites an answer can
recompute it. Tamper evidence lives outside the cache: each run's trace
records ``answer_sha256`` of every answer it used, and ``inspect`` gives the
hash of what the cache holds now (``madbench cache verify`` compares them).

Commands that only read the cache (``cache stats``, ``cache verify`` without ``--drop``, the dry runs) open it with
``read_only=True``: nothing is created or written (diskcache itself always opens its database for writing), so a
cache in a directory this user cannot write can still be inspected. Opening one for writing there is an
``InputError`` naming the directory (``write_problem``), with the preflight's wording, never a traceback.

On a cluster without shared storage each node keeps a ``NodeCache``: its own
disk copy, consulted first, in front of a ``RemoteCache`` that another process
owns (runner/cache_actor.py: a Ray actor holding the disk cache on the head
node). A miss reads through to it and keeps a copy; an answer is written to
both; and identical requests in flight anywhere on the cluster are sent once,
through the remote's single flight. The gateway sees only the ``ResponseCache``
interface and asks the cache for its ``single_flight()``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, Protocol, Self
from urllib.parse import quote

import diskcache
from diskcache.core import MODE_BINARY, MODE_RAW

from madbench.data.errors import InputError
from madbench.data.home import LLM_CACHE, home_path

from .request import canonical_json, sha256_json
from .single_flight import Flight, SingleFlight

log = logging.getLogger("madbench.cache")



class CorruptEntry(Exception):
    """A cache value failed to decode or its checksum did not match."""


class UnsafeEntry(CorruptEntry):
    """A cache row asks to be unpickled; we never do that."""


class SafeDisk(diskcache.Disk):  # type: ignore[misc]  # diskcache ships no types: its Disk is Any
    """A diskcache Disk that only handles str keys, and bytes values or integer counters."""

    def put(self, key: object) -> Any:
        if not isinstance(key, str):
            raise TypeError(f"cache keys must be str, got {type(key).__name__}")
        return super().put(key)

    def get(self, key: Any, raw: bool) -> Any:
        if not raw:
            raise UnsafeEntry("cache key stored as a pickle")
        return super().get(key, raw)

    def store(self, value: object, read: bool, key: Any = diskcache.core.UNKNOWN) -> Any:
        if not isinstance(value, (bytes, int)) or isinstance(value, bool) or read:
            raise TypeError("cache values must be JSON bytes (or integer counters)")
        return super().store(value, read, key=key)

    def fetch(self, mode: int, filename: str | None, value: Any, read: bool) -> bytes | int:
        if mode not in (MODE_RAW, MODE_BINARY) or read:
            raise UnsafeEntry(f"cache value stored in mode {mode}; only raw JSON bytes are read")
        data = super().fetch(mode, filename, value, read)
        if not isinstance(data, (bytes, int)):
            raise CorruptEntry(f"cache value has type {type(data).__name__}, expected bytes")
        return data


def resolve_cache_dir(cli: str | Path | None = None, config: str | Path | None = None) -> Path:
    """--cache-dir, else $MADBENCH_CACHE_DIR, else the batch config, else $MADBENCH_HOME/llm (~/.cache/madbench/llm)."""
    for candidate in (cli, os.environ.get("MADBENCH_CACHE_DIR") or None, config):
        if candidate:
            return Path(candidate).expanduser()
    return home_path(LLM_CACHE)


def answer_sha256(content: str) -> str:
    """The hash a trace records for an answer: sha256 of its exact text, UTF-8."""
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


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


@dataclass(frozen=True)
class EntryState:
    """What the cache holds under one key, read without side effects (``ResponseCache.inspect``)."""

    #: present | missing | corrupt
    status: str
    answer_sha256: str | None = None
    reason: str | None = None


def _read_uri(db: Path) -> str:
    """A read-only SQLite URI for ``db``. Where this user cannot write its folder, also ``immutable``: SQLite cannot
    create a WAL database's shared-memory file there, and would refuse to read at all."""
    immutable = "" if os.access(db.parent, os.W_OK | os.X_OK) and os.access(db, os.W_OK) else "&immutable=1"
    return f"file:{quote(str(db))}?mode=ro{immutable}"


class _ReadIndex:
    """A diskcache directory read through a read-only SQLite connection: the part of ``diskcache.Cache`` that
    ``ResponseCache`` reads with (``get``, ``in``, ``iterkeys``, ``[]``, ``volume``, ``len``), writing nothing. A
    directory without a database reads as empty."""

    def __init__(self, directory: Path):
        self.disk = SafeDisk(str(directory))
        db = directory / "cache.db"
        self._con = sqlite3.connect(_read_uri(db), uri=True, timeout=60) if db.is_file() else None

    def _rows(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return [] if self._con is None else self._con.execute(sql, args).fetchall()

    def get(self, key: str) -> Any:
        rows = self._rows("SELECT mode, filename, value FROM Cache WHERE key = ? AND raw = 1 AND "
                          "(expire_time IS NULL OR expire_time > ?)", (key, time.time()))
        if not rows:
            return None
        mode, filename, value = rows[0]
        return self.disk.fetch(mode, filename, value, False)

    def __contains__(self, key: str) -> bool:
        return self.get(key) is not None

    def __getitem__(self, key: str) -> Any:
        value = self.get(key)
        if value is None:
            raise KeyError(key)
        return value

    def iterkeys(self) -> Iterator[Any]:
        for key, raw in self._rows("SELECT key, raw FROM Cache ORDER BY rowid"):
            yield self.disk.get(key, raw)

    def _setting(self, name: str) -> int:
        rows = self._rows("SELECT value FROM Settings WHERE key = ?", (name,))
        return int(rows[0][0]) if rows else 0

    def volume(self) -> int:
        pages = self._rows("PRAGMA page_count")[0][0] * self._rows("PRAGMA page_size")[0][0] if self._con else 0
        return pages + self._setting("size")

    def __len__(self) -> int:
        return self._setting("count")

    def close(self) -> None:
        if self._con is not None:
            self._con.close()

    def _refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("this cache was opened read_only: get, put, delete and prune write to it")

    incr = decr = add = delete = _refuse  # diskcache.Cache's writes, which ResponseCache calls


def blocks_writing(path: Path, mode: int) -> bool:
    """Whether this user lacks ``mode`` on ``path``. A file listed a moment ago may be gone (a journal or temporary
    file another process finished with): ``os.access`` says no for it, but what no longer exists blocks nothing."""
    return not os.access(path, mode) and path.exists()


def write_problem(directory: Path) -> InputError | None:
    """Why a cache cannot be opened for writing in ``directory``, in the preflight's words, or None: its path runs
    through a file, or this user cannot write the directory (or the folder it would be created in), its databases'
    folders and files, or its single-flight folder."""
    existing = next(p for p in [directory, *directory.parents] if p.exists())
    if not existing.is_dir():
        return InputError(directory, f"the LLM cache directory's path runs through a file ({existing})",
                          "choose another directory (--cache-dir)")
    if existing != directory:  # created there
        paths = [existing]
    else:
        subs = [directory / sub for sub in ("responses", "stats", "inflight")]
        paths = [directory] + [p for sub in subs for p in (sub, *sorted(sub.glob("cache.db*"))) if p.exists()]
    blocked = next((p for p in paths if blocks_writing(p, os.W_OK | (os.X_OK if p.is_dir() else 0))), None)
    if blocked is None:
        return None
    return InputError(None, f"the LLM cache directory {directory} is read-only ({blocked} is not writable by this user)",
                      f"make it writable (chmod -R u+w {directory}) or choose another directory (--cache-dir)")


@dataclass
class ResponseCache:
    """Get/put validated responses by request key; count hits and misses per model."""

    directory: Path
    corrupt: list[CacheEvent] = field(default_factory=list)
    #: Read and write nothing else: see the module's docstring (``get``, ``put``, ``delete`` and ``prune`` write).
    read_only: bool = field(default=False, kw_only=True)

    def __post_init__(self) -> None:
        self.directory = Path(self.directory).expanduser()
        self._store: _ReadIndex | diskcache.Cache
        self._stats: _ReadIndex | diskcache.Cache
        if self.read_only:
            if self.directory.exists() and not self.directory.is_dir():
                raise InputError(self.directory, "the LLM cache directory is a file", "give the cache's directory (--cache-dir)")
            self._store, self._stats = _ReadIndex(self.directory / "responses"), _ReadIndex(self.directory / "stats")
            return
        problem = write_problem(self.directory)
        if problem is not None:
            raise problem
        self.directory.mkdir(parents=True, exist_ok=True)
        self._store = diskcache.Cache(str(self.directory / "responses"), disk=SafeDisk, timeout=60)
        self._stats = diskcache.Cache(str(self.directory / "stats"), disk=SafeDisk, timeout=60)
        SingleFlight(self.directory / "inflight").sweep()  # the lock files of holders killed mid-call

    def close(self) -> None:
        self._store.close()
        self._stats.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
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

    # The gateway's lookups, awaited: this node's disk answers at once; a ``NodeCache`` awaits the cluster's cache
    # there instead of blocking its actor's event loop on the round trip.

    async def lookup(self, key: str, model: str) -> dict[str, Any] | None:
        return self.get(key, model)

    async def has(self, key: str) -> bool:
        return self.contains(key)

    async def forget(self, key: str) -> bool:
        return self.delete(key)

    def take_back_miss(self, model: str) -> None:
        """A caller that missed, waited for an identical request in flight and was then served its answer counts one
        hit, not a miss and a hit (so hits + misses is the number of lookups that callers made)."""
        self._stats.decr(f"misses|{model}", default=0)

    def put(self, key: str, model: str, body: dict[str, Any]) -> None:
        """Store a validated response. ``add`` keeps the first writer's answer when workers race."""
        body = {**body, "key": key, "model": model, "stored_at": time.time()}
        self._store.add(key, encode_entry(body), tag=model)

    def inspect(self, key: str) -> EntryState:
        """The state of the entry under ``key`` and its answer's hash; unlike ``get``, counts nothing and drops nothing."""
        try:
            data = self._store.get(key)
            body = None if data is None else decode_entry(data)
        except CorruptEntry as exc:
            return EntryState("corrupt", reason=str(exc))
        if body is None:
            return EntryState("missing")
        content = body.get("response", {}).get("content") if isinstance(body.get("response"), dict) else None
        if body.get("key") != key or not isinstance(content, str):
            return EntryState("corrupt", reason="entry stored under another key" if body.get("key") != key else "entry holds no answer text")
        return EntryState("present", answer_sha256(content))

    def delete(self, key: str) -> bool:
        return bool(self._store.delete(key))

    def single_flight(self) -> Flight:
        """What keeps identical requests from being sent twice at once: a flock per key under ``inflight/``, which
        every process sharing this directory honours (on one machine, or on shared storage that supports flock)."""
        return SingleFlight(self.directory / "inflight")

    def _drop_corrupt(self, key: str, reason: str) -> None:
        log.warning("cache: dropped corrupt entry %s (%s); the call will be recomputed", key[:12], reason)
        self.corrupt.append(CacheEvent(key, reason))
        self._store.delete(key)
        self._stats.incr("corrupt|*", default=0)

    # -- maintenance (reads the index directly: diskcache has no group-by)

    def _index_rows(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        db = self.directory / "responses" / "cache.db"
        if not db.is_file():
            return []  # a read-only open of a cache that was never written: empty
        con = sqlite3.connect(_read_uri(db), uri=True, timeout=60)
        try:
            return con.execute(sql, args).fetchall()
        finally:
            con.close()

    def stats(self) -> dict[str, Any]:
        by_model: dict[str, dict[str, Any]] = {}
        for tag, count, _size in self._index_rows("SELECT tag, COUNT(*), SUM(size) FROM Cache GROUP BY tag"):
            by_model.setdefault(str(tag), {"entries": 0, "hits": 0, "misses": 0})["entries"] = count
        counters = self._counters()
        for key, count in counters.items():
            kind, model = key.split("|", 1)
            if kind in ("hits", "misses"):
                by_model.setdefault(model, {"entries": 0, "hits": 0, "misses": 0})[kind] = count
        entries = sum(v["entries"] for v in by_model.values())
        return {"directory": str(self.directory), "entries": entries, "size_bytes": int(self._store.volume()),
                "corrupt_dropped": counters.get("corrupt|*", 0), "by_model": by_model}

    def _counters(self) -> dict[str, int]:
        """The statistics database's ``kind|model`` counters. A row madbench cannot have written (a pickled key or
        value, a key without ``|``, a value that is not a count) is bad input: the statistics are only counts, so
        the fix is to delete them; the answers live in ``responses/`` and are not touched."""
        where = self.directory / "stats"
        try:
            counters = {key: self._stats[key] for key in self._stats.iterkeys()}
        except UnsafeEntry:
            raise InputError(where, "the cache's statistics database holds a pickled entry; madbench never writes one",
                             f"delete {where}; the cached answers are unaffected") from None
        for key, value in counters.items():
            if "|" not in key or not isinstance(value, int):
                raise InputError(where, f"the cache's statistics database holds an entry madbench did not write ({key[:40]!r})",
                                 f"delete {where}; the cached answers are unaffected")
        return counters

    def prune(self, older_than_s: float, model: str | None = None) -> int:
        cutoff = time.time() - older_than_s
        args: tuple[float | str, ...]
        sql, args = "SELECT key FROM Cache WHERE store_time < ?", (cutoff,)
        if model is not None:
            sql, args = sql + " AND tag = ?", (cutoff, model)
        removed = 0
        for (key,) in self._index_rows(sql, args):
            removed += self.delete(key)
        return removed

    def __len__(self) -> int:
        return len(self._store)


class RemoteCache(Protocol):
    """A cache another process owns, as a ``NodeCache`` reaches it (runner.cache_actor implements it on Ray).

    ``fetch`` returns a stored entry's body, already checked (a corrupt entry is dropped there and is a miss);
    ``store`` may return before the entry is stored, as long as it is stored before the key's single flight,
    from ``single_flight()``, lets the next caller in."""

    def fetch(self, key: str, model: str) -> dict[str, Any] | None: ...

    def store(self, key: str, model: str, body: dict[str, Any]) -> None: ...

    def contains(self, key: str) -> bool: ...

    def drop(self, key: str) -> None: ...

    async def fetch_async(self, key: str, model: str) -> dict[str, Any] | None: ...

    async def contains_async(self, key: str) -> bool: ...

    async def drop_async(self, key: str) -> None: ...

    def single_flight(self) -> Flight: ...


@dataclass
class NodeCache(ResponseCache):
    """This node's disk copy in front of the cluster's cache: looked up first; a miss reads through to ``remote``
    and keeps what it finds; answers are written to both. With ``read_through=False`` this directory *is* the
    cluster's (the node that owns it): only the single flight goes through ``remote``."""

    remote: RemoteCache | None = None
    read_through: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.remote is None:
            raise TypeError("NodeCache needs the remote cache it stands in front of")

    @property
    def _cluster(self) -> RemoteCache:
        assert self.remote is not None  # __post_init__ refuses None
        return self.remote

    def get(self, key: str, model: str) -> dict[str, Any] | None:
        body = super().get(key, model)
        if body is not None or not self.read_through:
            return body
        body = self._cluster.fetch(key, model)
        if body is not None:  # keep the entry as the cluster stored it (its stored_at included)
            self._store.add(key, encode_entry(body), tag=model)
        return body

    def contains(self, key: str) -> bool:
        return super().contains(key) or (self.read_through and self._cluster.contains(key))

    async def lookup(self, key: str, model: str) -> dict[str, Any] | None:
        body = super().get(key, model)
        if body is not None or not self.read_through:
            return body
        body = await self._cluster.fetch_async(key, model)
        if body is not None:
            self._store.add(key, encode_entry(body), tag=model)
        return body

    async def has(self, key: str) -> bool:
        return super().contains(key) or (self.read_through and await self._cluster.contains_async(key))

    async def forget(self, key: str) -> bool:
        here = super().delete(key)
        if self.read_through:
            await self._cluster.drop_async(key)
        return here

    def put(self, key: str, model: str, body: dict[str, Any]) -> None:
        super().put(key, model, body)
        if self.read_through:
            self._cluster.store(key, model, body)

    def delete(self, key: str) -> bool:
        here = super().delete(key)
        if self.read_through:
            self._cluster.drop(key)
        return here

    def single_flight(self) -> Flight:
        return self._cluster.single_flight()
