"""`madbench bench backtest`: single-quarter backtests over 20-ticker universes (stages.bench_backtest)."""

from __future__ import annotations

import argparse
import json

from madbench.bench.pack_option import add_pack_only
from madbench.bench.stages import bench_backtest
from madbench.data.market.pack import resolve_pack_dir
from madbench.runner.cli.common import number

EXAMPLE = "madbench bench backtest --n 10000"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--n", type=number(int, ge=1, le=10_000_000), default=10_000,
                        help="backtests to run (default 10000)")
    add_pack_only(parser)


def main(args: argparse.Namespace) -> int:
    print(json.dumps(bench_backtest(resolve_pack_dir(args.pack), n=args.n), indent=1))
    return 0
