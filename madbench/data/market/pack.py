"""Loading a data pack: Parquet tables -> validated frames and wide price matrices.

The pack is read once and then shared by every memo and backtest of a process,
so loading does the pivots up front and everything downstream is array slicing.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from madbench.data.errors import InputError
from madbench.data.market.calendar import Quarter, TradingCalendar
from madbench.data.market.macro_series import PublishedSeries
from madbench.data.market.table_specs import (
    ALL_TABLES,
    EARNINGS_DATES,
    MACRO,
    OPTIONAL_DIR,
    OPTIONAL_TABLES,
    PRICES,
    REQUIRED_TABLES,
    UNIVERSE,
    TableSpec,
)
from madbench.data.paths import PROJECT_ROOT

PACK_ENV = "MADBENCH_PACK"
EVIDENCE_ENV = "MADBENCH_EVIDENCE"
BENCHMARK = "SPY"
T = TypeVar("T")

#: Where the demo and tests look for the offline pack when nothing else is given.
REPO_ROOT = PROJECT_ROOT
SHARED_MARKET = REPO_ROOT.parent / "shared" / "data" / "market"
SHARED_PAPER = REPO_ROOT.parent / "shared" / "data" / "paper"


def read_table(path: Path, spec: TableSpec) -> pd.DataFrame:
    """Read one table, apply its aliases and check its required columns."""
    try:
        df = pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises several types for a bad file
        raise InputError(path, f"cannot read Parquet table {spec.name!r}: {exc}", "rewrite the file") from exc
    renames = {src: dst for src, dst in spec.aliases.items() if src in df.columns and dst not in df.columns}
    df = df.rename(columns=renames)
    missing = [c for c in spec.required if c not in df.columns]
    if missing:
        raise InputError(
            path,
            f"table {spec.name!r} is missing columns {missing} (has {sorted(map(str, df.columns))})",
            f"add the columns; {spec.name} needs {list(spec.required)}",
        )
    return df


def _normalise_prices(df: pd.DataFrame, path: Path) -> pd.DataFrame:
    if "adj_close" not in df.columns and "close" not in df.columns:
        raise InputError(path, "table 'prices' has neither 'adj_close' nor 'close'", "add adj_close (preferred) or close")
    df = df.copy()
    df["date"] = pd.to_datetime(df["date"]).dt.normalize()
    df["ticker"] = df["ticker"].astype(str)
    for col in ("adj_close", "close", "volume"):
        if col not in df.columns:
            df[col] = np.nan
        df[col] = df[col].astype(float)
    return df


@dataclass
class Pack:
    """A loaded pack. ``px`` holds the price each ticker is measured on."""

    root: Path
    prices: pd.DataFrame
    macro: pd.DataFrame
    universe: pd.DataFrame
    evidence: dict[str, pd.DataFrame] = field(default_factory=dict)
    evidence_sources: list[Path] = field(default_factory=list)
    _derived: dict[Any, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        p = self.prices
        self.calendar = TradingCalendar(pd.DatetimeIndex(p["date"]))
        adj = p.pivot(index="date", columns="ticker", values="adj_close").reindex(self.calendar.dates)
        close = p.pivot(index="date", columns="ticker", values="close").reindex(self.calendar.dates)
        # Total-return prices where the pack has them; plain closes otherwise, per ticker.
        has_adj = adj.notna().any(axis=0)
        self.price_basis: dict[str, str] = {t: ("adj_close" if has_adj.get(t, False) else "close") for t in close.columns}
        self.px = adj.copy()
        for t, basis in self.price_basis.items():
            if basis == "close":
                self.px[t] = close[t]
        self.px = self.px[sorted(self.px.columns)]
        self.volume = p.pivot(index="date", columns="ticker", values="volume").reindex(self.calendar.dates)[self.px.columns]
        self.tickers = list(self.px.columns)
        self.px_np = np.ascontiguousarray(self.px.to_numpy(dtype=float))
        self.volume_np = np.ascontiguousarray(self.volume.to_numpy(dtype=float))
        self._macro_by_series = {str(s): g for s, g in self.macro.groupby("series", sort=True)}
        self._published: dict[str, PublishedSeries] = {}
        self._evidence_by_ticker = {
            name: {t: g for t, g in _with_sort_keys(df).groupby("ticker", sort=True)} for name, df in self.evidence.items()
        }
        self._results_dates = _results_dates(self.evidence.get(EARNINGS_DATES.name))

    def evidence_for(self, table: str, ticker: str) -> pd.DataFrame | None:
        """Rows of an evidence table for one ticker, with ``_qord`` / ``_date`` sort keys."""
        return self._evidence_by_ticker.get(table, {}).get(ticker)

    def derived(self, key: Any, build: Callable[[], T]) -> T:
        """``build()``, computed once per pack and ``key``: for values that depend only on the pack's
        tables (which never change after loading), such as the dates the memo gives evidence rows."""
        if key not in self._derived:
            self._derived[key] = build()
        value: T = self._derived[key]  # built by this key's one build function
        return value

    @property
    def has_results_dates(self) -> bool:
        """Whether an ``earnings_dates`` table is attached."""
        return EARNINGS_DATES.name in self.evidence

    def results_dates(self, ticker: str) -> np.ndarray:
        """Sorted distinct filing dates (datetime64[ns]) of ``ticker``'s results reports; empty if none."""
        return self._results_dates.get(ticker, np.array([], dtype="datetime64[ns]"))

    def has_ticker(self, ticker: str) -> bool:
        return ticker in self.px.columns

    def missing_tickers(self, tickers: list[str]) -> list[str]:
        return [t for t in tickers if t not in self.px.columns]

    def macro_series(self, series: str) -> pd.DataFrame | None:
        return self._macro_by_series.get(series)

    def published(self, series: str) -> PublishedSeries | None:
        """The series with release lags applied, or None if the pack lacks it."""
        if series not in self._published and series in self._macro_by_series:
            self._published[series] = PublishedSeries(series, self._macro_by_series[series])
        return self._published.get(series)

    def sector(self, ticker: str) -> str:
        return str(self.universe.loc[ticker, "sector"]) if ticker in self.universe.index else "unclassified"


