"""`madbench bench ends`: an all-invalid batch ends under CPU load (reliability.bench_ends)."""

from __future__ import annotations

import argparse
import json
import os

from madbench.bench.reliability import bench_ends
from madbench.runner.cli.common import add_pack_args, check_out, number

EXAMPLE = "madbench bench ends --tries 5 --keep /tmp/ends"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tries", type=number(int, ge=1, le=1000), default=20,
                        help="how many times the all-invalid batch is run (default 20)")
    parser.add_argument("--blind", action="store_true",
                        help="the blind config on the paper's 6 scenarios (default: causal-debate-3 on 4 of market-35)")
    parser.add_argument("--load", type=number(int, ge=0, le=256), default=os.cpu_count() or 2,
                        help="busy processes beside the batch (default: one per core)")
    parser.add_argument("--timeout", type=number(gt=0, le=86_400), default=600.0,
                        help="seconds after which a try that has not ended is killed and counted as hung (default 600)")
    parser.add_argument("--keep", metavar="DIR", help="keep each try's batch, results and driver log under DIR")
    add_pack_args(parser)


def main(args: argparse.Namespace) -> int:
    if args.keep is not None:
        check_out(args.keep, "--keep")
    print(json.dumps(bench_ends(args.tries, args.blind, args.load, args.timeout, args.pack,
                                args.evidence[0] if args.evidence else None, args.keep), indent=1))
    return 0
