"""The throughput and cached-replay benchmarks run end to end (tiny sizes: the figures live in the README)."""

import argparse
import ast
import inspect
import json
import re

import pytest

from madbench.bench.cli import BENCHMARKS, benchmark
from madbench.bench.cost import batch_price_source
from madbench.bench.throughput import sustained_rpm
from madbench.data.errors import InputError
from madbench.gateway.providers.litellm_provider import has_price, import_litellm, listed
from madbench.runner.cli import main
from tests.conftest import requires_shared


def last_json(text: str) -> dict:
    """The last top-level JSON object printed (Ray may print its own warnings on stdout around it)."""
    start = [m.start() for m in re.finditer(r"^\{$", text, re.M)][-1]
    return json.JSONDecoder().raw_decode(text[start:])[0]


HEADLINE = {"efficiency", "requests_per_min", "limit_rpm", "share_429", "wall_s", "ideal_s", "speedup_vs_serial",
            "overhead_p50_ms", "overhead_p95_ms", "peak_rss_mb"}


def test_sustained_rate_is_the_median_full_window():
    steady = [i * 0.1 for i in range(1500)]  # 10/s for 150 s
    assert sustained_rpm(steady) == pytest.approx(600, rel=0.01)
    assert sustained_rpm(steady + [150 + i for i in range(20)]) == pytest.approx(600, rel=0.01)  # a slow tail
    assert sustained_rpm([0.0, 1.0]) != sustained_rpm([0.0, 1.0])  # NaN: no full window to measure


@pytest.mark.parametrize("name", list(BENCHMARKS))
def test_every_option_a_benchmark_reads_is_one_it_declares(name):
    # A benchmark's main reads its options off the parsed namespace: one it does not declare is an AttributeError
    # only after the command is run (bench hedging read --pack and --evidence it never added).
    module = benchmark(name)
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    declared = {a.dest for a in parser._actions}
    main = next(n for n in ast.walk(ast.parse(inspect.getsource(module))) if isinstance(n, ast.FunctionDef) and n.name == "main")
    read = {n.attr for n in ast.walk(main) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "args"}
    assert read <= declared, sorted(read - declared)


def test_a_hosted_model_listed_at_no_price_is_refused_before_the_benchmark_runs():
    # litellm lists some hosted models at $0: no price, which token_cost answers with None (the run's calls
    # could not be priced; the benchmark once ran them all and then failed on a None).
    litellm = import_litellm()
    free = next((m for m, v in litellm.model_cost.items() if isinstance(v, dict) and v.get("input_cost_per_token") == 0
                 and v.get("output_cost_per_token") == 0 and v.get("mode") == "chat" and listed(m) and not has_price(m)), None)
    if free is None:
        pytest.skip("litellm's cost map lists no hosted chat model at $0")
    with pytest.raises(InputError, match="no per-token price"):
        batch_price_source(free)
    assert "litellm" in batch_price_source("openai/gpt-5-mini") or "assumed" in batch_price_source("openai/gpt-5-mini")


@requires_shared
@pytest.mark.slow
def test_bench_throughput_json_and_cache_replay(capsys):
    # The benchmark measures at its default sizes; the test checks what it reports, on the smallest batches that
    # show it: runs side by side beating one at a time takes four on a busy 2-core machine (two came out even),
    # a replay from the cache two (more than one run).
    assert main(["bench", "throughput", "--runs", "4", "--latency-median", "0.05", "--serial-runs", "1",
                 "--concurrency", "4", "--rpm", "600", "--json"]) == 0
    out = last_json(capsys.readouterr().out)
    assert set(out) == HEADLINE and out["limit_rpm"] == 600
    assert 0 <= out["share_429"] < 1 and out["wall_s"] > 0 and out["ideal_s"] > 0 and out["peak_rss_mb"] > 100
    assert out["speedup_vs_serial"] > 1  # 4 runs side by side beat one at a time
    assert main(["bench", "cache", "--runs", "2"]) == 0
    cache = last_json(capsys.readouterr().out)
    assert cache["replay_http_calls"] == 0 and cache["fill_http_calls"] >= 2 * 13  # 13 calls a run at least
    assert cache["replay_calls_from_cache"] == cache["replay_calls"] and cache["same_allocations"]


def test_bench_rejects_nonsense_counts(capsys):
    assert main(["bench", "throughput", "--runs", "0"]) == 2
    assert "--runs: must be ≥ 1" in capsys.readouterr().err


def test_the_reliability_benchmarks_refuse_what_they_cannot_measure_before_any_try(tmp_path, make_pack, capsys):
    pack = str(make_pack())
    assert main(["bench", "kills", "--runs", "0", "--pack", pack]) == 2
    assert "--runs: `kills` takes 1 to 35 scenarios of market-35, got 0" in capsys.readouterr().err
    used = tmp_path / "kept"
    used.mkdir()
    (used / "try-00").mkdir()  # an earlier try's results would be resumed, not measured
    assert main(["bench", "ends", "--keep", str(used), "--pack", pack]) == 2
    assert "is not an empty directory" in capsys.readouterr().err
    assert main(["bench", "ends", "--blind", "--evidence", str(tmp_path), "--pack", pack]) == 2
    assert "holds no scenarios_35.yaml" in capsys.readouterr().err
    assert main(["bench", "ends", "--tries", "0"]) == 2
