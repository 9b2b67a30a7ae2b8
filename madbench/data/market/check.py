"""`madbench data check`: every problem a pack has, plus a coverage summary.

Unlike ``load_pack`` (which stops at the first blocking problem), the check
reads each table on its own and lists all problems it finds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from madbench.data.errors import InputError
from madbench.data.market.macro_series import RELEASES
from madbench.data.market.pack import optional_table_path, read_table
from madbench.data.market.table_specs import ALL_TABLES, EARNINGS_DATES, OPTIONAL_TABLES, REQUIRED_TABLES


@dataclass
class CheckReport:
    root: Path
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    coverage: pd.DataFrame | None = None
    macro_coverage: pd.DataFrame | None = None
    tables: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems


def _duplicates(df: pd.DataFrame, key: tuple[str, ...], name: str, report: CheckReport) -> None:
    key = tuple(k for k in key if k in df.columns)
    if key:
        n = int(df.duplicated(list(key)).sum())
        if n:
            report.problems.append(f"{name}: {n} duplicate rows on key {list(key)}")


def price_coverage(prices: pd.DataFrame) -> tuple[pd.DataFrame, pd.DatetimeIndex]:
    """Per ticker: first and last date, days present, and days missing inside its span."""
    prices = prices.assign(date=pd.to_datetime(prices["date"]).dt.normalize())
    calendar = pd.DatetimeIndex(prices["date"].unique()).sort_values()
    pos = pd.Series(range(len(calendar)), index=calendar)
    # Each ticker is measured on adj_close where it has any, else on close (as Pack does).
    adj = prices["adj_close"] if "adj_close" in prices.columns else pd.Series(float("nan"), index=prices.index)
    close = prices["close"] if "close" in prices.columns else pd.Series(float("nan"), index=prices.index)
    has_adj = adj.notna().groupby(prices["ticker"]).transform("any")
    price = adj.where(has_adj, close)
    g = prices.assign(_price=price).groupby("ticker")
    cov = pd.DataFrame({
        "first": g["date"].min(),
        "last": g["date"].max(),
        "days": g["date"].nunique(),
        "missing_price": g["_price"].apply(lambda s: int(s.isna().sum())),
    })
    cov["gaps"] = (pos.loc[cov["last"]].to_numpy() - pos.loc[cov["first"]].to_numpy() + 1) - cov["days"].to_numpy()
    return cov.sort_index(), calendar


def check_pack(root: str | Path) -> CheckReport:
    root = Path(root)
    if not root.is_dir():
        raise InputError(root, "data pack directory not found", "pass an existing directory to --pack")
    report = CheckReport(root)
    frames: dict[str, pd.DataFrame] = {}
    for spec in REQUIRED_TABLES + OPTIONAL_TABLES:
        try:
            path = root / spec.filename if spec in REQUIRED_TABLES else optional_table_path(root, spec)
        except InputError as exc:  # an optional table in two places
            report.problems.append(str(exc))
            continue
        if path is None or not path.exists():
            if spec in REQUIRED_TABLES:
                report.problems.append(f"{path}: required table {spec.name!r} is missing")
            continue
        try:
            frames[spec.name] = read_table(path, spec)
        except InputError as exc:
            report.problems.append(str(exc))
            continue
        report.tables[spec.name] = len(frames[spec.name])
        _duplicates(frames[spec.name], spec.key, spec.filename, report)
        if spec is EARNINGS_DATES:
            bad = int(pd.to_datetime(frames[spec.name]["date"], errors="coerce").isna().sum())
            if bad:
                report.problems.append(f"{path}: {bad} rows whose date is missing or not a date")
    if "prices" in frames:
        prices = frames["prices"]
        if "adj_close" not in prices.columns and "close" not in prices.columns:
            report.problems.append("prices.parquet: has neither adj_close nor close")
        else:
            cov, calendar = price_coverage(prices)
            report.coverage = cov
            for t, row in cov[cov["gaps"] > 0].iterrows():
                report.problems.append(f"prices.parquet: {t} misses {int(row['gaps'])} trading days between {row['first'].date()} and {row['last'].date()}")
            for t, row in cov[cov["missing_price"] > 0].iterrows():
                report.problems.append(f"prices.parquet: {t} has {int(row['missing_price'])} rows with no price")
            late = cov[cov["first"] > calendar[0]]
            for t, row in late.iterrows():
                report.notes.append(f"{t} starts {row['first'].date()}, after the pack's first day {calendar[0].date()}")
            if "universe" in frames:
                listed = set(frames["universe"]["ticker"].astype(str))
                unlisted = sorted(set(cov.index) - listed)
                if unlisted:
                    report.problems.append(f"universe.parquet: tickers with prices but no universe row: {unlisted[:10]}{' ...' if len(unlisted) > 10 else ''}")
            if "SPY" not in cov.index:
                report.notes.append("no SPY prices: BETA, IDMOM, RS60 and the SPY benchmark will be n/a")
    if "macro" in frames:
        m = frames["macro"].assign(date=lambda d: pd.to_datetime(d["date"]))
        g = m.groupby("series")
        mc = pd.DataFrame({"first": g["date"].min(), "last": g["date"].max(), "obs": g.size()})
        mc["release_lag"] = [f"{RELEASES[s].lag_days}d after {RELEASES[s].frequency} period" if s in RELEASES else "undeclared" for s in mc.index]
        report.macro_coverage = mc
        undeclared = [s for s in mc.index if s not in RELEASES]
        if undeclared:
            report.notes.append(f"macro series without a declared release lag (not used in memos): {undeclared}")
    return report


def format_report(r: CheckReport) -> str:
    lines = [f"pack: {r.root}", "tables: " + ", ".join(f"{k} ({v:,} rows)" for k, v in r.tables.items())]
    if r.coverage is not None:
        c = r.coverage
        lines.append(
            f"prices: {len(c)} tickers, {c['first'].min().date()} .. {c['last'].max().date()}, "
            f"{int(c['days'].max())} trading days; {int((c['gaps'] > 0).sum())} tickers with gaps"
        )
        short = c[c["days"] < c["days"].max()]
        if len(short):
            lines.append("tickers with shorter coverage: " + ", ".join(f"{t} ({row['first'].date()}..{row['last'].date()})" for t, row in short.head(20).iterrows()))
    if r.macro_coverage is not None:
        mc = r.macro_coverage
        lines.append(f"macro: {len(mc)} series")
        for s, row in mc.iterrows():
            lines.append(f"  {s:<14} {row['first'].date()} .. {row['last'].date()}  {int(row['obs']):>6} obs  release lag {row['release_lag']}")
    optional = [s.name for s in OPTIONAL_TABLES if s.name in r.tables]
    lines.append("optional tables: " + (", ".join(optional) if optional else "none"))
    lines += [f"note: {n}" for n in r.notes]
    lines += [f"PROBLEM: {p}" for p in r.problems]
    lines.append("OK" if r.ok else f"{len(r.problems)} problem(s)")
    return "\n".join(lines)


__all__ = ["ALL_TABLES", "CheckReport", "check_pack", "format_report"]
