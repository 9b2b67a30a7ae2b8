"""Options several benchmarks share, spelled as the other commands spell them."""

from __future__ import annotations

import argparse


def add_pack_only(parser: argparse.ArgumentParser) -> None:
    """--pack alone, for benchmarks that read prices but no evidence (``add_pack_args`` adds --evidence too)."""
    parser.add_argument("--pack", help="data pack directory (else $MADBENCH_PACK, else ../shared/data/market)")
