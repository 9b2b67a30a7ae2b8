"""Loading and checking the runs table that every statistic reads."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from madbench.data.errors import InputError
from madbench.data.parquet import read_parquet
from madbench.results import BatchDirs, ResultsDir

KEY_COLUMNS = ("config", "scenario_id")


def load_runs(path: str | Path) -> pd.DataFrame:
    """Read a results dir (its runs table) or any Parquet file with the runs columns."""
    path = Path(path)
    if path.is_dir():
        return check_runs(ResultsDir(path).runs, str(BatchDirs(path).table("runs")))
    if not path.exists():
        raise InputError(str(path), "not found", "give a results dir or a Parquet file")
    return check_runs(read_parquet(path), str(path))


def check_runs(runs: pd.DataFrame, where: str, metrics: list[str] | None = None) -> pd.DataFrame:
    """The columns exist, every pairing key (config, scenario_id, replicate) is filled, and no finished run is there twice."""
    missing = [c for c in (*KEY_COLUMNS, *(metrics or [])) if c not in runs.columns]
    if missing:
        raise InputError(where, f"missing column(s) {', '.join(missing)}; present: {', '.join(map(str, runs.columns))}",
                         "the statistics need config, scenario_id and the metric columns (replicate is optional)")
    for column in ("config", *pair_keys(runs)):
        values = runs[column]
        blank = values.isna()
        if not pd.api.types.is_numeric_dtype(values):  # an empty or all-blank name is as missing as a null
            blank |= values.astype(str).str.strip() == ""
        if blank.any():
            raise InputError(where, f"column {column} has {int(blank.sum())} missing value(s) (of {len(runs)} rows)",
                             f"every run needs its {column} to be paired with the other configs; fill or drop those rows")
    keys = ["config", *pair_keys(runs)]
    dup = ok_runs(runs).duplicated(keys, keep=False)
    if dup.any():
        first = ok_runs(runs)[dup].iloc[0]
        example = ", ".join(f"{k}={first[k]!s}" for k in keys)
        raise InputError(where, f"{int(dup.sum())} rows share their {'/'.join(keys)} with another row (e.g. {example})",
                         "keep one row per run; was the table concatenated twice?")
    return runs


def ok_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """Runs that finished; failed runs have no metrics and are counted apart, never averaged in."""
    return runs[runs["status"] == "ok"] if "status" in runs.columns else runs


def pair_keys(runs: pd.DataFrame) -> list[str]:
    return ["scenario_id", "replicate"] if "replicate" in runs.columns else ["scenario_id"]


def ordered_configs(runs: pd.DataFrame, compare: list[str] | None, where: str) -> list[str]:
    present = list(dict.fromkeys(runs["config"].astype(str)))
    if not compare:
        return present
    unknown = [c for c in compare if c not in present]
    if unknown:
        raise InputError(where, f"--compare names config(s) with no committed run {', '.join(unknown)}",
                         f"choose from {', '.join(present)} (a config of the batch whose runs are not committed yet has "
                         "no results to compare)")
    return compare


def json_safe(value):
    """JSON has no NaN or infinity: they become null (an undefined statistic, not a zero)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_safe(v) for v in value]
    return value


def batch_order(results_dir: str | Path, runs: pd.DataFrame) -> list[str] | None:
    """The batch file's config order (from manifest.json), for table columns; None without a manifest."""
    manifest = ResultsDir(results_dir).manifest
    if manifest is None:
        return None
    present = set(runs["config"].astype(str))
    order = list(dict.fromkeys(r.config for r in manifest.runs))
    return [c for c in order if c in present] + sorted(present - set(order))


def batch_pairs(results_dir: str | Path) -> list[tuple[str, str]] | None:
    """The batch's declared ``pairs:`` as (treatment, control), from the spec in manifest.json: [] when it declares
    none, None without a manifest (a results directory of unknown origin)."""
    manifest = ResultsDir(results_dir).manifest
    if manifest is None:
        return None
    pairs = manifest.spec.get("pairs") or []
    names = sorted({r.config for r in manifest.runs})
    for i, p in enumerate(pairs):  # a pair naming no config of the batch would be silently left out of the tests
        for side in ("control", "treatment"):
            if p.get(side) not in names:
                raise InputError(Path(results_dir) / "manifest.json", f"spec.pairs[{i}].{side}: {p.get(side)!r} is not a "
                                 f"config of this batch (its configs: {', '.join(names)})",
                                 "pass --all-pairs to compare every pair, or fix `pairs` in the batch file and run it again")
    return [(p["treatment"], p["control"]) for p in pairs]
