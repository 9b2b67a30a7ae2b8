"""Run metrics: a function of one run's trace and backtest whose values become columns of runs.parquet.

A run metric is named by a registered name (``BUILTIN``), an import path into the researcher's own code
(``jury:vote_share``) or an installed package's entry point in the ``madbench.metrics`` group. A config lists the
metrics its runs report (``metrics:``), and a protocol the ones every run of it reports (``Protocol.metrics``). Each
is computed when a run finishes, from what the run wrote, and kept in its result's extras under ``metric_<name>``:
runs.parquet's ``x_metric_<name>`` column (``x_metric_<name>_<key>`` for each key of a metric that returns several
values). The statistics read those columns under the metric's own name (``named_metric_columns``), so
``madbench stats --metric <name>`` and the report take a new metric with no other change.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from madbench.data.errors import InputError
from madbench.data.plugins import is_import_path, resolve
from madbench.debate.config import DebateConfig
from madbench.debate.events import AnyEvent

ENTRY_POINTS = "madbench.metrics"
#: A result's extras key and runs.parquet's column prefix of a run metric's values.
EXTRAS_PREFIX = "metric_"
COLUMN_PREFIX = "x_" + EXTRAS_PREFIX
#: What a metric's name may be: it becomes a column name.
NAME = re.compile(r"^[a-z][a-z0-9_]*$")


@dataclass(frozen=True)
class RunView:
    """What a run metric reads: the finished run's trace events (this attempt's), its final allocation, its
    backtest metrics (as runs.parquet has them), its protocol's extras and its config."""
    events: list[AnyEvent]
    weights: dict[str, float]
    cash: float
    backtest: dict[str, Any]
    extras: dict[str, Any]
    config: DebateConfig


Value = float | int | bool | None
RunMetric = Callable[[RunView], Value | Mapping[str, Value]]


def concentration(run: RunView) -> float:
    """The Herfindahl–Hirschman index of the final book, cash a holding: HHI = Σ_i w_i² + c² (1/n for n equal
    holdings, 1 for one; Hirschman, "The Paternity of an Index", AER 54(5), 1964)."""
    return sum(w * w for w in run.weights.values()) + run.cash * run.cash


#: The shipped run metrics, by name (import paths, as every metric is found).
BUILTIN: dict[str, str] = {"concentration": "madbench.debate.run_metrics:concentration"}


def metric_name(name: str) -> str:
    """The column name a metric reports under: its registered name, or an import path's attribute."""
    return name.split(":")[-1].split(".")[-1] if is_import_path(name) else name


def load_metric(name: str, where: str, search: Path | None = None) -> RunMetric:
    """The function ``name`` names; an ``InputError`` naming ``where`` and ``metrics`` when there is none."""
    obj = resolve(name, BUILTIN, ENTRY_POINTS, where, "metrics", search)
    if not callable(obj):
        raise InputError(where, f"metrics: {name!r} is {obj!r}, not a function", "name a function (run) -> value")
    if not NAME.match(metric_name(name)):
        raise InputError(where, f"metrics: {metric_name(name)!r} cannot name a column", "name it in lower_snake_case")
    return obj  # callable; what it returns is checked when it runs


def check_metrics(names: Iterable[str], where: str, search: Path | None = None) -> None:
    """Every metric resolves now (before any run), and no two report under one name."""
    seen: dict[str, str] = {}
    for name in names:
        load_metric(name, where, search)
        short = metric_name(name)
        if short in seen and seen[short] != name:
            raise InputError(where, f"metrics: {seen[short]!r} and {name!r} both report as {short!r}",
                             "rename one of the functions")
        seen[short] = name


def metric_extras(names: Iterable[str], run: RunView, where: str) -> dict[str, Value]:
    """Each metric's values for the run's extras: ``metric_<name>`` (or ``metric_<name>_<key>``)."""
    out: dict[str, Value] = {}
    retry = "then re-run with --retry-failed: the run's answers are cached and a metric does not change its id"
    for name in dict.fromkeys(names):
        try:
            value = load_metric(name, where)(run)
        except InputError:
            raise
        except Exception as exc:  # the researcher's code: name it, and what to do, in one line
            raise InputError(where, f"metrics: run metric {name} raised {type(exc).__name__}: {exc}",
                             f"fix the function, {retry}") from exc
        short = EXTRAS_PREFIX + metric_name(name)
        values = {f"{short}_{k}": v for k, v in value.items()} if isinstance(value, Mapping) else {short: value}
        for key, v in values.items():
            if not (v is None or isinstance(v, (int, float, bool))):
                raise InputError(where, f"metrics: run metric {name} returned {v!r} for {key}",
                                 f"return a number, a bool or None (or a mapping of them), {retry}")
        out |= values
    return out


def named_metric_columns(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` with each run metric's column under its own name (``x_metric_vote_share`` → ``vote_share``), where
    that name is not already a column."""
    renames = {c: c[len(COLUMN_PREFIX):] for c in runs.columns
               if str(c).startswith(COLUMN_PREFIX) and c[len(COLUMN_PREFIX):] not in runs.columns}
    return runs.rename(columns=renames) if renames else runs


def metric_columns(runs: pd.DataFrame) -> list[str]:
    """The run metrics' columns of a runs table (as ``named_metric_columns`` names them), numeric ones only."""
    named = named_metric_columns(runs)
    return [c for c in named.columns if c not in runs.columns and pd.api.types.is_numeric_dtype(named[c])]
