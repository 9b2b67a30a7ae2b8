"""`madbench bench cost`: what a run costs synchronously, in provider batch mode, and in batch mode with prompt
caching, at a provider's list prices.

It runs the first N scenarios of the paper's A7 treatment (configs/batches/a7.yaml, config a7: its real prompts and
phase structure) through the real runner against the simulated provider (madbench/sim), which answers with the
rule-based analysts and reports prompt-cache hits as OpenAI's automatic cache would. The tokens of every call paid
for (calls.parquet: prompt, completion and cached tokens) are then priced at one model's list prices from litellm's
offline cost map (default openai/gpt-5-mini): synchronously with no cache discount (what the paper's authors paid),
at the map's batch prices (or half the synchronous price where it has none, said so), and at batch prices with the
cached tokens at the cached batch rate.

What it cannot know: the simulated answers are short and carry no reasoning tokens, so output costs of a reasoning
model are understated; the cached share is what the prompts allow, and a real provider's cache may miss more.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import typing
from pathlib import Path
from typing import Any

import pandas as pd

from madbench.data.errors import InputError
from madbench.data.market.pack import load_pack, resolve_evidence_dirs, resolve_pack_dir
from madbench.data.paths import CONFIGS_DIR
from madbench.gateway.models import ModelSpec, RateLimits, SchemaScope, StructuredMode
from madbench.gateway.providers.litellm_provider import has_price, import_litellm, token_cost
from madbench.results import ResultsDir
from madbench.runner.batch import expand, load_batch, resolve_configs, resolve_scenarios
from madbench.runner.cli.common import add_pack_args, check_out, number
from madbench.runner.execute import run_batch
from madbench.runner.provider_batches import ProviderBatchOptions, journal_summary
from madbench.runner.store import BatchLayout
from madbench.runner.wiring import build_providers
from madbench.sim.provider import SimConfig, SimProvider

PRICE_MODEL = "openai/gpt-5-mini"
BATCH_FILE = CONFIGS_DIR / "batches" / "a7.yaml"
CONFIG = "a7"
#: The keys of `--json`, in order.
JSON_KEYS = ("sync_usd_per_run", "batch_usd_per_run", "batch_cached_usd_per_run", "cached_input_share",
             "provider_batches", "calls")


def batch_price_source(model: str) -> str:
    """Where a batch price of ``model`` comes from: litellm's cost map, or the 50% assumption."""
    litellm = import_litellm()
    try:
        info = litellm.get_model_info(model)
    except litellm.exceptions.ModelNotMappedError:
        raise InputError("--price-model", f"{model} has no price in litellm's cost map",
                         "name a listed model, e.g. openai/gpt-5-mini, openai/gpt-4o-mini or anthropic/claude-sonnet-4-5") from None
    if not has_price(model):  # no per-token price, or a hosted model listed at $0 (token_cost prices it at None)
        raise InputError("--price-model", f"{model} has no per-token price in litellm's cost map", "name a priced chat model")
    if info.get("input_cost_per_token_batches") is not None and info.get("output_cost_per_token_batches") is not None:
        return "litellm's batch prices (input_cost_per_token_batches, output_cost_per_token_batches)"
    return "assumed 50% of the synchronous price (litellm's cost map has no batch price for this model)"


def price_calls(calls: pd.DataFrame, model: str) -> dict[str, float]:
    """USD of the calls paid for (``cached`` False: madbench's own cache billed nothing), four ways."""
    paid = calls[~calls["cached"].astype(bool)]
    out = {"sync": 0.0, "sync_cached": 0.0, "batch": 0.0, "batch_cached": 0.0}
    for p, c, k in zip(paid["prompt_tokens"].fillna(0).astype(int), paid["completion_tokens"].fillna(0).astype(int),
                       paid["cached_tokens"].fillna(0).astype(int), strict=True):
        out["sync"] += _priced(token_cost(model, p, c), model)
        out["sync_cached"] += _priced(token_cost(model, p, c, cached_tokens=k), model)
        out["batch"] += _priced(token_cost(model, p, c, batch=True), model)
        out["batch_cached"] += _priced(token_cost(model, p, c, cached_tokens=k, batch=True), model)
    return out


