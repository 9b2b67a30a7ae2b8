"""Helpers shared by the command groups: the pack arguments, small parsers (the exit codes are in ``madbench.runner.exit_codes``)."""

from __future__ import annotations

import argparse

from madbench.data.market.pack import Pack, resolve_evidence_dirs, resolve_pack_dir
from madbench.data.market.pack import load_pack as _load_pack
from madbench.data.paths import PROJECT_ROOT

#: The project checkout (configs/ lives here).
ROOT = PROJECT_ROOT
CACHE_DIR_HELP = "LLM response cache (else $MADBENCH_CACHE_DIR, else ~/.cache/madbench/llm)"


def add_pack_args(p: argparse.ArgumentParser) -> None:
    """--pack and --evidence, for every command that reads market data."""
    p.add_argument("--pack", help="data pack directory (else $MADBENCH_PACK, else ../shared/data/market)")
    p.add_argument("--evidence", action="append", metavar="DIR",
                   help="attach an evidence directory (filings, earnings_calls, news_sentiment, asset_features); "
                        "repeatable; else $MADBENCH_EVIDENCE")


def load_pack(args: argparse.Namespace) -> Pack:
    """The pack named by --pack/--evidence (or their environment variables and defaults)."""
    return _load_pack(resolve_pack_dir(args.pack), resolve_evidence_dirs(args.evidence))


def csv_list(value: str | None) -> list[str] | None:
    """'a, b,,c' -> ['a', 'b', 'c']; None or '' -> None."""
    return [v.strip() for v in value.split(",") if v.strip()] if value else None