def _quarter_ordinal(text: str) -> int:
    q = Quarter.parse(text, where="evidence quarter")
    return q.year * 4 + q.q - 1


def _with_sort_keys(df: pd.DataFrame) -> pd.DataFrame:
    """Add ``_qord`` (from ``quarter``) and ``_date`` (from ``filing_date`` or ``as_of``)."""
    df = df.copy()
    df["ticker"] = df["ticker"].astype(str)
    if "quarter" in df.columns:
        df["_qord"] = df["quarter"].astype(str).map(_quarter_ordinal)
    for col in ("filing_date", "as_of"):
        if col in df.columns:
            df["_date"] = pd.to_datetime(df[col]).dt.normalize()
            break
    return df


def _results_dates(df: pd.DataFrame | None) -> dict[str, np.ndarray]:
    """Per ticker, the sorted distinct filing dates of an ``earnings_dates`` table."""
    if df is None:
        return {}
    return {str(t): np.unique(g.to_numpy(dtype="datetime64[ns]")) for t, g in df["date"].groupby(df["ticker"].astype(str), sort=True)}


def _dated(df: pd.DataFrame, path: Path, column: str = "date") -> pd.DataFrame:
    """``df`` with ``column`` parsed to dates; a row without a date is an error."""
    try:
        dates = pd.to_datetime(df[column]).dt.normalize()
    except (ValueError, TypeError) as exc:
        raise InputError(path, f"column {column!r} does not parse as dates: {exc}", "write dates as YYYY-MM-DD") from exc
    if dates.isna().any():
        raise InputError(path, f"{int(dates.isna().sum())} rows have no {column!r}", "drop them or fill in the date")
    return df.assign(**{column: dates})


def optional_table_path(directory: Path, spec: TableSpec) -> Path | None:
    """Where ``directory`` holds the optional table ``spec``: at its top or in its ``optional/`` folder."""
    found = [p for p in (directory / spec.filename, directory / OPTIONAL_DIR / spec.filename) if p.exists()]
    if len(found) > 1:
        raise InputError(found[1], f"table {spec.name!r} is also at {found[0]}", "keep one copy")
    return found[0] if found else None


def _load_evidence_dir(directory: Path, into: dict[str, pd.DataFrame]) -> bool:
    found = False
    for spec in OPTIONAL_TABLES:
        path = optional_table_path(directory, spec)
        if path is not None:
            df = read_table(path, spec)
            if spec is EARNINGS_DATES:
                df = _dated(df, path)
            into[spec.name] = pd.concat([into[spec.name], df], ignore_index=True) if spec.name in into else df
            found = True
    return found


