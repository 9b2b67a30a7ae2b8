"""`madbench bench NAME`: one subcommand per benchmark, each with only its own options.

A benchmark is a module of this package with ``add_arguments(parser)`` (its options) and ``main(args) -> int``, plus
a module-level ``EXAMPLE`` (one command line, shown under its --help). ``BENCHMARKS`` names them in help order;
adding one is a module and an entry here.
"""

from __future__ import annotations

import argparse
import importlib
from types import ModuleType

from madbench.runner.cli.commands import command_parser

#: Benchmark name -> (module, one-line description), in the order `madbench bench --help` lists them.
BENCHMARKS: dict[str, tuple[str, str]] = {
    "memo": ("madbench.bench.memos", "point-in-time memos of a scenario file, the pack loaded once"),
    "backtest": ("madbench.bench.backtests", "single-quarter backtests, vectorised and one call at a time"),
    "gateway": ("madbench.bench.gateway_overhead", "the gateway's overhead per uncached call and per cache hit, against raw httpx"),
    "runner": ("madbench.bench.runner_overhead", "the runner's overhead per run on rules-35, and peak memory with 200 runs in flight"),
    "throughput": ("madbench.bench.throughput", "debates against a rate-limited simulated provider: sustained share of the limit"),
    "cache": ("madbench.bench.cached_replay", "replay a finished batch from the response cache into a new results directory"),
    "cost": ("madbench.bench.cost", "cost per run of the paper's A7 treatment, prompt cache and provider batch mode"),
    "cluster-cache": ("madbench.bench.cluster_cache", "cache hits served through a local multi-node cluster's cache actor"),
    "scale": ("madbench.bench.scale", "what a batch costs madbench as it grows, on a local multi-node cluster; extrapolated to 100,000 runs"),
    "sequential": ("madbench.bench.sequential_designs", "type I error, power and scenarios used of group-sequential designs"),
    "sweep": ("madbench.bench.sweep_designs", "family-wise error, power, best-arm selection and runs used of multi-arm sweeps"),
    "ends": ("madbench.bench.ends", "an all-invalid batch ends (and does not hang) under CPU load"),
    "kills": ("madbench.bench.kills", "the budget ledger holds across SIGKILLs of the driver"),
    "hedging": ("madbench.bench.tail_latency", "the paper's A7 against a slow simulated provider, with and without hedged requests"),
}


def benchmark(name: str) -> ModuleType:
    """The module of benchmark ``name``."""
    return importlib.import_module(BENCHMARKS[name][0])


def register(sub: argparse._SubParsersAction) -> None:
    p = command_parser(sub, "bench")
    benches = p.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK",
                               help="run `madbench bench BENCHMARK --help` for its options")
    for name, (_, text) in BENCHMARKS.items():
        module = benchmark(name)
        b = benches.add_parser(name, help=text, description=text, formatter_class=argparse.RawDescriptionHelpFormatter,
                               epilog=f"example:\n  {getattr(module, 'EXAMPLE', f'madbench bench {name}')}")
        module.add_arguments(b)
        b.set_defaults(func=module.main)
