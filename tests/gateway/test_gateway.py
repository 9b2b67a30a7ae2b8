"""The gateway through real HTTP (litellm → httpx → a local server), with faults injected by the test double."""

import asyncio
import json
import logging

import pytest

from madbench.gateway import (
    Budget,
    BudgetExhausted,
    Gateway,
    GatewayFailure,
    LLMRequest,
    Message,
    ModelSpec,
    OutputInvalid,
    RateLimits,
    ResponseCache,
    RetryPolicy,
)
from madbench.gateway.accounting import Attempt
from tests.fault_server import Faults, FaultServer

FAST_RETRY = RetryPolicy(timeout_s=0.5, max_transient_retries=6, outage_patience_s=0, max_rate_limit_retries=10, backoff_base_s=0.05,
                         backoff_max_s=0.5, max_validation_retries=2)


def spec_for(server, model="openai/fake", **limits):
    return ModelSpec(model=model, api_base=server.url, api_key_env="FAKE_PROVIDER_KEY",
                     limits=RateLimits(**({"max_concurrency": 8} | limits)), retry=FAST_RETRY)


def ask(text, model="openai/fake", **kw):
    return LLMRequest(model=model, messages=[Message(role="system", content="Answer in JSON."),
                                             Message(role="user", content=text)], **kw)


def as_json(content, spec):
    try:
        return json.loads(content)
    except json.JSONDecodeError as exc:
        raise OutputInvalid(f"not JSON: {exc.msg}") from None


@pytest.fixture(autouse=True)
def fake_key(monkeypatch):
    monkeypatch.setenv("FAKE_PROVIDER_KEY", "fake-key-value-1234")


@pytest.mark.slow
def test_300_requests_under_faults_all_end_recorded_and_rate_respected():
    rpm = 2400
    faults = Faults(rate_limit=0.30, server_error=0.05, timeout=0.05, invalid_json=0.05, retry_after="1", stall_s=1.0)
    with FaultServer(faults, seed=11) as server:
        spec = spec_for(server, rpm=rpm)
        gw = Gateway()

        async def run():
            return await asyncio.gather(*[gw.complete(ask(f"question {i}"), spec, as_json) for i in range(300)],
                                        return_exceptions=True)

        results = asyncio.run(run())
        arrivals = sorted(server.arrivals)
        outcomes = list(server.outcomes)

    kinds = {type(r).__name__ for r in results}
    assert kinds <= {"Completion", "GatewayFailure"}, kinds  # nothing else escapes
    ok = [r for r in results if not isinstance(r, GatewayFailure)]
    failed = [r for r in results if isinstance(r, GatewayFailure)]
    assert len(ok) + len(failed) == 300 and len(ok) >= 280
    for f in failed:
        assert f.reason and f.attempts and all(a["reason"] for a in f.attempts if a["kind"] != "ok")
    # every injected fault that reached the client was recorded as a retry with its reason
    recorded = [a for r in ok for a in r.attempts] + [Attempt(**a) for f in failed for a in f.attempts]
    by_kind = {}
    for a in recorded:
        by_kind[a.kind] = by_kind.get(a.kind, 0) + 1
    assert by_kind["rate_limited"] == outcomes.count("rate_limit")
    assert by_kind["invalid"] == outcomes.count("invalid_json")
    # Each injected 500 and stall is one transient attempt. On a loaded machine an answer the server sent in time can
    # also reach the client past its timeout: such extra attempts are client-side timeouts, never anything else.
    injected = outcomes.count("server_error") + outcomes.count("timeout")
    timeouts = sum(1 for a in recorded if a.kind == "transient" and "timeout" in (a.reason or "").lower())
    assert injected <= by_kind["transient"] <= injected + timeouts
    assert all(a.wait_s == pytest.approx(1.0) for a in recorded if a.kind == "rate_limited" and a.wait_s)
    assert any("timeout" in (a.reason or "") for a in recorded) and any("500" in (a.reason or "") for a in recorded)
    # observed request rate at the server, overall and over every 5-second window
    per_s = rpm / 60
    assert (len(arrivals) - 1) / (arrivals[-1] - arrivals[0]) <= per_s * 1.05
    for i, t0 in enumerate(arrivals):
        in_window = sum(1 for t in arrivals[i:] if t < t0 + 5.0)
        assert in_window <= per_s * 5.0 * 1.05 + 1, (t0, in_window)


def test_identical_second_call_is_served_from_cache_without_http(tmp_path):
    with FaultServer() as server, ResponseCache(tmp_path) as cache:
        spec = spec_for(server)
        gw = Gateway(cache=cache)
        first = asyncio.run(gw.complete(ask("same"), spec, as_json))
        n = server.requests
        second = asyncio.run(gw.complete(ask("same"), spec, as_json))
        assert server.requests == n == 1
        assert second.cached and not first.cached and second.content == first.content
        third = asyncio.run(gw.complete(ask("same", sample_index=1), spec, as_json))  # a replicate is a new sample
        assert server.requests == 2 and not third.cached