def load_pack(root: str | Path, evidence: Sequence[str | Path] = ()) -> Pack:
    """Load the pack at ``root`` and attach evidence tables from ``evidence`` dirs."""
    root = Path(root)
    if not root.is_dir():
        raise InputError(root, "data pack directory not found", pack_fix())
    frames = {}
    for spec in REQUIRED_TABLES:
        path = root / spec.filename
        if not path.exists():
            raise InputError(path, f"required table {spec.name!r} is missing from the pack", f"add {spec.filename}")
        frames[spec.name] = read_table(path, spec)
    prices = _normalise_prices(frames["prices"], root / PRICES.filename)
    dup = prices.duplicated(["date", "ticker"])
    if dup.any():
        first = prices.loc[dup, ["date", "ticker"]].iloc[0]
        raise InputError(
            root / PRICES.filename,
            f"{int(dup.sum())} duplicate (date, ticker) rows, first {first['ticker']} on {first['date'].date()}",
            "keep one row per date and ticker (madbench data check lists them)",
        )
    macro = frames["macro"].copy()
    macro["date"] = pd.to_datetime(macro["date"]).dt.normalize()
    macro["value"] = macro["value"].astype(float)
    universe = frames["universe"].copy()
    universe["ticker"] = universe["ticker"].astype(str)
    universe = universe.drop_duplicates("ticker").set_index("ticker")
    # ETFs and indices carry no GICS sector; label them by asset class so every ticker has one.
    fallback = universe["asset_class"].astype(str)
    if "etf_category" in universe.columns:
        fallback = fallback.where(universe["etf_category"].isna(), fallback + ": " + universe["etf_category"].astype(str))
    universe["sector"] = universe["sector"].where(universe["sector"].notna(), fallback)
    ev: dict[str, pd.DataFrame] = {}
    sources: list[Path] = []
    if _load_evidence_dir(root, ev):
        sources.append(root)
    for d in evidence:
        d = Path(d)
        if not d.is_dir():
            raise InputError(d, "evidence directory not found", "pass an existing directory to --evidence")
        if not _load_evidence_dir(d, ev):
            names = ", ".join(s.filename for s in OPTIONAL_TABLES)
            raise InputError(d, "holds no evidence table", f"it needs one of {names}")
        sources.append(d)
    return Pack(root=root, prices=prices, macro=macro, universe=universe, evidence=ev, evidence_sources=sources)


def pack_fix() -> str:
    """How to name a pack. Inside a `ray job submit` job (Ray hands its entrypoint this variable) the offline pack
    beside the checkout is not there: the job runs in a copy of its --working-dir upload, and each node loads the pack."""
    if os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR"):
        return ("inside a Ray job, pass --pack with an absolute path on the head that every node has too (e.g. "
                "/home/ubuntu/shared/data/market, synced by cluster.yaml's file_mounts), or a pack inside the "
                "--working-dir upload")
    return (f"pass --pack DIR, set {PACK_ENV}, or build one: madbench data fetch --tickers AAPL,MSFT,SPY --start "
            "2020-01-01 --end 2025-12-31 --out packs/mine")


def resolve_pack_dir(cli_value: str | None = None, config_value: str | None = None) -> Path:
    """``--pack``, else ``$MADBENCH_PACK``, else the config, else the shared offline pack."""
    for value in (cli_value, os.environ.get(PACK_ENV), config_value):
        if value:
            return Path(value).expanduser()
    if SHARED_MARKET.is_dir():
        return SHARED_MARKET
    raise InputError("--pack", "no data pack given and no offline pack found", pack_fix())


def resolve_evidence_dirs(cli_values: list[str] | None = None) -> list[Path]:
    """``--evidence`` (repeatable), else ``$MADBENCH_EVIDENCE`` (colon-separated)."""
    if cli_values:
        return [Path(v).expanduser() for v in cli_values]
    env = os.environ.get(EVIDENCE_ENV)
    return [Path(v).expanduser() for v in env.split(os.pathsep) if v] if env else []


__all__ = ["ALL_TABLES", "BENCHMARK", "MACRO", "Pack", "UNIVERSE", "load_pack", "resolve_pack_dir", "resolve_evidence_dirs"]
