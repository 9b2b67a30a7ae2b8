"""`madbench bench`: the benchmarks (memo, backtest, gateway, runner, throughput, cached replay, cost per run, and on a
local multi-node cluster: a cache hit through the cluster, a batch at scale with a node lost and one joined; the
runner's guarantees: an all-invalid batch ends under load, the budget ledger across SIGKILLs)."""

from __future__ import annotations

import argparse
import json
import os
import typing

import psutil

from madbench.bench import scale
from madbench.bench.cluster_cache import bench_cluster_cache
from madbench.bench.cost import JSON_KEYS, PRICE_MODEL, bench_cost, format_cost
from madbench.bench.reliability import bench_ends, bench_kills
from madbench.bench.sequential_designs import bench_batch, bench_sequential, format_rows, schedule_clusters
from madbench.bench.stages import run_bench
from madbench.data.errors import InputError
from madbench.data.scenario import load_scenarios
from madbench.eval.stats.group_sequential import planned_looks
from madbench.gateway.models import SchemaScope, StructuredMode
from madbench.runner.batch import load_batch, resolve_scenarios
from madbench.runner.cli.commands import command_parser
from madbench.runner.cli.common import ROOT, add_pack_args, check_out, number

WHAT = ["memo", "backtest", "gateway", "runner", "throughput", "cache", "cost", "cluster-cache", "scale", "sequential", "ends",
        "kills"]
#: --runs when it is not given: `throughput` and `cache` measure a sustained rate, `cost` prices a few a7 runs,
#: `scale` runs a thousand (about 10 min on 2 cores), `cluster-cache` asks for 500 cached answers.
DEFAULT_RUNS = {"cost": 3, "scale": 1000, "cluster-cache": 500, "kills": 12}


def _scale_options(p) -> None:
    """`bench scale`'s options beside --runs (its own parser's, scale.add_arguments, once `bench` has subcommands)."""
    p.add_argument("--and-runs", type=number(int, ge=1, le=1_000_000), metavar="N",
                   help="`scale`: a second size, measured after --runs; the two extrapolate to 100,000 runs")
    p.add_argument("--open-rows", type=number(int, ge=1, le=1_000_000), metavar="N",
                   help="`scale`: also time open_results(...).runs on N runs' rows built through the real writer")
    p.add_argument("--lose-node", action="store_true",
                   help="`scale`: at a quarter of the runs a worker joins and another's raylet is killed")