def test_invalid_answers_get_feedback_then_fail_loudly_and_are_not_cached(tmp_path):
    with FaultServer(Faults(invalid_json=1.0)) as server, ResponseCache(tmp_path) as cache:
        gw = Gateway(cache=cache)
        with pytest.raises(GatewayFailure) as err:
            asyncio.run(gw.complete(ask("q"), spec_for(server), as_json))
        assert "still invalid after 2 feedback retries" in err.value.reason
        assert server.requests == 3
        last = server.bodies[-1]["messages"]
        assert last[-2] == {"role": "assistant", "content": "Sure! {not json"}
        assert "could not be accepted" in last[-1]["content"] and "not JSON" in last[-1]["content"]
        assert len(cache) == 0
        invalid = [a for a in err.value.attempts if a["kind"] == "invalid"]  # each rejected answer is kept for the trace
        assert len(invalid) == 3 and all(a["response"] == "Sure! {not json" for a in invalid)


def test_fallback_chain_moves_on_and_records_the_answering_model():
    with FaultServer(Faults(rate_limit=1.0, retry_after="0")) as busy, FaultServer() as spare:
        backup = spec_for(spare, model="openai/backup")
        primary = spec_for(busy).model_copy(update={"fallbacks": [backup],
                                                    "retry": FAST_RETRY.model_copy(update={"max_rate_limit_retries": 2})})
        c = asyncio.run(Gateway().complete(ask("q"), primary, as_json))
    assert c.model_requested == "openai/fake" and c.model_used == "openai/backup"
    assert [a.kind for a in c.attempts] == ["rate_limited"] * 3 + ["fallback", "ok"]


def test_fatal_errors_are_not_retried_and_secrets_never_recorded(tmp_path, monkeypatch, caplog):
    secret = "sk-test-SECRET"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    caplog.set_level(logging.DEBUG)
    with FaultServer(Faults(unauthorized=1.0, leak_auth=True)) as bad, FaultServer() as good, \
            ResponseCache(tmp_path / "cache") as cache:
        gw = Gateway(cache=cache)
        spec = spec_for(bad).model_copy(update={"api_key_env": "OPENAI_API_KEY"})
        with pytest.raises(GatewayFailure) as err:
            asyncio.run(gw.complete(ask("q"), spec, as_json))
        assert bad.requests == 1 and err.value.attempts[0]["kind"] == "fatal"
        assert "Incorrect API key" in err.value.reason
        ok = asyncio.run(gw.complete(ask("q"), spec_for(good).model_copy(update={"api_key_env": "OPENAI_API_KEY"}), as_json))
        assert good.bodies  # the key did reach the provider ...
    written = b"".join(p.read_bytes() for p in (tmp_path / "cache").rglob("*") if p.is_file())
    assert written and secret.encode() not in written  # ... but nothing we store or log holds it
    assert secret not in json.dumps(err.value.attempts) + err.value.reason + ok.model_dump_json() + caplog.text


def test_budget_stops_new_calls_and_unknown_cost_is_none():
    with FaultServer() as server:
        gw = Gateway(budget=Budget(max_cost_usd=1e-9))
        with pytest.raises(BudgetExhausted):  # its maximum cost does not fit the cap: refused before it is sent
            asyncio.run(gw.complete(ask("q", model="openai/gpt-4o-mini"), spec_for(server, model="openai/gpt-4o-mini"), as_json))
        assert server.requests == 0
        priced = asyncio.run(Gateway().complete(ask("q", model="openai/gpt-4o-mini"), spec_for(server, model="openai/gpt-4o-mini"), as_json))
        assert priced.cost_usd and priced.cost_usd > 0
        with pytest.raises(BudgetExhausted):  # once reached, calls of no known price stop too
            asyncio.run(gw.complete(ask("q2"), spec_for(server), as_json))
        unknown = asyncio.run(Gateway().complete(ask("q3"), spec_for(server), as_json))
    assert unknown.cost_usd is None


def test_retry_after_seconds_and_http_date():
    import email.utils
    import time

    from madbench.gateway.providers.litellm_provider import parse_retry_after
    assert parse_retry_after("3") == 3.0
    later = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 <= parse_retry_after(later) <= 31
    assert parse_retry_after("soon") is None


