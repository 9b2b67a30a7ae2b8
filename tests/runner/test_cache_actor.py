"""The cluster's cache actor: leases that lapse when their holder is lost, and, on a real Ray, two actors with two
node-local copies sending an identical request once, the second served through the actor, then from its own copy."""

import os
from pathlib import Path

import pytest

from madbench.data.errors import InputError
from madbench.gateway import Gateway, LLMRequest, Message, ModelSpec
from madbench.runner import cache_actor
from madbench.runner.cache_actor import NODE_DIR_ENV, CacheActor, start_cache, stop_cache, wants_cluster_cache
from madbench.sim.provider import SimConfig, SimProvider

ROOT = Path(__file__).resolve().parents[2]


def test_a_lease_is_one_holders_until_released_or_lapsed(tmp_path, monkeypatch):
    actor = CacheActor(str(tmp_path / "c"))
    assert actor.acquire("k", "a", "n1") and actor.acquire("k", "a", "n1")  # its own lease, taken again
    assert not actor.acquire("k", "b", "n2") and not actor.acquire("k", "b", "n2")
    assert actor.stats()["by_node"]["n2"]["waits"] == 1  # one wait, however often it asked
    actor.release("k", "b")  # not b's to release
    assert not actor.acquire("k", "b", "n2")
    actor.release("k", "a")
    assert actor.acquire("k", "b", "n2")
    monkeypatch.setattr(cache_actor, "LEASE_S", -1.0)  # b's lease lapses at once: b was lost with its node
    assert actor.acquire("k", "b", "n2")  # (renewed by its holder: still b's)
    assert actor.acquire("k", "c", "n3") and actor.stats()["leases_lapsed"] == 1


def test_the_cluster_cache_is_for_clusters_without_shared_storage(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv(cache_actor.SHARED_ENV, raising=False)
    assert not wants_cluster_cache(None) and wants_cluster_cache("ray://head:10001")
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")  # a `ray job submit` job's driver
    assert wants_cluster_cache(None)
    monkeypatch.setenv(cache_actor.SHARED_ENV, "1")
    assert not wants_cluster_cache(None)
    monkeypatch.setenv(cache_actor.SHARED_ENV, "maybe")
    with pytest.raises(InputError, match="not a yes or no"):
        wants_cluster_cache(None)


class Asker:
    """A runner actor's cache and gateway, on a pretend node of its own (its copy in ``$MADBENCH_NODE_CACHE_DIR``)."""

    def __init__(self, plan, node: str):
        import ray
        self.cache = plan.open(node, ray.get_runtime_context().get_actor_id())
        self.gateway = Gateway(cache=self.cache)

    async def ask(self, url: str, text: str) -> dict:
        req = LLMRequest(model="openai/sim", messages=[Message(role="user", content=text)], max_tokens=64)
        c = await self.gateway.complete(req, ModelSpec(model="openai/sim", api_base=url))
        return {"cached": c.cached, "content": c.content, "copy": str(self.cache.directory)}


@pytest.mark.slow
def test_two_nodes_send_an_identical_request_once_and_the_second_keeps_a_copy(ray_local, tmp_path):
    ray = ray_local
    plan = start_cache(ray, tmp_path / "head-cache", cluster=True)
    cls = ray.remote(num_cpus=0)(Asker)
    askers = [cls.options(runtime_env={"env_vars": {NODE_DIR_ENV: str(tmp_path / f"node{i}"),
                                                    "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}})
              .remote(plan, f"node-{i}") for i in (1, 2)]
    try:
        with SimProvider(SimConfig(latency_median_s=1.0, latency_sigma=0.01)) as sim:
            first = ray.get([a.ask.remote(sim.url, "same question") for a in askers])
            assert sim.stats.requests == 1  # the second node waited for the first's answer
            assert sorted(f["cached"] for f in first) == [False, True] and len({f["content"] for f in first}) == 1
            assert {f["copy"] for f in first} == {str(tmp_path / "node1"), str(tmp_path / "node2")}
            again = ray.get([a.ask.remote(sim.url, "same question") for a in askers])
            assert all(a["cached"] for a in again) and sim.stats.requests == 1
        stats = stop_cache(ray, plan)
    finally:
        for a in askers:
            ray.kill(a)
    waiter = next(n for n, c in stats["by_node"].items() if c["waits"])
    payer = ({"node-1", "node-2"} - {waiter}).pop()
    assert stats["by_node"][waiter]["hits"] == 1 and stats["by_node"][payer]["stores"] == 1
    assert stats["leases_held"] == 0  # asked again: both answered from their own copies, never the actor