def register(sub) -> None:
    p = command_parser(sub, "bench")
    p.add_argument("what", choices=WHAT, help="which benchmark: " + ", ".join(WHAT))
    p.add_argument("--scenarios", default=str(ROOT / "configs" / "scenarios" / "market-35.yaml"),
                   help="scenario file for `bench memo`, `throughput` and `cache` (default configs/scenarios/market-35.yaml)")
    p.add_argument("--n", type=number(int, ge=1, le=10_000_000), help="backtests for `bench backtest` (default 10000); calls for `bench gateway` (default and at most 2000)")
    p.add_argument("--runs", type=number(int, le=1_000_000), help="runs for `throughput` and `cache` (3-agent, 1-round debates with CRIT; default 100); "
                   "for `cost`, scenarios of the paper's A7 treatment (default 3); for `scale`, single-agent rule-based "
                   "runs on 3 raylets (default 1000); for `cluster-cache`, cached answers asked for (default 500); for `kills`, scenarios "
                   "of market-35 in the capped batch (default 12)")
    _scale_options(p)
    p.add_argument("--rpm", type=number(gt=0), default=600, help="`throughput`: requests/min the simulated provider allows (default 600)")
    p.add_argument("--tpm", type=number(gt=0), help="`throughput`: tokens/min the simulated provider allows (default: none)")
    p.add_argument("--latency-median", type=number(ge=0, le=3600), default=2.0, help="`throughput`: median provider latency in s, lognormal (default 2)")
    p.add_argument("--concurrency", type=number(int, ge=1, le=10_000), default=32, help="`throughput`: runs in flight (default 32)")
    p.add_argument("--serial-runs", type=number(int, ge=1, le=10_000), default=3, help="`throughput`: runs measured one at a time for the speed-up (default 3)")
    p.add_argument("--json", action="store_true", help="`throughput`, `cost` and `scale`: print only the headline JSON record")
    p.add_argument("--price-model", default=PRICE_MODEL,
                   help=f"`cost`: the model whose list prices (litellm's cost map) every call is priced at (default {PRICE_MODEL})")
    p.add_argument("--structured-output", choices=typing.get_args(StructuredMode),
                   help="`cost`: how the answer schema is sent (default: the provider's, json_schema; prompt_only sends "
                        "none)")
    p.add_argument("--schema-scope", choices=typing.get_args(SchemaScope),
                   help="`cost`: one schema per run (run, the default for hosted models: the schema leads the provider's "
                        "cached prefix) or per turn (turn: each turn's own, and far fewer cache hits)")
    p.add_argument("--results-dir", help="`cost`: keep the simulated batch's results there (calls.parquet has every call's "
                   "prompt, completion and cached tokens); default: a temporary directory")
    p.add_argument("--experiments", type=number(int, ge=100, le=100_000_000), default=4000,
                   help="`sequential`: simulated experiments per design and cell (default 4000)")
    p.add_argument("--max-scenarios", type=number(int, ge=4, le=1_000_000), default=70,
                   help="`sequential`: the designs' maximum of scenarios (default 70)")
    p.add_argument("--looks", type=number(int, ge=1, le=20), default=5, help="`sequential`: looks (default 5)")
    p.add_argument("--effect", type=number(gt=0, le=5), default=0.39,
                   help="`sequential`: the standardised effect d_z of the alternative and of the plan (default 0.39)")
    p.add_argument("--seed", type=number(int, ge=0), default=0, help="`sequential`: the simulation's seed (default 0)")
    p.add_argument("--quarters", metavar="SCENARIOS", help="`sequential`: lay the scenarios out in quarters as this "
                   "scenario file's are (e.g. configs/scenarios/market-35.yaml), in the schedule order of seed 0, and "
                   "test each look with the quarter-clustered t; the maximum is the file's scenarios (default: "
                   "independent scenarios)")
    p.add_argument("--batch", metavar="FILE", help="`sequential`: measure this batch's own `sequential:` design on its "
                   "scenarios' quarters (e.g. configs/batches/a7-sequential.yaml) instead of the standard designs")
    p.add_argument("--icc", type=number(ge=0, lt=1), default=0.0,
                   help="`sequential` with --quarters or --batch: the intra-quarter correlation of the simulated "
                        "differences (default 0)")
    p.add_argument("--tries", type=number(int, ge=1, le=1000), default=20,
                   help="`ends`: how many times the all-invalid batch is run (default 20)")
    p.add_argument("--blind", action="store_true",
                   help="`ends`: the blind config on the paper's 6 scenarios (default: causal-debate-3 on 4 of market-35)")
    p.add_argument("--load", type=number(int, ge=0, le=256), default=os.cpu_count() or 2,
                   help="`ends`: busy processes beside the batch (default: one per core)")
    p.add_argument("--timeout", type=number(gt=0, le=86_400), default=600.0,
                   help="`ends`: seconds after which a try that has not ended is killed and counted as hung (default 600)")
    p.add_argument("--keep", metavar="DIR", help="`ends`: keep each try's batch, results and driver log under DIR")
    p.add_argument("--kills", type=number(int, ge=1, le=100), default=6, help="`kills`: SIGKILLs of the driver (default 6)")
    p.add_argument("--cap", type=number(gt=0, le=100), default=0.02, help="`kills`: the batch's max_cost_usd (default 0.02)")
    p.add_argument("--restart-after", type=number(ge=0, le=600), default=0.0,
                   help="`kills`: seconds between each kill and the next driver's start (default 0: at once, before "
                        "the killed driver's actors have their answers)")
    p.add_argument("--every", type=number(int, ge=1, le=1_000_000), default=1,
                   help="`kills`: requests into each invocation at which its driver is killed (default 1: its first "
                        "phase's calls are in flight, and each invocation spends little of the cap)")
    add_pack_args(p)
    p.set_defaults(func=_run)


#: Bytes of one float64 per simulated scenario difference, times the arrays a cell of `bench sequential` holds at once
#: (the draws, their squares and the two running sums: ``sequential_designs.simulate``).
CELL_BYTES_PER_DRAW = 8 * 4


def available_memory() -> int:
    """Bytes this machine can give a new allocation without swapping."""
    return int(psutil.virtual_memory().available)


def check_sequential_options(experiments: int, max_scenarios: int, looks: int) -> None:
    """The looks fit in the scenarios and a cell's arrays fit in memory, before anything is drawn: one line instead
    of numpy's traceback minutes (or terabytes) later."""
    try:
        planned_looks(max_scenarios, looks)
    except ValueError as exc:
        raise InputError("--looks", str(exc), "give fewer --looks or more --max-scenarios") from None
    need, have = CELL_BYTES_PER_DRAW * experiments * max_scenarios, available_memory()
    if need > have:
        raise InputError("--experiments", f"{experiments:,} experiments of {max_scenarios:,} scenarios need about "
                         f"{need / 2**30:,.1f} GiB at once, and {have / 2**30:,.1f} GiB is available",
                         "give fewer --experiments or --max-scenarios")


