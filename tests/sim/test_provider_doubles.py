"""OpenAI (reasoning models), Anthropic and Gemini, proven offline: each provider's wire format served by its protocol
double on 127.0.0.1 (madbench/sim) and reached through the real litellm path with ``api_base``, as a user's call would be.

Fast: each double refuses what its API refuses; every provider-specific fault goes through the gateway and is
classified, retried or recorded as it should be; preflight rejects what a model cannot take, from litellm's model
information. Slow (one batch on Ray, one scenario): causal-debate-3 on each provider and provider-mix-role across
three, every call's tokens and cost as the double reported them.
"""

import asyncio
import json
import os
import subprocess
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import httpx
import pandas as pd
import pytest
import yaml

from madbench.data.market.pack import load_pack
from madbench.data.market.write import write_pack
from madbench.data.memo import build_memo
from madbench.data.scenario import Scenario
from madbench.debate.events import LLMCall, Turn
from madbench.debate.trace import read_trace
from madbench.gateway import Gateway, GatewayFailure, LLMRequest, Message
from madbench.gateway.errors import OutputInvalid
from madbench.gateway.models import ModelSpec, RetryPolicy
from madbench.gateway.providers.litellm_provider import import_litellm
from madbench.runner.cli import main
from madbench.runner.progress import BatchLine, Progress
from madbench.runner.run_report import RunReport
from madbench.sim.anthropic_api import AnthropicDouble
from madbench.sim.api_double import ApiDouble
from madbench.sim.cli import DOUBLES
from madbench.sim.gemini_api import GeminiDouble
from madbench.sim.openai_api import OpenAIDouble
from tests.conftest import synthetic_tables
from tests.runner.test_batch import ROOT, TICKERS
from tests.sim.test_cli_sim import free_port

KEYS = {"OPENAI_API_KEY": "sk-double-openai-0001", "ANTHROPIC_API_KEY": "sk-ant-double-0001",
        "GEMINI_API_KEY": "gm-double-gemini-0001"}
MODEL = {api: model for api, (_, model, _) in DOUBLES.items()}
KEY_ENV = {api: env for api, (_, _, env) in DOUBLES.items()}
#: A closed object: every provider takes it as a native JSON schema (Anthropic's output_format, Gemini's
#: responseJsonSchema, OpenAI's response_format).
SCHEMA = {"title": "Answer", "type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"],
          "additionalProperties": False}
FAST_RETRY = RetryPolicy(backoff_base_s=0.01, max_transient_retries=1, outage_patience_s=0)


@pytest.fixture
def keys(monkeypatch):
    for name, value in KEYS.items():
        monkeypatch.setenv(name, value)


def spec_for(double: ApiDouble, api: str, **over) -> ModelSpec:
    return ModelSpec(model=MODEL[api], api_base=double.url, api_key_env=KEY_ENV[api], retry=FAST_RETRY, **over)


def ask(spec: ModelSpec, validate=None, schema=SCHEMA, max_tokens: int = 300):
    """One call through a fresh gateway (no cache), as a debate turn makes it."""
    request = LLMRequest(model=spec.model, messages=[Message(role="system", content="You answer in JSON."),
                                                     Message(role="user", content="Allocate the book.")],
                         temperature=1.0, max_tokens=max_tokens, response_schema=schema)
    return asyncio.run(Gateway().complete(request, spec, validate or (lambda content, spec: content)))


def price(model: str, prompt: int, completion: int) -> float:
    """What litellm's cost map charges: list prices per input and output token."""
    info = import_litellm().get_model_info(model)
    return prompt * info["input_cost_per_token"] + completion * info["output_cost_per_token"]


# --- the wire formats ---------------------------------------------------------------------------------------------