def test_missing_key_for_a_hosted_provider_is_fatal_at_once_and_names_the_fix(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(GatewayFailure) as err:
        asyncio.run(Gateway().complete(ask("q"), ModelSpec(model="openai/gpt-4o-mini"), as_json))
    assert [a["kind"] for a in err.value.attempts] == ["fatal"]  # litellm calls it a 500; it is not retried
    assert "set api_key_env" in err.value.reason


def test_an_outage_is_waited_out_within_the_patience_and_fails_past_it():
    from madbench.sim.provider import SimProvider
    policy = dict(max_transient_retries=1, backoff_base_s=0.1, backoff_max_s=0.3)
    with SimProvider() as sim:
        spec = ModelSpec(model="openai/sim", api_base=sim.url, retry=RetryPolicy(outage_patience_s=5, **policy))
        asyncio.run(Gateway().complete(ask("warm-up: imports litellm"), spec, as_json))
        sim.outage(1.5)
        out = asyncio.run(Gateway().complete(ask("q"), spec, as_json))
        assert sim.stats.outage_refusals >= 3 and "answer" in out.value  # more tries than max_transient_retries allows
        sim.outage(1.5)
        impatient = spec.model_copy(update={"retry": RetryPolicy(outage_patience_s=0, **policy)})
        with pytest.raises(GatewayFailure):
            asyncio.run(Gateway().complete(ask("q2"), impatient, as_json))


def test_llama_cpp_form_turns_bounded_numbers_into_enums_and_leaves_others():
    from madbench.gateway.providers.litellm_provider import response_format
    schema = {"type": "object", "properties": {
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
        "stop": {"type": "number", "exclusiveMinimum": 0, "maximum": 50},
        "weight": {"type": "number", "minimum": 0}, "score": {"type": "integer", "minimum": 1, "maximum": 5}}}
    local = response_format(schema, "json_object_schema")["schema"]["properties"]
    assert local["confidence"]["enum"][:3] == [0, 0.05, 0.1] and local["confidence"]["enum"][-1] == 1
    assert local["score"] == {"enum": [1, 2, 3, 4, 5]}
    assert local["stop"] == {"enum": [2.5 * k for k in range(1, 21)]}  # a wide range too; the exclusive 0 left out
    assert "type" not in local["confidence"] and local["weight"] == schema["properties"]["weight"]  # one-sided: as is
    hosted = response_format(schema, "json_schema")["json_schema"]["schema"]
    assert hosted == schema  # real providers get the schema as written


def test_llama_cpp_form_lists_each_ticker_exactly_once_in_per_ticker_lists():
    from madbench.debate.request_schemas import constrained_schema
    from madbench.debate.stage_schemas import DeskReport
    from madbench.gateway.providers.litellm_provider import response_format
    schema = constrained_schema(DeskReport, ["MS", "T", "XOM"], {"MS-RET60"})
    signals = response_format(schema, "json_object_schema")["schema"]["properties"]["signals"]
    assert [e["properties"]["ticker"] for e in signals["prefixItems"]] == [{"const": t} for t in ("MS", "T", "XOM")]
    assert signals["minItems"] == signals["maxItems"] == 3 and "items" not in signals
    assert response_format(schema, "json_schema")["json_schema"]["schema"] == schema  # hosted providers: as written


def test_llama_cpp_form_fixes_claim_ids_and_answers_each_critique_once():
    import json

    from madbench.data.scenario import Constraints
    from madbench.debate.request_schemas import request_schema
    from madbench.debate.validation import TurnRules
    from madbench.gateway.providers.litellm_provider import response_format
    from madbench.gateway.providers.llama_schema import LOCAL_CLAIMS
    rules = TurnRules(["MS", "T", "XOM"], Constraints(max_weight=0.4), {"MS-RET60", "L1-VIX"},
                      peer_claims={"value": {"C1", "C2"}, "risk": {"C7"}}, owed_responses=[("value", "C1"), ("risk", "C2")])
    revise = response_format(request_schema("revise", rules), "json_object_schema")["schema"]
    claims = revise["properties"]["claims"]
    assert [c["properties"]["claim_id"] for c in claims["prefixItems"]] == [{"const": f"C{i}"} for i in range(1, LOCAL_CLAIMS + 1)]
    rationale = revise["properties"]["position_rationale"]["prefixItems"]
    assert [r["properties"]["ticker"]["const"] for r in rationale] == ["MS", "T", "XOM"]
    assert rationale[0]["properties"]["supporting_claims"]["items"]["enum"] == ["C1", "C2"]
    responses = revise["properties"]["critique_responses"]
    assert [(r["properties"]["from_agent"]["const"], r["properties"]["target_claim"]["const"]) for r in responses["prefixItems"]] == [
        ("value", "C1"), ("risk", "C2")] and responses["minItems"] == responses["maxItems"] == 2
    critique = response_format(request_schema("critique", rules), "json_object_schema")["schema"]
    assert [c["properties"]["target_agent"]["const"] for c in critique["properties"]["critiques"]["prefixItems"]] == ["risk", "value"]
    hosted = response_format(request_schema("revise", rules), "json_schema")["json_schema"]["schema"]
    assert hosted == request_schema("revise", rules) and "minItems" not in hosted["properties"]["critique_responses"] and "anyOf" in hosted["properties"]["critique_responses"]["items"]
    grammar = pytest.importorskip("llama_cpp.llama_grammar", reason="llama-cpp-python (the [local] extra) is not installed")
    for schema in (revise, critique):  # llama-cpp-python's own converter takes both
        grammar.LlamaGrammar.from_json_schema(json.dumps(schema), verbose=False)


def test_llama_cpp_form_allocations_hold_something_on_a_weight_grid():
    import itertools
    import json

    from madbench.data.scenario import Constraints
    from madbench.debate.request_schemas import request_schema
    from madbench.debate.validation import TurnRules
    from madbench.gateway.providers.litellm_provider import response_format
    from madbench.gateway.providers.llama_schema import WEIGHT_GRID
    rules = TurnRules(["MS", "T", "XOM"], Constraints(max_weight=0.4), {"MS-RET60"})
    book = response_format(request_schema("judge", rules), "json_object_schema")["schema"]["properties"]["allocation"]

    def allowed(weights):  # does some alternative admit this book?
        return any(all(e["properties"]["weight"].get("const", None) == w if "const" in e["properties"]["weight"]
                       else w in e["properties"]["weight"]["enum"] for e, w in zip(alt["prefixItems"], weights, strict=True))
                   for alt in book["anyOf"])
    books = list(itertools.product(WEIGHT_GRID, repeat=3))
    assert not allowed((0, 0, 0)) and all(allowed(b) for b in books if any(b))  # exactly the non-empty books
    assert all([e["properties"]["ticker"]["const"] for e in alt["prefixItems"]] == ["MS", "T", "XOM"] for alt in book["anyOf"])
    grammar = pytest.importorskip("llama_cpp.llama_grammar", reason="llama-cpp-python (the [local] extra) is not installed")
    grammar.LlamaGrammar.from_json_schema(json.dumps({"type": "object", "properties": {"allocation": book}}), verbose=False)


def test_the_provider_is_warmed_before_a_rate_limit_lease_is_taken(tmp_path):
    """litellm's first import takes seconds; a lease held through it sends late and bunches the first requests,
    which a sliding-window provider answers with 429s a minute later. Checked in a fresh interpreter."""
    import subprocess
    import sys
    script = tmp_path / "probe.py"
    script.write_text('''
import asyncio, json, sys
from madbench.gateway import Gateway, LLMRequest, Message, ModelSpec, RateLimits
from madbench.gateway.limiter import AsyncLimiter
from tests.fault_server import FaultServer, Faults
seen = []
acquire = AsyncLimiter.acquire
async def probe(self, est=0.0):
    seen.append("litellm" in sys.modules)
    return await acquire(self, est)
AsyncLimiter.acquire = probe
assert "litellm" not in sys.modules
with FaultServer(Faults()) as server:
    spec = ModelSpec(model="openai/fake", api_base=server.url, limits=RateLimits(rpm=600))
    request = LLMRequest(model="openai/fake", messages=[Message(role="user", content="q")])
    asyncio.run(Gateway().complete(request, spec, lambda c, s: c))
print(json.dumps(seen))
''')
    import os
    from pathlib import Path
    root = str(Path(__file__).resolve().parents[2])
    env = os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=root, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [True]


def test_llama_cpp_form_keeps_the_claim_id_prefix_a_stage_schema_names():
    from madbench.debate.request_schemas import constrained_schema
    from madbench.debate.stage_schemas import Thesis
    from madbench.gateway.providers.litellm_provider import response_format
    thesis = response_format(constrained_schema(Thesis, ["MS", "T", "XOM"], {"MS-RET60"}), "json_object_schema")["schema"]
    assert [c["properties"]["claim_id"] for c in thesis["properties"]["claims"]["prefixItems"]] == [{"const": "B1"}, {"const": "B2"}]


def test_llama_cpp_form_leaves_the_request_schema_untouched():
    """The request schema is part of the cache key: the adaptation works on its own copy."""
    import copy

    from madbench.data.scenario import Constraints
    from madbench.debate.request_schemas import request_schema
    from madbench.debate.validation import TurnRules
    from madbench.gateway.providers.litellm_provider import response_format
    rules = TurnRules(["MS", "T", "XOM"], Constraints(max_weight=0.4), {"MS-RET60"},
                      peer_claims={"value": {"C1"}}, owed_responses=[("value", "C1")])
    for phase in ("propose", "critique", "revise", "judge"):
        schema = request_schema(phase, rules)
        before = copy.deepcopy(schema)
        assert response_format(schema, "json_object_schema")["schema"] != before
        assert schema == before, phase
