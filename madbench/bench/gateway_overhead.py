"""`madbench bench gateway`: the gateway's overhead per uncached call and per cache hit (stages.bench_gateway)."""

from __future__ import annotations

import argparse
import json

from madbench.bench.stages import bench_gateway
from madbench.data.errors import InputError
from madbench.runner.cli.common import number

EXAMPLE = "madbench bench gateway --n 500"

#: The most calls `bench gateway` sends (its figures settle well before).
GATEWAY_MAX_CALLS = 2000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--n", type=number(int, ge=1, le=10_000_000), default=GATEWAY_MAX_CALLS,
                        help=f"calls to send (default and at most {GATEWAY_MAX_CALLS})")


def main(args: argparse.Namespace) -> int:
    if args.n > GATEWAY_MAX_CALLS:  # said, not clamped in silence
        raise InputError("--n", f"{args.n} calls: `bench gateway` sends at most {GATEWAY_MAX_CALLS}",
                         f"give --n {GATEWAY_MAX_CALLS} or fewer")
    print(json.dumps(bench_gateway(n=args.n), indent=1))
    return 0
