"""The cluster-wide LLM response cache: one Ray actor owns the disk cache on the driver's node.

Without storage that every node mounts, a cache directory per node means each node pays again for what
another already paid for. So on a cluster (``madbench run --address …``, or a ``ray job submit`` job) the
driver starts one ``CacheActor`` on its own node, owning the batch's cache directory there, and each runner
actor keeps a ``madbench.gateway.cache.NodeCache``:

* on the driver's node, the cache directory itself (read directly; the actor only arbitrates flights);
* on every other node, a node-local copy (the same path on that node's disk, or ``$MADBENCH_NODE_CACHE_DIR``),
  looked up first; a miss reads through to the actor and keeps what it finds, and every new answer is written
  to both. A call paid on one node is a hit on every other.

Single flight across nodes: the actor holds the keys in flight. A caller leases a key before paying for it;
another caller of the same key, on any node, waits until the lease is released, then finds the answer in the
cache. A lease lapses after ``LEASE_S`` unless its holder renews it (every ``RENEW_S`` while its call runs), so
a holder lost with its node frees its keys within ``LEASE_S``.

With ``MADBENCH_CACHE_SHARED=1`` (the cache directory is on storage every node mounts, e.g. EFS or NFS with
``flock``) or on a local Ray, there is no actor: every runner actor opens the directory, as before.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from madbench.data.errors import InputError
from madbench.gateway.cache import NodeCache, ResponseCache
from madbench.gateway.single_flight import SingleFlight, Waiting

#: Set to 1 when the cache directory is on storage every node mounts: each node opens it, no cache actor.
SHARED_ENV = "MADBENCH_CACHE_SHARED"
#: Where a node other than the driver's keeps its copy of the cluster's cache (default: the same path as the driver's).
NODE_DIR_ENV = "MADBENCH_NODE_CACHE_DIR"
#: A lease lapses this long after it was taken or last renewed.
LEASE_S = 20.0
RENEW_S = 5.0
#: How often a caller waiting for a key asks again (it waits for a whole provider call: 50 ms is cheap).
POLL_S = 0.05


class CacheActor:
    """The cluster's cache (a Ray actor, one call at a time): the disk cache on its node, and the keys in flight."""

    def __init__(self, directory: str):
        self.cache = ResponseCache(Path(directory))
        self.leases: dict[str, tuple[str, float]] = {}  # key → (holder, deadline)
        self.waiting: set[tuple[str, str]] = set()
        self.by_node: dict[str, dict[str, int]] = {}
        self.lapsed = 0

    def _count(self, node: str, what: str) -> None:
        counts = self.by_node.setdefault(node, {"hits": 0, "misses": 0, "stores": 0, "waits": 0})
        counts[what] += 1

    def fetch(self, key: str, model: str, node: str) -> dict[str, Any] | None:
        body = self.cache.get(key, model)
        self._count(node, "hits" if body is not None else "misses")
        return body

    def store(self, key: str, model: str, body: dict[str, Any], node: str) -> None:
        self.cache.put(key, model, body)
        self._count(node, "stores")

    def contains(self, key: str) -> bool:
        return self.cache.contains(key)

    def drop(self, key: str) -> None:
        self.cache.delete(key)

    def acquire(self, key: str, holder: str, node: str) -> bool:
        """Lease ``key`` to ``holder`` unless another holder's lease on it is current."""
        now = time.monotonic()
        held = self.leases.get(key)
        if held is not None and held[0] != holder and held[1] >= now:
            if (key, holder) not in self.waiting:
                self.waiting.add((key, holder))
                self._count(node, "waits")
            return False
        if held is not None and held[0] != holder:
            self.lapsed += 1  # its holder stopped renewing: lost with its node
        self.waiting.discard((key, holder))
        self.leases[key] = (holder, now + LEASE_S)
        return True

    def renew(self, key: str, holder: str) -> bool:
        held = self.leases.get(key)
        if held is None or held[0] != holder:
            return False
        self.leases[key] = (holder, time.monotonic() + LEASE_S)
        return True

    def release(self, key: str, holder: str) -> None:
        if self.leases.get(key, ("",))[0] == holder:
            del self.leases[key]

    def stats(self) -> dict[str, Any]:
        """Per requesting node: hits and misses served through the actor, answers stored, waits for a key in flight."""
        return {"directory": str(self.cache.directory), "by_node": self.by_node, "leases_held": len(self.leases),
                "leases_lapsed": self.lapsed}


