"""A node's cache in front of the cluster's: read-through with a local copy, write-through, the remote's single flight."""

import asyncio

from madbench.gateway import Gateway
from madbench.gateway.cache import NodeCache, ResponseCache

BODY = {"response": {"content": '{"a": 1}', "model_used": "m", "is_llm": True, "prompt_tokens": 3,
                     "completion_tokens": 2, "cost_usd": None, "weight_policy": "strict"}}


class DiskRemote:
    """A RemoteCache over another directory, counting what it is asked."""

    def __init__(self, directory):
        self.cache = ResponseCache(directory)
        self.asked: list[str] = []
        self.flight = object()

    def fetch(self, key, model):
        self.asked.append("fetch")
        return self.cache.get(key, model)

    def store(self, key, model, body):
        self.asked.append("store")
        self.cache.put(key, model, body)

    def contains(self, key):
        self.asked.append("contains")
        return self.cache.contains(key)

    def drop(self, key):
        self.asked.append("drop")
        self.cache.delete(key)

    def single_flight(self):
        return self.flight

    async def fetch_async(self, key, model):
        self.asked.append("fetch_async")
        return self.cache.get(key, model)

    async def contains_async(self, key):
        self.asked.append("contains_async")
        return self.cache.contains(key)

    async def drop_async(self, key):
        self.asked.append("drop_async")
        self.cache.delete(key)


def test_a_miss_reads_through_and_keeps_a_copy_answers_go_to_both(tmp_path):
    remote = DiskRemote(tmp_path / "head")
    remote.cache.put("k1", "m", BODY)  # paid on another node
    node = NodeCache(tmp_path / "node", remote=remote)
    assert node.get("k1", "m")["response"] == BODY["response"]
    assert remote.asked == ["fetch"]
    assert node.get("k1", "m")["response"] == BODY["response"] and remote.asked == ["fetch"]  # now a local hit
    assert ResponseCache(tmp_path / "node").contains("k1")
    assert node.get("k2", "m") is None and not node.contains("k2")
    node.put("k2", "m", BODY)
    assert remote.cache.contains("k2") and ResponseCache(tmp_path / "node").contains("k2")
    node.delete("k2")
    assert not remote.cache.contains("k2") and not node.contains("k2")


def test_the_owner_node_reads_its_directory_only_and_the_gateway_takes_the_remotes_single_flight(tmp_path):
    remote = DiskRemote(tmp_path / "head")
    owner = NodeCache(tmp_path / "head", remote=remote, read_through=False)
    owner.put("k", "m", BODY)
    assert owner.get("k", "m") is not None and owner.get("x", "m") is None and not owner.contains("x")
    assert remote.asked == []
    assert Gateway(cache=owner).flight is remote.flight
    plain = ResponseCache(tmp_path / "plain")
    assert Gateway(cache=plain).flight.directory == tmp_path / "plain" / "inflight"


def test_the_gateways_lookups_await_the_cluster_and_never_block_on_it(tmp_path):
    """A runner actor's event loop must not stop for the cluster's cache: the lookups the gateway makes
    (``lookup``, ``has``, ``forget``) reach the remote through its awaitable calls only."""
    remote = DiskRemote(tmp_path / "head")
    remote.cache.put("k1", "m", BODY)
    node = NodeCache(tmp_path / "node", remote=remote)
    assert asyncio.run(node.lookup("k1", "m"))["response"] == BODY["response"]
    assert asyncio.run(node.lookup("k1", "m")) is not None  # kept on this node: the remote is not asked again
    assert asyncio.run(node.has("k2")) is False
    node.put("k2", "m", BODY)
    assert asyncio.run(node.forget("k2")) and not remote.cache.contains("k2")
    assert remote.asked == ["fetch_async", "contains_async", "store", "drop_async"]
