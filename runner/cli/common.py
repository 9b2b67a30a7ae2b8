"""Helpers shared by the command groups: the pack arguments, small parsers (the exit codes are in ``madbench.runner.exit_codes``)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import get_args

from madbench.data.blind import BlindOptions
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


def number(kind: type[int] | type[float] = float, *, ge: float | None = None, gt: float | None = None,
           le: float | None = None, lt: float | None = None) -> Callable[[str], int | float]:
    """An argparse ``type`` for a finite number within bounds: a value outside them (or nan, inf) is the parser's
    one-line error naming the option, before any work starts."""
    bounds = [(ge, ">=", lambda v, b: v >= b), (gt, ">", lambda v, b: v > b), (le, "<=", lambda v, b: v <= b),
              (lt, "<", lambda v, b: v < b)]

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
        for bound, sign, ok in bounds:
            if bound is not None and not ok(value, bound):
                raise argparse.ArgumentTypeError(f"{text} is out of range: it must be {sign} {bound:g}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


def add_blind_options(p: argparse.ArgumentParser, what: str) -> None:
    """A ``--blind-<option>`` argument for each blind option, its choices the option's Literal values."""
    for name, field in BlindOptions.model_fields.items():
        if name != "enabled":
            p.add_argument(f"--blind-{name}", choices=list(get_args(field.annotation)), default=field.default,
                           help=f"blind option `{name}` {what} (default {field.default})")


def blind_options(args: argparse.Namespace) -> BlindOptions:
    """The blind options given by ``add_blind_options``' arguments."""
    return BlindOptions(**{k: getattr(args, f"blind_{k}") for k in BlindOptions.model_fields if k != "enabled"})