def _priced(usd: float | None, model: str) -> float:
    if usd is None:  # batch_price_source refuses such a model before anything runs
        raise InputError("--price-model", f"{model} has no price in litellm's cost map", "name a priced chat model")
    return usd


def _runs(n: int, model: ModelSpec, pack: str | None, evidence: list[str] | None):
    """The batch spec, the first ``n`` runs of config a7, and the pack and evidence directories."""
    spec, base = load_batch(BATCH_FILE)
    spec = spec.model_copy(update={"name": "bench-cost", "model": model, "max_cost_usd": None, "retries": 0,
                                   "max_in_flight": max(1, n), "workers": 2})
    pack_dir = resolve_pack_dir(pack or (str(base / spec.pack) if spec.pack else None))
    evidence_dirs = resolve_evidence_dirs(evidence or [str(base / e) for e in spec.evidence])
    scenarios = resolve_scenarios(spec, base, load_pack(pack_dir, evidence_dirs), str(BATCH_FILE))[:n]
    configs = [c for c in resolve_configs(spec, base, str(BATCH_FILE)) if c.name == CONFIG]
    return spec, expand(spec, scenarios, configs, str(BATCH_FILE)), str(pack_dir), [str(e) for e in evidence_dirs]


def bench_cost(runs: int = 3, price_model: str = PRICE_MODEL, structured_output: StructuredMode | None = None,
               pack: str | None = None, evidence: list[str] | None = None, results_dir: str | Path | None = None,
               schema_scope: SchemaScope | None = None) -> dict:
    """Run ``runs`` scenarios of a7 against the simulated provider and price their calls (module docstring).
    ``results_dir``: keep the batch there (else a temporary directory)."""
    prices = batch_price_source(price_model)  # an unknown model is refused before anything runs
    with tempfile.TemporaryDirectory() as tmp, SimProvider(SimConfig(seed=1)) as sim:
        root = Path(results_dir) if results_dir else Path(tmp) / "results"
        model = ModelSpec(model="openai/madbench-sim", api_base=sim.url, send_context=True,
                          structured_output=structured_output, schema_scope=schema_scope,
                          limits=RateLimits(max_concurrency=32))
        spec, batch, pack_dir, evidence_dirs = _runs(runs, model, pack, evidence)
        run_batch(spec, batch, BatchLayout(root), pack_dir, evidence_dirs, str(Path(tmp) / "cache"), quiet=True)
        calls, table = ResultsDir(root).calls, ResultsDir(root).runs
        provider_batches = _batch_mode_run(spec, batch, sim, Path(tmp), pack_dir, evidence_dirs, table)
    usd = price_calls(calls, price_model)
    paid = calls[~calls["cached"].astype(bool)]
    n = len(table)
    prompt = float(paid["prompt_tokens"].fillna(0).sum())
    return {
        "sync_usd_per_run": round(usd["sync"] / n, 5), "batch_usd_per_run": round(usd["batch"] / n, 5),
        "batch_cached_usd_per_run": round(usd["batch_cached"] / n, 5),
        "cached_input_share": round(float(paid["cached_tokens"].sum()) / prompt, 4) if prompt else 0.0,
        "provider_batches": provider_batches, "calls": int(len(paid)),
        "sync_cached_usd_per_run": round(usd["sync_cached"] / n, 5), "runs": n, "ok_runs": int((table["status"] == "ok").sum()),
        "config": CONFIG, "price_model": price_model, "batch_prices": prices,
        "structured_output": spec.model.structured_output or "the provider's default (json_schema)",
        "schema_scope": "none (no schema sent)" if spec.model.structured_output == "prompt_only" else build_providers().schema_scope(spec.model),
        "prompt_tokens_per_run": round(prompt / n), "completion_tokens_per_run": round(float(paid["completion_tokens"].sum()) / n),
    }