def sequential_quarters(args) -> dict[str, str] | None:
    """`bench sequential`'s scenarios and their quarters: the batch's (--batch), the file's (--quarters), or None for
    independent scenarios (then --icc means nothing and is refused)."""
    if args.batch is not None and args.quarters is not None:
        raise InputError("--quarters", "a batch's design is measured on its own scenarios", "drop --quarters or --batch")
    if args.batch is not None:
        spec, base = load_batch(args.batch)
        if spec.sequential is None:
            raise InputError(args.batch, "no `sequential:` design to measure", "give a batch with one, such as "
                             "configs/batches/a7-sequential.yaml")
        if spec.scenarios.draws:
            raise InputError(args.batch, "scenarios.draws: `bench sequential` reads a batch's scenario file, not drawn "
                             "scenarios", "give a batch whose scenarios are listed in a file")
        return quarters_of_scenarios(resolve_scenarios(spec, base, None, str(args.batch)))
    if args.quarters is not None:
        return quarters_of_scenarios(load_scenarios(args.quarters))
    if args.icc:
        raise InputError("--icc", "independent scenarios have no quarters to correlate within",
                         "give --quarters SCENARIOS or --batch FILE with it")
    return None


#: The most calls `bench gateway` sends (its figures settle well before).
GATEWAY_MAX_CALLS = 2000


def quarters_of_scenarios(scenarios) -> dict[str, str]:
    return {s.id: s.invest_quarter for s in scenarios}


def _run(args) -> int:
    for flag, value in (("--results-dir", args.results_dir), ("--keep", args.keep)):
        if value is not None:
            check_out(value, flag)
    if args.n is None:
        args.n = GATEWAY_MAX_CALLS if args.what == "gateway" else 10_000
    if args.what == "gateway" and args.n > GATEWAY_MAX_CALLS:  # said, not clamped in silence
        raise InputError("--n", f"{args.n} calls: `bench gateway` sends at most {GATEWAY_MAX_CALLS}",
                         f"give --n {GATEWAY_MAX_CALLS} or fewer")
    if args.what == "sequential":
        quarters = sequential_quarters(args)
        n_max = len(quarters) if quarters else args.max_scenarios
        check_sequential_options(args.experiments, n_max, args.looks if args.batch is None else 1)
    if args.runs is None:
        args.runs = DEFAULT_RUNS.get(args.what, 100)
    if args.what == "scale":  # its own options (scale.add_arguments) as this parser has them
        return scale.main(argparse.Namespace(runs=[args.runs, *([args.and_runs] if args.and_runs else [])],
                                             in_flight=16, lose_node=args.lose_node, json=args.json, pack=args.pack,
                                             open_rows=args.open_rows))
    if args.what == "cluster-cache":  # a local multi-node cluster: madbench/bench/local_cluster.py
        if args.runs < 1:
            raise InputError("--runs", f"must be ≥ 1, got {args.runs}", "give a positive count")
        print(json.dumps(bench_cluster_cache(args.runs), indent=1))
        return 0
    if args.what == "ends":
        print(json.dumps(bench_ends(args.tries, args.blind, args.load, args.timeout, args.pack,
                                    args.evidence[0] if args.evidence else None, args.keep), indent=1))
        return 0
    if args.what == "kills":
        print(json.dumps(bench_kills(args.kills, args.cap, args.every, int(args.runs), args.pack,
                                     restart_after_s=args.restart_after), indent=1))
        return 0
    if args.what == "sequential":  # simulation only: no model, no Ray
        if args.batch is not None and quarters is not None:  # sequential_quarters gives a batch's quarters always
            rows = bench_batch(load_batch(args.batch)[0], quarters, args.experiments, args.seed, args.icc)
        else:
            clusters = None if quarters is None else schedule_clusters(quarters, 0)
            rows = bench_sequential(args.experiments, n_max, args.looks, args.effect, seed=args.seed,
                                    clusters=clusters, icc=args.icc)
        clustering = "" if quarters is None else (f", {len(set(quarters.values()))} quarters of the scenarios, "
                                                  f"intra-quarter correlation {args.icc:g}, quarter-clustered t")
        print(json.dumps(rows, indent=1) if args.json else format_rows(rows, args.experiments, clustering))
        return 0
    if args.what != "cost":
        return run_bench(args)
    if args.runs < 1:
        raise InputError("--runs", f"must be ≥ 1, got {args.runs}", "give a positive count")
    out = bench_cost(args.runs, args.price_model, args.structured_output, args.pack, args.evidence, args.results_dir,
                     args.schema_scope)
    print(json.dumps({k: out[k] for k in JSON_KEYS}) if args.json else format_cost(out))
    return 0
