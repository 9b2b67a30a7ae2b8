"""`madbench bench runner`: the runner's overhead per run on rules-35 and its peak memory (stages.bench_runner)."""

from __future__ import annotations

import argparse
import json

from madbench.bench.stages import bench_runner

EXAMPLE = "madbench bench runner"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """No options: it measures the committed rules-35 batch on the default pack."""


def main(args: argparse.Namespace) -> int:
    print(json.dumps(bench_runner(), indent=1))
    return 0
