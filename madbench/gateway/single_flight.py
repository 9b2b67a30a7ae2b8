"""Single flight: identical requests in flight at the same time are sent once.

Two runs of a batch (or two batches sharing one cache) often ask the very same question at the same moment:
the same memo, agent and phase under two configs whose difference does not reach the prompt, or a resumed
run racing its own replay. Without coordination each pays. With it, the first caller of a cache key *leads*:
it holds the key while it calls the provider and stores the answer; the others wait, then find the answer
in the cache. A leader that fails releases the key and the next waiter calls in its turn (a failure is not
an answer to share).

Two levels, both keyed by the request's cache key:

* in one process (a runner actor's event loop): an ``asyncio.Lock`` per key;
* across processes sharing the cache directory (other actors, other drivers; other nodes where the cache
  is on shared storage that honours ``flock``): an exclusive ``flock`` on one of ``SHARDS`` lock files
  under ``<cache>/inflight/``. The OS drops a dead holder's lock, so a killed process never blocks a key. A holder
  removes its lock file as it lets go (still holding it), and a caller that got the lock of a file no longer at
  its path takes the one there now: so lock files exist only while held, and ``sweep`` removes those a killed holder
  left behind.
  Keys share shard files, so two different requests may occasionally wait on each other; with 4,096 shards
  and a few dozen calls in flight that is rare and costs one call's latency, never a wrong answer.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import os
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from pathlib import Path
from typing import Protocol

#: What a caller enters while it waits for another holder of its key (``Provider.waiting_for_peer``).
Waiting = Callable[[], AbstractAsyncContextManager[object]]


class Flight(Protocol):
    """A single flight: ``SingleFlight`` on one machine, ``runner.cache_actor.ClusterFlight`` across a cluster."""

    def hold(self, key: str, waiting: Waiting = nullcontext) -> AbstractAsyncContextManager[None]:
        """``async with flight.hold(key, waiting):`` at most one holder of ``key`` at a time; ``waiting()`` is
        entered while this caller waits for another holder (only then)."""
        ...

#: Lock files under ``<cache>/inflight/`` (each created by a holder and removed by it as it lets go).
SHARDS = 4096
#: How often a waiter in another process looks again (it waits for a whole provider call, so 50 ms is cheap).
POLL_S = 0.05


class SingleFlight:
    """``async with flight.hold(key):`` — at most one holder of ``key`` at a time, in this process and across
    processes sharing ``directory`` (``None``: this process only)."""

    def __init__(self, directory: Path | None):
        self.directory = Path(directory) if directory is not None else None
        self._locks: dict[str, asyncio.Lock] = {}
        self._waiting: dict[str, int] = {}

    @asynccontextmanager
    async def hold(self, key: str, waiting: Waiting = nullcontext) -> AsyncIterator[None]:
        """``waiting()`` is entered while this caller waits for another holder of ``key`` (only then): a provider
        batch's collector counts the caller's run as blocked on a model call meanwhile, as it is."""
        lock = self._locks.setdefault(key, asyncio.Lock())
        self._waiting[key] = self._waiting.get(key, 0) + 1
        try:
            if lock.locked():
                async with waiting():
                    await lock.acquire()
            else:
                await lock.acquire()
            try:
                fd = await self._flock(key, waiting) if self.directory is not None else None
                try:
                    yield
                finally:
                    if fd is not None:
                        _remove_held(fd, self.shard_path(key))
                        os.close(fd)  # closing drops the flock
            finally:
                lock.release()
        finally:
            self._waiting[key] -= 1
            if not self._waiting[key]:  # nobody else holds or awaits this key: forget it
                del self._waiting[key], self._locks[key]

    def shard_path(self, key: str) -> Path:
        assert self.directory is not None
        # sha256, not hash(): the shard must be the same in every process (hash() is salted per process)
        return self.directory / f"{int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % SHARDS:04d}.lock"

    async def _flock(self, key: str, waiting: Waiting) -> int:
        assert self.directory is not None  # hold() takes a flock only with a directory
        path = self.shard_path(key)
        while True:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                if not _try_flock(fd):
                    async with waiting():
                        while not _try_flock(fd):
                            await asyncio.sleep(POLL_S)
            except BaseException:
                os.close(fd)
                raise
            if _linked(fd, path):
                return fd
            os.close(fd)  # its holder removed this file as it let go: lock the one at the path now

    def sweep(self) -> int:
        """Remove the lock files nobody holds (left by a holder that was killed); the number removed."""
        if self.directory is None or not self.directory.is_dir():
            return 0
        removed = 0
        for path in self.directory.glob("*.lock"):
            try:
                fd = os.open(path, os.O_RDWR)
            except FileNotFoundError:
                continue  # its holder removed it meanwhile
            try:
                if _try_flock(fd) and _linked(fd, path):
                    _remove_held(fd, path)
                    removed += 1
            finally:
                os.close(fd)
        return removed


def _try_flock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _linked(fd: int, path: Path) -> bool:
    """Whether the open file ``fd`` is still the file at ``path`` (not removed, not replaced)."""
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def _remove_held(fd: int, path: Path) -> None:
    """Remove the lock file ``fd`` (held by this caller) from ``path``, unless another file has taken its place."""
    if _linked(fd, path):
        path.unlink()
