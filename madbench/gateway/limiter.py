"""The request queue in front of each (provider, model, api_base).

``AsyncLimiter`` queues callers FIFO until the buckets and a concurrency slot
allow them; it never rejects. Inside a Ray job the same class runs as one
named actor per limit key, so every worker on every node draws from one
budget; outside Ray (``madbench llm ask``, unit tests) it runs in-process.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import sys
import time
from typing import Any

from .bucket import LimiterCore
from .models import RateLimits

RAY_NAMESPACE = "madbench"

log = logging.getLogger(__name__)


class AsyncLimiter:
    def __init__(self, limits: RateLimits | dict[str, Any]):
        self.limits = limits if isinstance(limits, RateLimits) else RateLimits.model_validate(limits)
        self.core = LimiterCore(self.limits, time.monotonic())
        self._queue = asyncio.Lock()  # FIFO: asyncio locks wake waiters in arrival order
        self._slot_freed = asyncio.Event()

    async def acquire(self, est_tokens: float = 0.0) -> dict[str, Any]:
        start = time.monotonic()
        async with self._queue:
            while True:
                now = time.monotonic()
                wait = self.core.wait_for(est_tokens, now)
                if wait == 0.0:
                    lease = self.core.grant(est_tokens, now)
                    return {"lease_id": lease.lease_id, "waited_s": now - start}
                if math.isinf(wait):
                    self._slot_freed.clear()
                    with contextlib.suppress(TimeoutError):  # the timeout lets stale leases be reclaimed
                        await asyncio.wait_for(self._slot_freed.wait(), timeout=self.limits.lease_timeout_s / 10)
                else:
                    await asyncio.sleep(wait)

    async def release(self, lease_id: int, outcome: str, tokens_used: float | None = None,
                      retry_after: float | None = None) -> None:
        self.core.release(lease_id, outcome, time.monotonic(), tokens_used, retry_after)
        self._slot_freed.set()

    async def snapshot(self) -> dict[str, Any]:
        return self.core.snapshot()

    async def configure(self, limits: dict[str, Any]) -> bool:
        """Adopt new limits (a later batch changed them); in-flight leases carry over. Returns whether they changed."""
        new = RateLimits.model_validate(limits)
        if new == self.limits:
            return False
        leases = self.core.leases
        self.limits, self.core = new, LimiterCore(new, time.monotonic())
        self.core.leases = leases
        self._slot_freed.set()
        return True


class RayLimiterClient:
    """Awaitable facade over the named limiter actor.

    Nothing here blocks the caller's event loop (a runner actor is an async actor: a blocking ``ray.get`` would stall
    every run on it): the actor adopts ``limits`` on the first awaited call. A lease the actor grants to a caller that
    was cancelled while it waited (a failed run cancels its sibling turns) is handed back as soon as it is granted:
    a lease nobody releases holds a concurrency slot until ``lease_timeout_s`` (15 min by default), and a few of them
    stall every later call to the model."""

    def __init__(self, actor: Any, limits: RateLimits | None = None) -> None:
        self.actor = actor
        self._limits = limits
        self._configured: Any = None  # the ObjectRef of the configure call, once sent
        self._returning: set[asyncio.Task[Any]] = set()

    async def _configure(self) -> None:
        if self._limits is None:
            return
        if self._configured is None:
            self._configured = self.actor.configure.remote(self._limits.model_dump())  # the latest configuration applies
        await self._configured

    async def acquire(self, est_tokens: float = 0.0) -> dict[str, Any]:
        await self._configure()
        ref = self.actor.acquire.remote(est_tokens)
        try:
            lease: dict[str, Any] = await ref
        except asyncio.CancelledError:
            task = asyncio.ensure_future(self._hand_back(ref))
            self._returning.add(task)
            task.add_done_callback(self._returned)
            raise
        return lease

    async def _hand_back(self, ref: Any) -> None:
        lease = await ref
        await self.actor.release.remote(lease["lease_id"], "error")

    def _returned(self, task: asyncio.Task[Any]) -> None:
        self._returning.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # Not swallowed: the slot stays taken until lease_timeout_s, which the log must explain.
            log.error("limiter: could not hand back a lease granted to a cancelled call: %r", task.exception())

    async def release(self, lease_id: int, outcome: str, tokens_used: float | None = None,
                      retry_after: float | None = None) -> None:
        await self.actor.release.remote(lease_id, outcome, tokens_used, retry_after)

    async def snapshot(self) -> dict[str, Any]:
        await self._configure()
        snapshot: dict[str, Any] = await self.actor.snapshot.remote()
        return snapshot


def actor_name(limit_key: str) -> str:
    return "limiter-" + hashlib.sha256(limit_key.encode()).hexdigest()[:16]


def ray_limiter(limit_key: str, limits: RateLimits) -> RayLimiterClient:
    """Get or create the cluster-wide limiter actor for ``limit_key``.

    The actor is detached: a limiter created by one worker must outlive that
    worker, since every other worker queues on it. One actor per endpoint
    also means concurrent batches on one cluster share the provider's limits,
    as they must. It holds no CPU, lives on the head node and dies with the cluster.
    """
    import ray

    actor_cls = ray.remote(num_cpus=0, max_concurrency=10_000)(AsyncLimiter)
    # On the head node: a worker node can be lost mid-batch, and every run queues on this actor. A tiny claim
    # on the head's built-in resource places it there wherever the first caller runs.
    actor = actor_cls.options(name=actor_name(limit_key), namespace=RAY_NAMESPACE, get_if_exists=True,
                              lifetime="detached", resources={"node:__internal_head__": 0.001}).remote(limits.model_dump())
    return RayLimiterClient(actor, limits)


class LimiterPool:
    """One limiter per limit key for a gateway's lifetime (Ray actors when Ray is up)."""

    def __init__(self, use_ray: bool | None = None):
        self._use_ray = use_ray
        self._limiters: dict[str, AsyncLimiter | RayLimiterClient] = {}

    def get(self, limit_key: str, limits: RateLimits) -> AsyncLimiter | RayLimiterClient:
        if limit_key not in self._limiters:
            use_ray = self._use_ray
            if use_ray is None:
                use_ray = "ray" in sys.modules and sys.modules["ray"].is_initialized()
            self._limiters[limit_key] = ray_limiter(limit_key, limits) if use_ray else AsyncLimiter(limits)
        return self._limiters[limit_key]
