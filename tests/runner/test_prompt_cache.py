"""The simulated provider's prompt cache, and the paper protocol's real prompts served from it.

The simulator reports ``prompt_tokens_details.cached_tokens`` as OpenAI's automatic cache would: the longest
prefix of at least 1,024 tokens, in 128-token steps, that a recent request to the same model began with, where the
structured-output schema leads the prefix. `madbench bench cost` runs a7 through the real runner against it.
"""

import json

import httpx
import pandas as pd
import pytest

from madbench.bench.cost import JSON_KEYS
from madbench.runner.cli import main
from madbench.sim.provider import CACHE_MIN_TOKENS, CACHE_STEP_TOKENS, SimConfig, SimProvider
from tests.conftest import requires_shared

MEMO = "[L1-10Y] 10-year Treasury yield: 4.2 % (as of 2023-03-31)\n" * 200  # about 3,000 of the server's tokens


def ask(url: str, user: str, model: str = "sim-a", schema: dict | None = None) -> dict:
    body = {"model": model, "messages": [{"role": "system", "content": MEMO}, {"role": "user", "content": user}]}
    if schema is not None:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}}
    r = httpx.post(f"{url}/chat/completions", json=body, timeout=10.0)
    assert r.status_code == 200
    return r.json()["usage"]


def test_the_simulator_caches_shared_prefixes_per_model_and_schema():
    with SimProvider() as sim:
        first = ask(sim.url, "agent A")
        again = ask(sim.url, "agent B, a different turn")
        other_model = ask(sim.url, "agent C", model="sim-b")
        with_schema = ask(sim.url, "agent D", schema={"type": "object"})
        same_schema = ask(sim.url, "agent E", schema={"type": "object"})
    assert first["prompt_tokens_details"]["cached_tokens"] == 0
    cached = again["prompt_tokens_details"]["cached_tokens"]
    assert cached >= CACHE_MIN_TOKENS and cached % CACHE_STEP_TOKENS == 0
    assert again["prompt_tokens"] - CACHE_STEP_TOKENS < cached + 20 <= again["prompt_tokens"] + 20  # the memo, step-aligned
    assert other_model["prompt_tokens_details"]["cached_tokens"] == 0  # each model has its own cache
    # OpenAI puts the schema before the system message: another schema shares nothing, the same one everything
    assert with_schema["prompt_tokens_details"]["cached_tokens"] == 0
    assert same_schema["prompt_tokens_details"]["cached_tokens"] == cached


def test_short_prompts_and_a_disabled_cache_report_nothing_cached():
    with SimProvider(SimConfig(prefix_cache_entries=0)) as sim:
        ask(sim.url, "one")
        assert ask(sim.url, "two")["prompt_tokens_details"]["cached_tokens"] == 0
    with SimProvider() as sim:
        body = {"model": "m", "messages": [{"role": "user", "content": "short"}]}
        for _ in range(2):
            usage = httpx.post(f"{sim.url}/chat/completions", json=body, timeout=10.0).json()["usage"]
        assert usage["prompt_tokens_details"]["cached_tokens"] == 0  # under 1,024 tokens: never cached


@requires_shared
@pytest.mark.slow
def test_half_the_input_tokens_of_the_paper_protocol_come_from_the_prompt_cache(tmp_path, capsys):
    # a7 (macro and technical, one round, the JS intervention, a judge, CRIT on every revision) on its first two
    # paper scenarios, its prompts as they are, with the provider's default structured output (a JSON schema sent
    # with every call). That schema leads OpenAI's cache key: every turn of a run is sent the run's one envelope
    # schema (debate/envelope.py), so a turn's schema never makes it miss the memo behind it.
    assert main(["bench", "cost", "--runs", "2", "--json", "--results-dir", str(tmp_path / "a7")]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert list(out) == list(JSON_KEYS)
    calls = pd.read_parquet(tmp_path / "a7" / "calls.parquet")
    runs = pd.read_parquet(tmp_path / "a7" / "runs.parquet")
    assert (runs["status"] == "ok").all() and len(runs) == 2
    paid = calls[~calls["cached"]]
    share = paid["cached_tokens"].sum() / paid["prompt_tokens"].sum()
    assert share >= 0.5, paid.groupby("phase")[["prompt_tokens", "cached_tokens"]].sum()
    # every agent or judge turn after a run's first reads the memo from the cache
    turns = paid[paid["phase"].isin(["propose", "critique", "revise", "judge"])]
    assert ((turns["cached_tokens"] > 0).groupby(turns["run_id"]).sum() == turns.groupby("run_id").size() - 1).all()
    assert runs["cached_tokens"].sum() == calls["cached_tokens"].sum()  # the runs table totals the calls
    assert out["calls"] == len(paid) and out["cached_input_share"] == pytest.approx(share, abs=1e-4)
    assert 0 < out["batch_cached_usd_per_run"] < out["batch_usd_per_run"] < out["sync_usd_per_run"]
    assert out["batch_usd_per_run"] == pytest.approx(out["sync_usd_per_run"] / 2, rel=0.01)  # gpt-5-mini's batch prices


def test_bench_cost_refuses_an_unpriced_model_before_anything_runs(capsys):
    assert main(["bench", "cost", "--price-model", "openai/no-such-model", "--json"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--price-model" in err[0] and "litellm's cost map" in err[0]
    assert main(["bench", "cost", "--runs", "0"]) == 2
