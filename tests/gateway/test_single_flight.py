"""Identical requests in flight at the same time are sent once: within one gateway, and across processes
that share a cache directory. Counted at a real HTTP server (the simulated provider)."""

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

from madbench.gateway import Gateway, LLMRequest, Message, ModelSpec, ResponseCache
from madbench.gateway.errors import DriverGone
from madbench.gateway.single_flight import SingleFlight
from madbench.sim.provider import SimConfig, SimProvider

ROOT = Path(__file__).resolve().parents[2]


def ask(text: str) -> LLMRequest:
    return LLMRequest(model="openai/sim", messages=[Message(role="user", content=text)], max_tokens=64)


def test_identical_requests_in_one_gateway_are_sent_once_and_different_ones_are_not_held_up(tmp_path):
    with SimProvider(SimConfig(latency_median_s=0.4, latency_sigma=0.01)) as sim:
        spec = ModelSpec(model="openai/sim", api_base=sim.url)

        async def go():
            gw = Gateway(cache=ResponseCache(tmp_path / "cache"))
            return await asyncio.gather(*(gw.complete(ask("same"), spec) for _ in range(5)),
                                        gw.complete(ask("other"), spec))

        answers = asyncio.run(go())
        assert sim.stats.requests == 2
        assert len({a.content for a in answers[:5]}) == 1
        assert [a.cached for a in answers[:5]].count(False) == 1  # one paid; four served what it paid for


def test_identical_requests_from_two_processes_on_one_cache_are_sent_once(tmp_path):
    script = (
        "import asyncio, sys\n"
        "from madbench.gateway import Gateway, LLMRequest, Message, ModelSpec, ResponseCache\n"
        "spec = ModelSpec(model='openai/sim', api_base=sys.argv[1])\n"
        "req = LLMRequest(model='openai/sim', messages=[Message(role='user', content='shared')], max_tokens=64)\n"
        "c = asyncio.run(Gateway(cache=ResponseCache(sys.argv[2])).complete(req, spec))\n"
        "print('cached' if c.cached else 'paid', c.content)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with SimProvider(SimConfig(latency_median_s=1.5, latency_sigma=0.01)) as sim:
        procs = [subprocess.Popen([sys.executable, "-c", script, sim.url, str(tmp_path / "cache")], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
        outs = [p.communicate(timeout=120) for p in procs]
        assert all(p.returncode == 0 for p in procs), [o[1][-1500:] for o in outs]
        assert sim.stats.requests == 1
    kinds = sorted(o[0].split()[0] for o in outs)
    assert kinds == ["cached", "cached", "paid"] and len({o[0].split()[1] for o in outs}) == 1


def test_a_failed_leader_lets_the_next_caller_try_itself(tmp_path):
    async def go():
        flight, order = SingleFlight(tmp_path / "inflight"), []

        async def leader():
            async with flight.hold("k"):
                order.append("leader")
                await asyncio.sleep(0.1)
                raise RuntimeError("provider broke")

        async def follower():
            await asyncio.sleep(0.01)
            async with flight.hold("k"):
                order.append("follower")

        results = await asyncio.gather(leader(), follower(), return_exceptions=True)
        return order, results, flight

    order, results, flight = asyncio.run(go())
    assert order == ["leader", "follower"] and isinstance(results[0], RuntimeError) and results[1] is None
    assert not flight._locks  # nothing kept once no one holds or awaits a key


def test_a_guard_that_trips_stops_the_call_before_anything_is_paid(tmp_path):
    alive = {"driver": True}

    def guard():
        if not alive["driver"]:
            raise DriverGone("driver gone")

    with SimProvider() as sim:
        spec = ModelSpec(model="openai/sim", api_base=sim.url)
        gw = Gateway(cache=ResponseCache(tmp_path / "cache"), guard=guard)
        asyncio.run(gw.complete(ask("one"), spec))
        alive["driver"] = False
        try:
            asyncio.run(gw.complete(ask("two"), spec))
            raise AssertionError("an orphan's call went through")
        except DriverGone:
            pass
        assert sim.stats.requests == 1 and gw.totals.failed == 0  # a stop is not a failed call


def test_lock_files_exist_only_while_held_and_a_killed_holders_is_swept_when_the_cache_opens(tmp_path):
    flight = SingleFlight(tmp_path / "inflight")

    async def hold_twice():
        async with flight.hold("a"):
            assert flight.shard_path("a").is_file()
        async with flight.hold("a"):  # the file removed by the first holder is made again
            assert flight.shard_path("a").is_file()
    asyncio.run(hold_twice())
    assert not list((tmp_path / "inflight").glob("*.lock"))
    # A holder killed mid-call leaves its file (the OS drops its lock); a live holder's file stays.
    code = ("import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
            "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(600)")
    killed, live = (subprocess.Popen([sys.executable, "-c", code, str(flight.shard_path(k))], stdout=subprocess.PIPE,
                                     text=True) for k in ("killed", "live"))
    try:
        assert killed.stdout.readline() == "held\n" and live.stdout.readline() == "held\n"
        killed.send_signal(signal.SIGKILL)
        killed.wait()
        ResponseCache(tmp_path).close()
        assert sorted((tmp_path / "inflight").glob("*.lock")) == [flight.shard_path("live")]
    finally:
        live.kill()
        live.wait()
    assert flight.sweep() == 1 and not list((tmp_path / "inflight").glob("*.lock"))