def _post(url: str, body: dict, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(url, json=body, headers=headers, timeout=10.0)


def test_the_anthropic_double_refuses_what_the_messages_api_refuses():
    with AnthropicDouble() as d:
        url, ok = f"{d.url}/v1/messages", {"x-api-key": "k-123456", "anthropic-version": "2023-06-01"}
        body = {"model": "claude-haiku-4-5", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}
        r = _post(url, body, {"anthropic-version": "2023-06-01"})
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
        assert _post(url, body, {"x-api-key": "k-123456"}).json()["error"]["message"].startswith("anthropic-version")
        assert "Extra inputs are not permitted" in _post(url, {**body, "extra_body": {}}, ok).json()["error"]["message"]
        assert _post(url, {**body, "temperature": 1.5}, ok).status_code == 400          # Anthropic's range is 0..1
        fmt = {"output_format": {"type": "json_schema", "schema": SCHEMA}}
        assert "anthropic-beta" in _post(url, {**body, **fmt}, ok).json()["error"]["message"]
        r = _post(url, body, ok)
        assert r.status_code == 200 and r.json()["stop_reason"] == "end_turn"
        assert set(r.json()["usage"]) >= {"input_tokens", "output_tokens"}
        assert r.headers["anthropic-ratelimit-requests-limit"] == "4000"


def test_the_gemini_double_refuses_what_generate_content_refuses():
    with GeminiDouble() as d:
        url = f"{d.url}/models/gemini-2.5-flash:generateContent"
        body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
        r = _post(url, body, {})
        assert r.status_code == 403 and r.json()["error"]["status"] == "PERMISSION_DENIED"
        assert _post(url + "?key=k-123456", body, {}).status_code == 200                 # ?key= is accepted too
        ok = {"x-goog-api-key": "k-123456"}
        assert 'Unknown name "madbench"' in _post(url, {**body, "madbench": 1}, ok).json()["error"]["message"]
        config = {"responseMimeType": "application/json", "responseSchema": SCHEMA}      # additionalProperties: not OpenAPI
        r = _post(url, {**body, "generationConfig": config}, ok)
        assert r.status_code == 400 and 'Unknown name "additionalProperties"' in r.json()["error"]["message"]
        config = {"responseMimeType": "application/json", "responseJsonSchema": SCHEMA}  # JSON Schema proper: fine
        answer = _post(url, {**body, "generationConfig": config}, ok).json()
        assert answer["candidates"][0]["finishReason"] == "STOP" and "promptTokenCount" in answer["usageMetadata"]


def test_the_openai_double_holds_reasoning_models_to_their_parameters():
    with OpenAIDouble(hidden_tokens=40) as d:
        url, ok = f"{d.url}/chat/completions", {"Authorization": "Bearer sk-123456"}
        body = {"model": "gpt-5-mini", "messages": [{"role": "user", "content": "hi"}]}
        assert _post(url, body, {}).status_code == 401
        r = _post(url, {**body, "max_tokens": 100}, ok).json()["error"]
        assert r["param"] == "max_tokens" and r["code"] == "unsupported_parameter"
        r = _post(url, {**body, "temperature": 0.7}, ok).json()["error"]
        assert r["param"] == "temperature" and r["code"] == "unsupported_value"
        usage = _post(url, {**body, "max_completion_tokens": 500, "temperature": 1}, ok).json()["usage"]
        assert usage["completion_tokens_details"]["reasoning_tokens"] == 40 and usage["completion_tokens"] > 40
        assert _post(url, {**body, "model": "gpt-4o-mini", "max_tokens": 100, "temperature": 0.7}, ok).status_code == 200


# --- faults, through the gateway and litellm ------------------------------------------------------------------------

def test_an_anthropic_529_overloaded_is_retried_after_its_retry_after(keys):
    with AnthropicDouble(retry_after_s=0.3) as d:
        d.script("overloaded")
        c = ask(spec_for(d, "anthropic"))
    assert [a.kind for a in c.attempts] == ["transient", "ok"]
    assert c.attempts[0].reason == "529 overloaded" and c.attempts[0].wait_s  # not litellm's wrapped 500 == pytest.approx(0.3)
    assert (c.prompt_tokens, c.completion_tokens) == (d.billed[0].prompt_tokens, d.billed[0].completion_tokens)
    assert "output_format" in d.requests[-1].body  # claude-haiku-4-5: native structured output, not a tool call


def test_a_gemini_resource_exhausted_429_waits_the_retry_delay_of_its_body(keys):
    with GeminiDouble(retry_after_s=0.4) as d:
        d.script("rate_limited")
        c = ask(spec_for(d, "gemini"))
    assert [a.kind for a in c.attempts] == ["rate_limited", "ok"]
    assert "RESOURCE_EXHAUSTED" in c.attempts[0].reason and c.attempts[0].wait_s == pytest.approx(0.4)


@pytest.mark.parametrize("api,fault", [("anthropic", "refusal"), ("openai", "refusal"), ("gemini", "refusal"),
                                       ("gemini", "prompt_blocked")])
def test_a_refusal_or_safety_block_is_recorded_as_refused_billed_and_never_parsed(keys, api, fault):
    seen = []
    with DOUBLES[api][0]() as d:
        d.script(fault)
        with pytest.raises(GatewayFailure) as failed:
            ask(spec_for(d, api), validate=lambda content, spec: seen.append(content))
    (attempt,) = failed.value.attempts  # not retried: the same prompt is refused again
    assert attempt["kind"] == "refused" and "refused to answer" in attempt["reason"] and seen == []
    bill = d.billed[0]
    assert (attempt["prompt_tokens"], attempt["completion_tokens"]) == (bill.prompt_tokens, bill.completion_tokens)
    assert attempt["cost_usd"] == pytest.approx(price(MODEL[api], bill.prompt_tokens, bill.completion_tokens))


@pytest.mark.parametrize("api", ["anthropic", "openai", "gemini"])
def test_a_truncated_answer_is_recorded_as_truncated_with_what_it_billed(keys, api):
    seen = []
    with DOUBLES[api][0]() as d:
        d.script("truncated")
        with pytest.raises(GatewayFailure) as failed:
            ask(spec_for(d, api), validate=lambda content, spec: seen.append(content))
    (attempt,) = failed.value.attempts
    assert attempt["kind"] == "truncated" and "raise this phase's max_tokens" in attempt["reason"] and seen == []
    assert str(failed.value).startswith(f"{MODEL[api]}: answer cut off")  # the model named once, not twice
    assert d.billed[0].finish == {"anthropic": "max_tokens", "openai": "length", "gemini": "MAX_TOKENS"}[api]
    assert attempt["completion_tokens"] == d.billed[0].completion_tokens > 0


def test_a_reasoning_model_whose_budget_goes_to_reasoning_is_truncated_not_answered(keys):
    with OpenAIDouble(hidden_tokens=5000) as d, pytest.raises(GatewayFailure) as failed:
        ask(spec_for(d, "openai"), max_tokens=400)
    (attempt,) = failed.value.attempts
    assert attempt["kind"] == "truncated" and "400 of them reasoning" in attempt["reason"]
    assert attempt["completion_tokens"] == 400 and d.billed[0].hidden_tokens == 400


def test_a_reasoning_model_gets_max_completion_tokens_and_bills_its_hidden_reasoning(keys):
    with OpenAIDouble(hidden_tokens=64) as d:
        c = ask(spec_for(d, "openai"), max_tokens=500)
    body, bill = d.requests[0].body, d.billed[0]
    assert body["max_completion_tokens"] == 500 and "max_tokens" not in body and body["temperature"] == 1
    assert bill.hidden_tokens == 64 and c.completion_tokens == bill.completion_tokens  # reasoning billed...
    assert json.loads(c.content) == {"answer": json.loads(c.content)["answer"]}      # ...but not returned
    assert c.cost_usd == pytest.approx(price(MODEL["openai"], bill.prompt_tokens, bill.completion_tokens))


def test_a_truncated_forced_tool_call_reaches_validation_as_an_empty_object_and_is_rejected(keys):
    # An open object (a map of weights) sends litellm to Anthropic's forced tool call; a tool call cut off at max_tokens
    # comes back from litellm as finish_reason "stop" with "{}" (it drops Anthropic's stop_reason there), so it is the
    # validation that refuses it, and the feedback retry that answers.
    schema = {"title": "Book", "type": "object", "required": ["answer"],
              "properties": {"answer": {"type": "string"}, "weights": {"type": "object", "additionalProperties": {"type": "number"}}}}

    def validate(content, spec):
        if "answer" not in json.loads(content):
            raise OutputInvalid("answer: field required")
        return content
    with AnthropicDouble() as d:
        d.script("truncated")
        c = ask(spec_for(d, "anthropic"), validate=validate, schema=schema)
    assert [a.kind for a in c.attempts] == ["invalid", "ok"] and c.attempts[0].response == "{}"
    assert d.requests[0].body["tool_choice"] == {"name": "json_tool_call", "type": "tool"}


def test_a_persistent_529_hands_the_call_to_the_fallback_provider(keys):
    with AnthropicDouble(retry_after_s=0.05) as a, GeminiDouble() as g:
        a.persistent = "overloaded"
        spec = spec_for(a, "anthropic", fallbacks=[spec_for(g, "gemini")])
        c = ask(spec)
    assert [x.kind for x in c.attempts] == ["transient", "transient", "fallback", "ok"]
    assert c.model_used == MODEL["gemini"] and ModelSpec(model=c.model_used).provider == "gemini"
    assert len(a.requests) == 2 and a.billed == [] and len(g.billed) == 1


# --- preflight: capabilities from litellm's model information -------------------------------------------------------

def _batch(tmp_path: Path, pack: Path, configs: list[Path], name: str = "doubles") -> Path:
    scen = tmp_path / "scenarios.yaml"
    scen.write_text(yaml.safe_dump({"scenarios": [{"id": "s1", "invest_quarter": "2021Q3", "tickers": TICKERS,
                                                  "constraints": {"max_weight": 0.6}}]}))
    batch = tmp_path / f"{name}.yaml"
    batch.write_text(yaml.safe_dump({"name": name, "scenarios": {"file": str(scen)}, "configs": [str(c) for c in configs],
                                     "pack": str(pack), "results_dir": str(tmp_path / "results"), "retries": 0,
                                     "workers": 1, "max_in_flight": 8}))
    return batch


def _config(tmp_path: Path, name: str, tiers: dict, base: str = "causal-debate-3", **over) -> Path:
    cfg = yaml.safe_load((ROOT / "configs" / "debate" / f"{base}.yaml").read_text())
    cfg["models"] = {**cfg["models"], "tiers": tiers} if base != "causal-debate-3" else {
        "tiers": tiers, "default": "quick", "phases": {"judge": "deep", "crit": "deep"}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({**cfg, **over, "name": name}))
    return path


def test_parameters_a_model_refuses_fail_preflight_naming_model_and_parameter(make_pack, tmp_path, keys, capsys):
    pack = make_pack(tickers=tuple(TICKERS))
    with OpenAIDouble() as o, GeminiDouble() as g:
        gpt5 = {"model": MODEL["openai"], "api_base": o.url, "api_key_env": "OPENAI_API_KEY"}
        gpt4 = {**gpt5, "model": "openai/gpt-4"}
        flash = {"model": MODEL["gemini"], "api_base": g.url, "api_key_env": "GEMINI_API_KEY"}
        haiku = {"model": MODEL["anthropic"], "api_base": o.url, "api_key_env": "OPENAI_API_KEY"}
        configs = [_config(tmp_path, "reasoning-at-0.7", {"deep": gpt5, "quick": gpt5}),
                   _config(tmp_path, "anthropic-at-1.5", {"deep": haiku, "quick": haiku}, temperature=1.5),
                   _config(tmp_path, "no-json-schema", {"deep": gpt4, "quick": gpt4}),
                   _config(tmp_path, "over-output-limit", {"deep": flash, "quick": flash},
                           max_tokens={"propose": 70000, "critique": 900, "revise": 1500, "judge": 900, "crit": 600})]
        assert main(["run", str(_batch(tmp_path, pack, configs)), "--dry-run"]) == 2
        assert o.requests == [] and g.requests == []
    err = capsys.readouterr().err
    assert "openai/gpt-5-mini: gpt-5-mini doesn't support temperature=0.7" in err
    # Every agent that sends the temperature is named, not only the first (they share one model spec).
    assert ("(config reasoning-at-0.7: judge, macro critique, macro propose, macro revise, technical critique, "
            "technical propose, technical revise, value critique, value propose, value revise)") in err
    assert f"{MODEL['anthropic']}: temperature 1.5 is outside the 0..1 its provider (anthropic) accepts" in err
    assert "openai/gpt-4: does not support JSON-schema structured output" in err
    assert "gemini/gemini-2.5-flash: max_tokens 70000 is above its output limit of 65536 tokens" in err


def test_a_memo_larger_than_the_context_window_is_rejected_before_any_call(make_pack, tmp_path, keys, capsys, monkeypatch):
    litellm = import_litellm()
    # A model litellm is told about as a user would (litellm.register_model's table), with a window the memo outgrows.
    monkeypatch.setitem(litellm.model_cost, "madbench-tiny-context", {
        "litellm_provider": "openai", "mode": "chat", "max_input_tokens": 1500, "max_output_tokens": 4096,
        "max_tokens": 4096, "input_cost_per_token": 1e-7, "output_cost_per_token": 4e-7, "supports_response_schema": True})
    pack = make_pack(tickers=tuple(TICKERS))
    memo = build_memo(Scenario(id="s1", invest_quarter="2021Q3", tickers=TICKERS), load_pack(pack))
    n = litellm.token_counter(model="openai/madbench-tiny-context", text=memo.text)
    with OpenAIDouble() as o:
        tiny = {"model": "openai/madbench-tiny-context", "api_base": o.url, "api_key_env": "OPENAI_API_KEY"}
        config = _config(tmp_path, "tiny", {"deep": tiny, "quick": tiny})
        assert main(["run", str(_batch(tmp_path, pack, [config])), "--dry-run"]) == 2
        assert o.requests == []
    err = capsys.readouterr().err
    assert n > 1500 and f"scenario s1: its memo alone is {n:,} tokens" in err
    assert "openai/madbench-tiny-context's context window of 1,500 input tokens" in err and "(config tiny)" in err


def test_sim_serve_serves_each_api_double_until_stopped(keys):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "madbench.runner.cli", "sim", "serve", "--api", "anthropic", "--port", str(port),
                             "--fault", "overloaded"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        url = f"http://127.0.0.1:{port}/v1/messages"
        for _ in range(600):
            try:
                r = httpx.post(url, json={"model": "claude-haiku-4-5", "max_tokens": 9, "messages": [{"role": "user",
                               "content": "hi"}]}, headers={"x-api-key": "k-123456", "anthropic-version": "2023-06-01"})
                break
            except httpx.TransportError:
                assert proc.poll() is None, proc.communicate()[1]
                time.sleep(0.1)
        assert r.status_code == 529 and r.json()["error"]["type"] == "overloaded_error" and "retry-after" in r.headers
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert f"anthropic API double at http://127.0.0.1:{port}" in out and "api_key_env: ANTHROPIC_API_KEY" in out
    assert "stopped after 1 requests (1 answered with a fault)" in out
    assert main(["sim", "serve", "--api", "gemini", "--rpm", "5"]) == 2


# --- whole debates on Ray -------------------------------------------------------------------------------------------

@dataclass
class Batch:
    doubles: dict[str, ApiDouble]
    runs: pd.DataFrame
    calls: pd.DataFrame
    root: Path

    def run(self, config: str) -> pd.Series:
        (row,) = [r for _, r in self.runs.iterrows() if r.config == config]
        return row

    def calls_of(self, config: str) -> pd.DataFrame:
        return self.calls[self.calls.run_id == self.run(config).run_id]

    def events(self, config: str) -> list:
        return read_trace(self.root / "traces" / f"{self.run(config).run_id}.jsonl").typed()


def _rewired(tiers: dict, urls: dict[str, str], tier_urls: dict[str, str] | None = None, backoff_s: float = 0.01) -> dict:
    """The config's tiers, each spec (and its fallbacks) sent to the double of its provider, without the accounts'
    rate limits (the doubles enforce none: pacing a debate at 50 requests a minute proves nothing here)."""
    def one(spec, url=None):
        provider = spec["model"].split("/")[0]
        return {**spec, "api_base": url or urls[provider], "send_context": True, "limits": {"max_concurrency": 8},
                "retry": {"backoff_base_s": backoff_s, "max_transient_retries": 1, "outage_patience_s": 0},
                "fallbacks": [one(f) for f in spec.get("fallbacks", [])]}
    return {name: one(spec, (tier_urls or {}).get(name)) for name, spec in tiers.items()}


@pytest.fixture(scope="session")  # made once, on the one worker that runs its tests (conftest)
def batch(tmp_path_factory):
    """One batch on a local Ray, one scenario: causal-debate-3 on each provider's double (with a 529 and a
    RESOURCE_EXHAUSTED on the way), provider-mix-role across three more, and provider-mix-role with Anthropic
    overloaded for good. Every double serves one config only, so what it billed is that config's."""
    tmp = tmp_path_factory.mktemp("doubles")
    pack = write_pack(tmp / "pack", synthetic_tables(tickers=tuple(TICKERS)))
    d = {"anthropic": AnthropicDouble(retry_after_s=0.5), "gemini": GeminiDouble(hidden_tokens=40, retry_after_s=0.5),
         "openai": OpenAIDouble(hidden_tokens=64),
         "mix-anthropic": AnthropicDouble(), "mix-gemini": GeminiDouble(hidden_tokens=40), "mix-openai": OpenAIDouble(hidden_tokens=64),
         "down-anthropic": AnthropicDouble(retry_after_s=0.05), "down-gemini": GeminiDouble(), "down-openai": OpenAIDouble(),
         "down-critic": AnthropicDouble()}
    d["anthropic"].script("overloaded")
    d["gemini"].script("rate_limited")
    d["down-anthropic"].persistent = "overloaded"
    with ExitStack() as serving:
        for double in d.values():
            serving.enter_context(double)
        configs = []
        for api in ("anthropic", "gemini", "openai"):
            spec = {"model": MODEL[api], "api_base": d[api].url, "api_key_env": KEY_ENV[api], "send_context": True}
            over = {"temperature": 1.0, "crit_temperature": 1.0} if api == "openai" else {}
            configs.append(_config(tmp, f"causal-debate-3-{api}", {"deep": spec, "quick": spec}, **over))
        mix = yaml.safe_load((ROOT / "configs/routing/multi-provider.yaml").read_text())  # provider-mix-role's tiers
        for prefix, name in (("mix", "provider-mix-role"), ("down", "provider-mix-role-overloaded")):
            urls = {api: d[f"{prefix}-{api}"].url for api in ("anthropic", "gemini", "openai")}
            critic = {"critic": d["down-critic"].url} if prefix == "down" else None
            # Where a model is reached is no part of a run's identity, so the same debate on other endpoints would be
            # the same run: the overloaded arm differs in its retry backoff, which is.
            backoff = 0.02 if prefix == "down" else 0.01
            configs.append(_config(tmp, name, _rewired(mix["tiers"], urls, critic, backoff), base="provider-mix-role"))
        env = {**os.environ, **KEYS, "MADBENCH_CACHE_DIR": str(tmp / "cache"), "PYTHONPATH": str(ROOT)}
        out = subprocess.run([sys.executable, "-m", "madbench.runner.cli", "run", str(_batch(tmp, pack, configs)), "--quiet"],
                             env=env, capture_output=True, text=True, timeout=900)
        assert out.returncode == 0, out.stderr[-3000:]
    root = tmp / "results" / "doubles"
    yield Batch(d, pd.read_parquet(root / "runs.parquet"), pd.read_parquet(root / "calls.parquet"), root)


@pytest.mark.slow
@pytest.mark.parametrize("api", ["anthropic", "gemini", "openai"])
def test_causal_debate_3_completes_on_each_provider_with_the_tokens_and_cost_it_reported(batch, api):
    run, calls, double = batch.run(f"causal-debate-3-{api}"), batch.calls_of(f"causal-debate-3-{api}"), batch.doubles[api]
    assert run.status == "ok" and len(calls) == 22
    assert (calls.provider == api).all() and (calls.model_used == MODEL[api]).all() and not calls.cached.any()
    assert (calls.validation_retries == 0).all() and all(b.turn for b in double.billed)
    # Each call is one answered request: its tokens are the double's, its cost the cost map's for them.
    assert sorted(zip(calls.prompt_tokens, calls.completion_tokens, strict=True)) == sorted(
        (b.prompt_tokens, b.completion_tokens) for b in double.billed)
    expected = [price(MODEL[api], p, c) for p, c in zip(calls.prompt_tokens, calls.completion_tokens, strict=True)]
    assert calls.cost_usd.tolist() == pytest.approx(expected, rel=1e-9)
    assert run.cost_usd == pytest.approx(sum(expected), rel=1e-9)
    if api == "openai":  # reasoning: billed in completion_tokens, asked with max_completion_tokens at temperature 1
        assert all(b.hidden_tokens == 64 for b in double.billed)
        assert all("max_tokens" not in r.body and r.body["temperature"] == 1 for r in double.requests)
    else:  # the scripted 529 or RESOURCE_EXHAUSTED was waited out and retried
        assert double.faults_served == ["overloaded" if api == "anthropic" else "rate_limited"]
        assert calls.retries.sum() == 1 and len(double.requests) == 23


@pytest.mark.slow
def test_provider_mix_role_records_the_model_and_provider_of_every_turn(batch):
    run, calls = batch.run("provider-mix-role"), batch.calls_of("provider-mix-role")
    assert run.status == "ok"
    turns = [e for e in batch.events("provider-mix-role") if isinstance(e, Turn)]
    by_agent = {(t.agent, t.provider, t.model) for t in turns}
    assert by_agent == {("macro", "openai", "openai/gpt-5-mini"), ("value", "anthropic", "anthropic/claude-haiku-4-5"),
                        ("risk", "gemini", "gemini/gemini-2.5-flash"), ("judge", "openai", "openai/gpt-5-mini")}
    crit = calls[calls.phase == "crit"]
    assert len(crit) == 6 and set(crit.model_used) == {"anthropic/claude-sonnet-4-5"} and set(crit.provider) == {"anthropic"}
    for api in ("anthropic", "gemini", "openai"):  # every call on a double is one it answered and billed
        mine = calls[calls.provider == api]
        double = batch.doubles[f"mix-{api}"]
        assert sorted(zip(mine.prompt_tokens, mine.completion_tokens, strict=True)) == sorted(
            (b.prompt_tokens, b.completion_tokens) for b in double.billed)


@pytest.mark.slow
def test_a_persistent_529_moves_the_anthropic_agent_to_its_fallback_provider_for_the_whole_debate(batch):
    run, calls = batch.run("provider-mix-role-overloaded"), batch.calls_of("provider-mix-role-overloaded")
    assert run.status == "ok"
    value = calls[(calls.agent == "value") & (calls.phase != "crit")]
    assert set(value.model_requested) == {"anthropic/claude-haiku-4-5"}
    assert set(value.model_used) == {"gemini/gemini-2.5-flash"} and set(value.provider) == {"gemini"}
    assert (value.retries == 3).all()  # 529, 529, then the hand-over
    events = [e for e in batch.events("provider-mix-role-overloaded") if isinstance(e, LLMCall) and e.agent == "value"
              and e.phase != "crit"]
    assert all("529 overloaded" in e.attempts[0]["reason"] and e.attempts[2]["kind"] == "fallback" for e in events)
    assert batch.doubles["down-anthropic"].billed == [] and len(batch.doubles["down-anthropic"].requests) == 2 * len(value)


def test_the_progress_line_shows_runs_retried_after_a_fault_and_why():
    progress = Progress(2, BatchLine(None), enabled=False)
    assert "retried" not in progress.line(1)
    progress.add_spend(RunReport(run_id="r", status="failed", error="anthropic/claude-haiku-4-5: 529 overloaded\n(after 300 s)",
                                 totals={"calls": 4}))
    line = progress.line(1)
    assert "1 in flight | retried 1 (last: anthropic/claude-haiku-4-5: 529 overloaded (after 300 s)) |" in line
    assert "0/2 runs" in line and progress.calls == 4
