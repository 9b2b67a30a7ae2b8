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
from madbench.runner.deployment import Resolved, one_model

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


#: ``--set``'s example, the same for every command.
SET_EXAMPLE = "e.g. --set agents.limits.rpm=200 --set strong.api_base=http://localhost:8000/v1"

#: Each shorthand flag of ``--set`` (``runner.deployment.SHORTHANDS``): its parser and help, ``{what}`` the model(s)
#: it deploys.
SHORTHAND_FLAGS: dict[str, tuple[Callable[[str], Any], str]] = {
    "--api-base": (str, "OpenAI-compatible endpoint for {what}, e.g. http://127.0.0.1:8000/v1 (--set TIER.api_base=URL)"),
    "--api-key-env": (str, "environment variable holding {what}'s key (default: the provider's usual one; "
                            "--set TIER.api_key_env=NAME)"),
    "--rpm": (number(gt=0), "requests per minute limit of {what} (one limiter per provider, model and api_base; "
                            "--set TIER.limits.rpm=N)"),
    "--tpm": (number(gt=0), "tokens per minute limit of {what} (--set TIER.limits.tpm=N)"),
    "--max-concurrency": (number(int, ge=1, le=10_000), "requests of {what} in flight across the cluster (default 8; "
                                                         "--set TIER.limits.max_concurrency=N)"),
}


def add_routing_args(p: argparse.ArgumentParser, routing_help: str, set_scope: str) -> None:
    """``--routing NAME`` and ``--set TIER.FIELD=VALUE``, as every command that calls a model takes them
    (``runner.deployment`` resolves them); ``set_scope``: which tiers ``--set`` reaches in this command."""
    p.add_argument("--routing", metavar="NAME", help=routing_help)
    p.add_argument("--set", dest="settings", action="append", default=[], metavar="TIER.FIELD=VALUE",
                   help=f"override a tier's deployment setting (api_base, api_key_env, limits.<field>) {set_scope}; "
                        f"repeatable; {SET_EXAMPLE}")


def add_model_deployment(p: argparse.ArgumentParser, what: str,
                         shorthands: tuple[str, ...] = ("--api-base", "--api-key-env", "--rpm")) -> None:
    """The deployment options of a command that calls one model (``what``) outside a batch: ``--routing``, ``--set``
    and the ``shorthands`` of ``--set`` it offers."""
    add_routing_args(p, "take the model's deployment from the routing profile configs/routing/NAME.yaml: the model "
                        "option then names one of its tiers (e.g. strong) or the model of one",
                     f"of {what}'s tier (the one the routing names it by, else `model`)")
    for flag in shorthands:
        kind, text = SHORTHAND_FLAGS[flag]
        p.add_argument(flag, type=kind, help=text.format(what=what))


def model_deployments(args: argparse.Namespace, models: list[str], flag: str = "--model") -> list[Resolved]:
    """``models`` with the deployment the command line gives them (``runner.deployment.one_model``)."""
    given = {f: getattr(args, f[2:].replace("-", "_"), None) for f in SHORTHAND_FLAGS}
    return one_model(models, args.routing, args.settings, given, flag)


def called_spec(model: Resolved, **fields: Any) -> ModelSpec:
    """``model``'s spec with this command's own ``fields`` over it (``send_context``, ``retry``), checked as
    ``flag_spec`` checks the flags."""
    return flag_spec(**(model.spec.model_dump() | fields))


def endpoints(models: list[Resolved], specs: list[ModelSpec]) -> dict[str, tuple[str, set[str]]]:
    """Each api_base ``specs`` (of ``models``) call: the option that gave it and the models reached there, for
    ``preflight.require_endpoint``."""
    out: dict[str, tuple[str, set[str]]] = {}
    for model, spec in zip(models, specs, strict=True):
        if spec.api_base:
            out.setdefault(spec.api_base, (model.api_base_from, set()))[1].add(spec.model)
    return out
