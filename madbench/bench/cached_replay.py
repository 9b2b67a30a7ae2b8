"""`madbench bench cache`: a finished batch replayed from the response cache (throughput.bench_cache)."""

from __future__ import annotations

import argparse
import json

from madbench.bench.pack_option import add_pack_only
from madbench.bench.throughput import bench_cache, positive_runs
from madbench.runner.cli.common import ROOT, number

EXAMPLE = "madbench bench cache --runs 20"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=number(int, le=1_000_000), default=100,
                        help="runs of a 3-agent, 1-round debate with CRIT, filled then replayed (default 100)")
    parser.add_argument("--scenarios", default=str(ROOT / "configs" / "scenarios" / "market-35.yaml"),
                        help="scenario file the runs are drawn from (default configs/scenarios/market-35.yaml)")
    add_pack_only(parser)


def main(args: argparse.Namespace) -> int:
    positive_runs(args.runs)
    print(json.dumps(bench_cache(args.runs, args.pack, args.scenarios), indent=1))
    return 0
