"""`madbench bench memo`: the point-in-time memos of a scenario file, the pack loaded once (stages.bench_memo)."""

from __future__ import annotations

import argparse
import json

from madbench.bench.stages import bench_memo
from madbench.data.market.pack import resolve_evidence_dirs, resolve_pack_dir
from madbench.runner.cli.common import ROOT, add_pack_args

EXAMPLE = "madbench bench memo --scenarios configs/scenarios/market-35.yaml"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scenarios", default=str(ROOT / "configs" / "scenarios" / "market-35.yaml"),
                        help="scenario file whose memos are built (default configs/scenarios/market-35.yaml)")
    add_pack_args(parser)


def main(args: argparse.Namespace) -> int:
    print(json.dumps(bench_memo(resolve_pack_dir(args.pack), resolve_evidence_dirs(args.evidence), args.scenarios), indent=1))
    return 0
