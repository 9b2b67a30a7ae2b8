"""`madbench bench kills`: the budget ledger across SIGKILLs of the driver (reliability.bench_kills)."""

from __future__ import annotations

import argparse
import json

from madbench.bench.pack_option import add_pack_only
from madbench.bench.reliability import bench_kills
from madbench.runner.cli.common import number

EXAMPLE = "madbench bench kills --kills 3 --runs 6"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=number(int, le=1_000_000), default=12,
                        help="scenarios of market-35 in the capped batch (default 12)")
    parser.add_argument("--kills", type=number(int, ge=1, le=100), default=6, help="SIGKILLs of the driver (default 6)")
    parser.add_argument("--cap", type=number(gt=0, le=100), default=0.02, help="the batch's max_cost_usd (default 0.02)")
    parser.add_argument("--restart-after", type=number(ge=0, le=600), default=0.0,
                        help="seconds between each kill and the next driver's start (default 0: at once, before the "
                             "killed driver's actors have their answers)")
    parser.add_argument("--every", type=number(int, ge=1, le=1_000_000), default=1,
                        help="requests into each invocation at which its driver is killed (default 1: its first "
                             "phase's calls are in flight, and each invocation spends little of the cap)")
    add_pack_only(parser)


def main(args: argparse.Namespace) -> int:
    print(json.dumps(bench_kills(args.kills, args.cap, args.every, int(args.runs), args.pack,
                                 restart_after_s=args.restart_after), indent=1))
    return 0