def _batch_mode_run(spec, batch, sim: SimProvider, tmp: Path, pack_dir: str, evidence_dirs: list[str],
                    sync_runs: pd.DataFrame) -> int:
    """Run the same runs again in provider batch mode (a fresh cache, so every call goes through a provider batch) and
    return how many provider batches they submitted; their allocations must equal the synchronous run's."""
    sim.batches.config.completion_delay_s = 0.5
    options = ProviderBatchOptions(poll_s=0.2, settle_s=0.3, idle_s=2.0)
    root = tmp / "results-batch"
    run_batch(spec.model_copy(update={"name": "bench-cost-batch", "execution": options}), batch, BatchLayout(root), pack_dir,
              evidence_dirs, str(tmp / "cache-batch"), quiet=True)
    runs = ResultsDir(root).runs
    same = dict(zip(runs.run_id, runs.weights, strict=True)) == dict(zip(sync_runs.run_id, sync_runs.weights, strict=True))
    if not same:
        raise RuntimeError("batch mode gave other allocations than the synchronous run on the same answers")
    return int(journal_summary(root)["provider_batches"])


def format_cost(out: dict[str, Any]) -> str:
    def usd(x: float) -> str:
        return f"${x:.4f}"
    lines = [
        f"{out['runs']} runs of {out['config']} ({out['ok_runs']} ok), {out['calls']} calls, against the simulated provider "
        f"(structured output: {out['structured_output']}, schema scope: {out['schema_scope']})",
        f"tokens per run: {out['prompt_tokens_per_run']:,} prompt ({out['cached_input_share']:.0%} from the prompt cache), "
        f"{out['completion_tokens_per_run']:,} completion",
        f"cost per run at {out['price_model']} list prices:",
        f"  synchronous                    {usd(out['sync_usd_per_run'])}",
        f"  synchronous, prompt caching    {usd(out['sync_cached_usd_per_run'])}",
        f"  provider batch                 {usd(out['batch_usd_per_run'])}",
        f"  provider batch, prompt caching {usd(out['batch_cached_usd_per_run'])}",
        f"batch prices: {out['batch_prices']}",
        f"provider batches submitted by the same runs in batch mode: {out['provider_batches']} (one per debate phase)",
        "simulated answers carry no reasoning tokens: a reasoning model's output cost is understated",
    ]
    return "\n".join(lines)


EXAMPLE = "madbench bench cost --runs 2 --json --results /tmp/a7-cost"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=number(int, le=1_000_000), default=3,
                        help="scenarios of the paper's A7 treatment to run (default 3)")
    parser.add_argument("--price-model", default=PRICE_MODEL,
                        help=f"the model whose list prices (litellm's cost map) every call is priced at (default {PRICE_MODEL})")
    parser.add_argument("--structured-output", choices=typing.get_args(StructuredMode),
                        help="how the answer schema is sent (default: the provider's, json_schema; prompt_only sends none)")
    parser.add_argument("--schema-scope", choices=typing.get_args(SchemaScope),
                        help="one schema per run (run, the default for hosted models: the schema leads the provider's "
                             "cached prefix) or per turn (turn: each turn's own, and far fewer cache hits)")
    parser.add_argument("--results", "--results-dir", dest="results_dir",
                        help="keep the simulated batch's results there (calls.parquet has every call's prompt, completion "
                             "and cached tokens); default: a temporary directory")
    parser.add_argument("--json", action="store_true", help="print only the headline JSON record")
    add_pack_args(parser)


def main(args: argparse.Namespace) -> int:
    if args.results_dir is not None:
        check_out(args.results_dir, "--results")
    if args.runs < 1:
        raise InputError("--runs", f"must be ≥ 1, got {args.runs}", "give a positive count")
    out = bench_cost(args.runs, args.price_model, args.structured_output, args.pack, args.evidence, args.results_dir,
                     args.schema_scope)
    print(json.dumps({k: out[k] for k in JSON_KEYS}) if args.json else format_cost(out))
    return 0
