"""Several Ray workers share one cache directory and one cluster-wide limiter actor."""

import pytest

from madbench.gateway.cache import ResponseCache, decode_entry
from tests.fault_server import FaultServer


def _worker(cache_dir, url, worker, n):
    import asyncio
    import json
    import os

    from madbench.gateway import Gateway, LLMRequest, Message, ModelSpec, RateLimits, ResponseCache
    os.environ["FAKE_PROVIDER_KEY"] = "fake-key-value-1234"
    spec = ModelSpec(model="openai/fake", api_base=url, api_key_env="FAKE_PROVIDER_KEY",
                     limits=RateLimits(max_concurrency=3, rpm=6000))

    async def run():
        with ResponseCache(cache_dir) as cache:
            gw = Gateway(cache=cache)
            out = []
            for i in range(n):  # overlapping prompts: workers race on the same keys
                req = LLMRequest(model=spec.model, messages=[Message(role="user", content=f"shared {(i + worker) % 20}")])
                c = await gw.complete(req, spec, lambda content, s: json.loads(content))
                out.append((c.key, c.content, c.cached))
            return out, len(cache.corrupt)

    return asyncio.run(run())


@pytest.mark.slow
def test_four_ray_workers_share_one_cache_without_corruption(ray_local, tmp_path):
    ray = ray_local
    work = ray.remote(num_cpus=1)(_worker)
    with FaultServer(latency_s=0.01) as server:
        results = ray.get([work.remote(str(tmp_path), server.url, w, 40) for w in range(4)])
        http_calls = server.requests
    calls = [c for out, _ in results for c in out]
    assert sum(corrupt for _, corrupt in results) == 0
    contents = {}
    for key, content, _ in calls:
        contents.setdefault(key, set()).add(content)
    assert len(contents) == 20 and all(len(v) == 1 for v in contents.values())
    # each prompt reached the provider at most once per racing worker, and most calls were hits
    assert 20 <= http_calls <= 20 * 4 and sum(cached for _, _, cached in calls) == 160 - http_calls
    with ResponseCache(tmp_path) as cache:
        keys = list(cache._store.iterkeys())
        assert len(keys) == 20
        for key in keys:
            assert decode_entry(cache._store.get(key))["key"] == key  # every entry intact
        stats = cache.stats()
    assert stats["by_model"]["openai/fake"]["hits"] + stats["by_model"]["openai/fake"]["misses"] == 160


@pytest.mark.slow
def test_limiter_actor_is_shared_cluster_wide(ray_local):
    import asyncio

    from madbench.gateway.limiter import ray_limiter
    from madbench.gateway.models import RateLimits

    @ray_local.remote(num_cpus=1)
    def take(n):
        async def run():
            lim = ray_limiter("test|shared|", RateLimits(max_concurrency=2))
            for _ in range(n):
                lease = await lim.acquire(0)
                await lim.release(lease["lease_id"], "ok")
            return await lim.snapshot()
        return asyncio.run(run())

    ray_local.get([take.remote(5) for _ in range(3)])
    snap = asyncio.run(ray_limiter("test|shared|", RateLimits(max_concurrency=2)).snapshot())
    assert snap["granted"] == 15 and snap["in_flight"] == 0
