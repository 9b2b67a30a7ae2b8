"""Point-in-time macro values: what was *published* by a date, not what it measures.

FRED stores the latest revised vintage indexed by the period a value refers to.
A monthly CPI print for March is dated 2022-03-01 but was released mid-April,
so on a 2022-03-31 decision date only the February print was known. Each series
gets a release lag, counted from the end of the period the observation covers:

    available(obs) = period_end(obs.date, frequency) + lag_days
    known_at(as_of) = the latest obs with available(obs) <= as_of

The lags are conservative readings of each series' usual release schedule.
Revisions are not modelled (the pack holds one vintage); the memo says so.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class Release:
    frequency: str  # D, W, M or Q
    lag_days: int


#: Release lags in days after the end of the observed period.
RELEASES: dict[str, Release] = {
    "DFF": Release("D", 1),
    "DTB3": Release("D", 1),
    "DGS2": Release("D", 1),
    "DGS10": Release("D", 1),
    "DGS30": Release("D", 1),
    "T10Y2Y": Release("D", 1),
    "T10YIE": Release("D", 1),
    "BAMLH0A0HYM2": Release("D", 1),
    "BAMLC0A0CM": Release("D", 1),
    "VIXCLS": Release("D", 1),
    "SP500": Release("D", 1),
    "DTWEXBGS": Release("D", 7),  # weekly (Monday) release of daily values
    "DCOILWTICO": Release("D", 7),  # EIA spot prices post with about a week's delay
    "ICSA": Release("W", 5),  # week ending Saturday, released the next Thursday
    "FEDFUNDS": Release("M", 1),
    "CPIAUCSL": Release("M", 15),
    "CPILFESL": Release("M", 15),
    "CPIAUCSL_YOY": Release("M", 15),
    "CPILFESL_YOY": Release("M", 15),
    "PCEPILFE": Release("M", 30),
    "PCEPILFE_YOY": Release("M", 30),
    "UNRATE": Release("M", 7),  # first Friday of the next month
    "PAYEMS": Release("M", 7),
    "INDPRO": Release("M", 17),
    "UMCSENT": Release("M", 0),
    "M2SL": Release("M", 28),
    "GDPC1": Release("Q", 30),
}


def period_end(dates: pd.Series | pd.DatetimeIndex, frequency: str) -> pd.DatetimeIndex:
    d = pd.DatetimeIndex(dates)
    if frequency in ("D", "W"):
        return d
    if frequency == "M":
        return d + pd.offsets.MonthEnd(0)
    if frequency == "Q":
        return d + pd.offsets.QuarterEnd(0)
    raise ValueError(f"unknown frequency {frequency!r}")


def release_of(series: str) -> Release:
    if series not in RELEASES:
        raise KeyError(f"no release lag is declared for macro series {series!r}; add it to madbench.data.market.macro_series.RELEASES")
    return RELEASES[series]


@dataclass(frozen=True)
class Observation:
    series: str
    date: pd.Timestamp  # the period the value refers to
    value: float


class PublishedSeries:
    """One series with its release dates precomputed, for repeated as-of lookups."""

    def __init__(self, series: str, frame: pd.DataFrame):
        rel = release_of(series)
        frame = frame.sort_values("date", kind="mergesort")
        self.series = series
        self.dates = pd.DatetimeIndex(frame["date"])
        self.values = frame["value"].to_numpy(dtype=float)
        available = period_end(self.dates, rel.frequency) + pd.Timedelta(days=rel.lag_days)
        self._available = available.values.astype("datetime64[ns]")

    def latest(self, as_of: pd.Timestamp) -> Observation | None:
        """Latest observation whose release date is on or before ``as_of``."""
        i = int(np.searchsorted(self._available, np.datetime64(as_of, "ns"), side="right")) - 1
        return None if i < 0 else Observation(self.series, self.dates[i], float(self.values[i]))