class ClusterFlight:
    """``async with flight.hold(key):`` — at most one holder of ``key`` on the whole cluster (the actor's lease),
    and one coroutine of this process asking for it."""

    def __init__(self, handle, holder: str, node: str):
        self.handle, self.holder, self.node = handle, holder, node
        self.local = SingleFlight(None)
        self.pending: dict[str, Any] = {}  # key → the ref of its answer's store, awaited before the key is freed
        self.held: set[str] = set()

    @asynccontextmanager
    async def hold(self, key: str, waiting: Waiting = nullcontext) -> AsyncIterator[None]:
        async with self.local.hold(key, waiting):
            if not await self.handle.acquire.remote(key, self.holder, self.node):
                async with waiting():
                    while not await self.handle.acquire.remote(key, self.holder, self.node):
                        await asyncio.sleep(POLL_S)
            self.held.add(key)
            renew = asyncio.ensure_future(self._renew(key))
            try:
                yield
            finally:
                renew.cancel()
                self.held.discard(key)
                stored = self.pending.pop(key, None)
                try:
                    if stored is not None:
                        await stored  # the answer is in the cluster's cache before anyone else may ask for it
                finally:
                    await self.handle.release.remote(key, self.holder)

    async def _renew(self, key: str) -> None:
        while True:
            await asyncio.sleep(RENEW_S)
            await self.handle.renew.remote(key, self.holder)


class RayCacheRemote:
    """The ``RemoteCache`` a runner actor's ``NodeCache`` reads through to: the ``CacheActor``.

    The gateway awaits the ``*_async`` lookups, so a runner actor's event loop never blocks on the actor; the
    blocking ones serve the synchronous callers (the CLI's cache commands, a driver's own checks)."""

    def __init__(self, handle, node: str, holder: str):
        self.handle, self.node = handle, node
        self.flight = ClusterFlight(handle, holder, node)

    def fetch(self, key: str, model: str) -> dict[str, Any] | None:
        import ray
        return ray.get(self.handle.fetch.remote(key, model, self.node))

    def store(self, key: str, model: str, body: dict[str, Any]) -> None:
        ref = self.handle.store.remote(key, model, body, self.node)
        if key in self.flight.held:
            self.flight.pending[key] = ref

    def contains(self, key: str) -> bool:
        import ray
        return ray.get(self.handle.contains.remote(key))

    def drop(self, key: str) -> None:
        import ray
        ray.get(self.handle.drop.remote(key))  # waited for: a store of a fresh answer must not overtake it

    async def fetch_async(self, key: str, model: str) -> dict[str, Any] | None:
        return await self.handle.fetch.remote(key, model, self.node)

    async def contains_async(self, key: str) -> bool:
        return await self.handle.contains.remote(key)

    async def drop_async(self, key: str) -> None:
        await self.handle.drop.remote(key)  # awaited: a store of a fresh answer must not overtake it

    def single_flight(self) -> ClusterFlight:
        return self.flight


@dataclass(frozen=True)
class CachePlan:
    """How a batch's runner actors reach the response cache (picklable: handed to each actor)."""

    directory: str
    #: The ``CacheActor`` (None: every node opens ``directory`` itself: a local Ray, or shared storage).
    actor: Any = None
    #: The node that owns ``directory`` (the driver's).
    owner_node: str | None = None

    def ready(self) -> list[Any]:
        """What answers once the cache actor is up (nothing without one), for ``ray.get``."""
        return [] if self.actor is None else [self.actor.stats.remote()]

    def open(self, node: str, holder: str) -> ResponseCache:
        """The cache of a runner actor on ``node`` (``holder``: its name in the cluster's leases)."""
        if self.actor is None:
            return ResponseCache(Path(self.directory))
        remote = RayCacheRemote(self.actor, node, holder)
        if node == self.owner_node:
            return NodeCache(Path(self.directory), remote=remote, read_through=False)
        return NodeCache(Path(os.environ.get(NODE_DIR_ENV) or self.directory), remote=remote)


def wants_cluster_cache(address: str | None) -> bool:
    """A cluster cache when joining a cluster (``address`` or ``$RAY_ADDRESS``, as in a job), unless
    ``$MADBENCH_CACHE_SHARED`` says the cache directory is on storage every node mounts."""
    shared = os.environ.get(SHARED_ENV, "").strip().lower()
    if shared not in ("", "0", "1", "true", "false", "yes", "no"):
        raise InputError(f"${SHARED_ENV}", f"{shared!r} is not a yes or no",
                         "set it to 1 when the cache directory is on storage every node mounts, else 0 or leave it unset")
    return shared not in ("1", "true", "yes") and bool(address or os.environ.get("RAY_ADDRESS"))


def start_cache(ray, cache_dir: str | Path, cluster: bool, wait: bool = True) -> CachePlan:
    """The batch's ``CachePlan``: with ``cluster``, a ``CacheActor`` on this (the driver's) node, up and answering
    (``wait`` False: started; the caller waits for ``CachePlan.ready`` before any run is sent)."""
    if not cluster:
        return CachePlan(str(cache_dir))
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = ray.get_runtime_context().get_node_id()
    # Restarted on a crash (its leases are lost, which costs at most a duplicate call); its calls are idempotent.
    cls = ray.remote(num_cpus=0, max_restarts=2, max_task_retries=2)(CacheActor)
    handle = cls.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=here, soft=False)).remote(str(cache_dir))
    plan = CachePlan(str(cache_dir), handle, here)
    if wait:
        ray.get(plan.ready())
    return plan


def stop_cache(ray, plan: CachePlan) -> dict[str, Any] | None:
    """The cache actor's figures (None without one), then stop it."""
    if plan.actor is None:
        return None
    stats = ray.get(plan.actor.stats.remote())
    ray.kill(plan.actor)
    return stats
