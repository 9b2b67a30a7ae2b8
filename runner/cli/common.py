"""Helpers shared by the command groups: the pack arguments, small parsers (the exit codes are in ``madbench.runner.exit_codes``)."""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args

from pydantic import ValidationError

from madbench.data.blind import BlindOptions
from madbench.data.errors import InputError, format_validation_error
from madbench.data.market.pack import Pack, resolve_evidence_dirs, resolve_pack_dir
from madbench.data.market.pack import load_pack as _load_pack
from madbench.data.paths import PROJECT_ROOT
from madbench.gateway.models import ModelSpec

#: The project checkout (configs/ lives here).
ROOT = PROJECT_ROOT
CACHE_DIR_HELP = "LLM response cache (else $MADBENCH_CACHE_DIR, else $MADBENCH_HOME/llm: ~/.cache/madbench/llm)"


def add_pack_args(p: argparse.ArgumentParser) -> None:
    """--pack and --evidence, for every command that reads market data."""
    p.add_argument("--pack", help="data pack directory (else $MADBENCH_PACK, else ../shared/data/market)")
    p.add_argument("--evidence", action="append", metavar="DIR",
                   help="attach an evidence directory (filings, earnings_calls, news_sentiment, asset_features); "
                        "repeatable; else $MADBENCH_EVIDENCE")


def load_pack(args: argparse.Namespace) -> Pack:
    """The pack named by --pack/--evidence (or their environment variables and defaults)."""
    return _load_pack(resolve_pack_dir(args.pack), resolve_evidence_dirs(args.evidence))


def id_list(value: str, flag: str) -> list[str]:
    """A comma-separated list of ids given on the command line: none, an empty one or one given twice is refused (an
    empty --ids would otherwise select everything, and a repeated id count twice)."""
    ids = [v.strip() for v in value.split(",")]
    if not value.strip() or not all(ids):
        raise InputError(flag, f"{value!r} holds an empty id", "give ids separated by commas, or leave the option out")
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise InputError(flag, f"{', '.join(twice)} given more than once", "give each id once")
    return ids


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
    """A ``--blind-<option>`` argument for each blind option, its choices the option's Literal values (None when not
    given, so that a command can tell an option given from its default: ``given_blind_options``)."""
    for name, field in BlindOptions.model_fields.items():
        if name != "enabled":
            p.add_argument(f"--blind-{name}", choices=list(get_args(field.annotation)), default=None,
                           help=f"blind option `{name}` {what} (default {field.default})")


def given_blind_options(args: argparse.Namespace) -> list[str]:
    """The ``--blind-<option>`` flags given on the command line."""
    return [f"--blind-{k}" for k in BlindOptions.model_fields if k != "enabled" and getattr(args, f"blind_{k}") is not None]


def blind_options(args: argparse.Namespace) -> BlindOptions:
    """The blind options given by ``add_blind_options``' arguments, the others at their defaults."""
    return BlindOptions(**{k: v for k in BlindOptions.model_fields if k != "enabled"
                           and (v := getattr(args, f"blind_{k}")) is not None})


#: The flag of each ModelSpec field the probing commands (leakage audit, llm ask, probe recall, rescore) take.
SPEC_FLAGS = {"model": "--model", "api_base": "--api-base", "api_key_env": "--api-key-env", "limits": "--rpm",
              "retry": "--timeout", "send_context": "--send-context"}


def flag_spec(**fields: Any) -> ModelSpec:
    """The ModelSpec these commands' flags describe (``limits`` and ``retry`` as dicts), or one InputError line naming
    the flag: pydantic's own message would echo the value, and a key given as --api-key-env must never be printed."""
    try:
        return ModelSpec(**fields)
    except ValidationError as exc:
        loc = exc.errors()[0]["loc"]
        flag = SPEC_FLAGS.get(str(loc[0]), "--model") if loc else "--model"
        raise InputError(flag, format_validation_error(exc), f"correct {flag}") from None


def check_out(value: str, flag: str, kind: str = "folder") -> Path:
    """``value`` (an output ``kind``: folder or file) as a Path, checked before any work: not empty, not through a
    file, not an existing folder where a file goes (or a file where a folder goes), and writable where it will be
    created. Nothing is created here."""
    if not value.strip():
        raise InputError(flag, "is empty", f"give the output {kind}'s path, or leave {flag} out")
    path = Path(value)
    if path.exists():
        if kind == "folder" and not path.is_dir():
            raise InputError(flag, f"{value} exists and is not a folder", "give a folder's path, or move the file away")
        if kind == "file" and path.is_dir():
            raise InputError(flag, f"{value} is a folder", "give a file's path")
    existing = next(p for p in [path, *path.absolute().parents] if p.exists())
    if existing != path and not existing.is_dir():
        raise InputError(flag, f"{value} runs through a file ({existing})", "give a path under a folder")
    if kind == "file" and existing == path:
        existing = path.absolute().parent  # the file is replaced in its folder (an atomic write)
    if not os.access(existing, os.W_OK | os.X_OK):
        raise InputError(flag, f"{existing} is not writable by this user", f"choose another {kind}, or make it writable")
    return path
