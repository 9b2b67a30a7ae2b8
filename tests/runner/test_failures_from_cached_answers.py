"""A run that failed on the model's answers fails again on retry (they come back from the response cache): the run
says so and names the way out, and the retry command is not offered for it."""

import json
import threading

import httpx
import pytest

from madbench.results import read_manifest
from madbench.runner.cli import main
from madbench.sim.http_stub import JSONHandler, StubServer
from madbench.sim.provider import SimProvider
from tests.runner.test_batch import ROOT, TICKERS, write_batch


def _shrunk(value):
    """Every allocation's weights times 2/3 and a third in cash: well-formed answers, in a fully invested scenario."""
    if isinstance(value, dict):
        out = {k: ([{**a, "weight": a["weight"] * 2 / 3} for a in v] if k == "allocation" and isinstance(v, list)
                   else _shrunk(v)) for k, v in value.items()}
        return out | {"cash_weight": 1 / 3} if "allocation" in value else out
    return [_shrunk(v) for v in value] if isinstance(value, list) else value


class ShrinkingProxy(StubServer):
    """Forwards each chat completion to the simulated provider and shrinks the allocations in its answer (those of the
    requests ``which`` picks: by default every one)."""

    def __init__(self, upstream: str, which=lambda body: True):
        proxy = self
        self.requests = 0
        self.lock = threading.Lock()

        class Handler(JSONHandler):
            def do_POST(self):
                with proxy.lock:
                    proxy.requests += 1
                body = self.read_json()
                answer = httpx.post(f"{upstream}/chat/completions", json=body, timeout=60).json()
                message = answer["choices"][0]["message"]
                if which(body):
                    message["content"] = json.dumps(_shrunk(json.loads(message["content"])))
                self.send_json(200, answer)

        super().__init__(Handler)


@pytest.mark.slow
def test_a_run_failed_on_cached_answers_is_not_offered_retry_failed_which_would_repeat_it(make_pack, tmp_path, capsys):
    with SimProvider() as sim, ShrinkingProxy(sim.url) as proxy:
        model = {"model": "openai/madbench-sim", "api_base": proxy.url, "send_context": True, "weight_policy": "normalize"}
        batch = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)), quarters=["2021Q3"], model=model,
                            replicates=1, configs=[str(ROOT / "configs/debate/single-causal.yaml")], retries=0)
        assert main(["run", str(batch), "--quiet"]) == 1
        err = capsys.readouterr().err
        asked = proxy.requests
        assert asked > 0
        assert "1 run(s) failed" in err and "final allocation: weights sum to" in err
        assert "failed on the model's answers, which the response cache now holds" in err
        assert "raise `replicates`" in err and "retry them with" not in err
        # The retry it warns of: the same answers from the cache, the same failure, no new request.
        assert main(["run", str(batch), "--quiet", "--retry-failed"]) == 1
        again = capsys.readouterr().err
        assert proxy.requests == asked
        assert "final allocation: weights sum to" in again and "retry them with" not in again
    run = read_manifest(tmp_path / "results" / "t").runs[0]
    assert run.status == "failed" and run.attempts == 1
