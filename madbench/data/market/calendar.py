"""Quarters and the trading calendar of a pack.

Conventions used everywhere in madbench:
- the *as-of date* of an invest quarter is the last trading day strictly before
  the quarter starts; the memo describes that close and the broker buys at it;
- the *holding window* runs from the as-of close to the quarter's last trading day.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from madbench.data.errors import InputError

_QUARTER = re.compile(r"^([0-9]{4})Q([1-4])$")  # ASCII digits: \d takes "２０２３" too
#: The years a quarter may name: market data and pandas timestamps lie well inside them.
YEARS = range(1900, 2200)


@dataclass(frozen=True, order=True)
class Quarter:
    year: int
    q: int

    @classmethod
    def parse(cls, text: str, where: str = "quarter") -> Quarter:
        m = _QUARTER.match(str(text).strip())
        if not m:
            raise InputError(where, f"{text!r} is not a quarter", "write it as YYYYQn, e.g. 2022Q2")
        if int(m.group(1)) not in YEARS:
            raise InputError(where, f"{text!r} is out of range: its year must lie in {YEARS.start}-{YEARS.stop - 1}",
                             "write a quarter of the data, e.g. 2022Q2")
        return cls(int(m.group(1)), int(m.group(2)))

    def __str__(self) -> str:
        return f"{self.year}Q{self.q}"

    @property
    def start(self) -> pd.Timestamp:
        return pd.Timestamp(self.year, 3 * (self.q - 1) + 1, 1)

    @property
    def end(self) -> pd.Timestamp:
        return (self.start + pd.offsets.QuarterEnd(0)).normalize()

    def previous(self) -> Quarter:
        return Quarter(self.year - 1, 4) if self.q == 1 else Quarter(self.year, self.q - 1)

    def next(self) -> Quarter:
        return Quarter(self.year + 1, 1) if self.q == 4 else Quarter(self.year, self.q + 1)

    @classmethod
    def of(cls, date: pd.Timestamp) -> Quarter:
        return cls(date.year, (date.month - 1) // 3 + 1)


def quarter_range(spec: str, where: str = "--quarters") -> list[Quarter]:
    """Parse ``2021Q4:2025Q3`` (inclusive) into the list of quarters."""
    if ":" not in spec:
        return [Quarter.parse(spec, where)]
    a, b = spec.split(":", 1)
    first, last = Quarter.parse(a, where), Quarter.parse(b, where)
    if last < first:
        raise InputError(where, f"range {spec!r} ends before it starts", "write FIRST:LAST with FIRST <= LAST")
    out, q = [], first
    while q <= last:
        out.append(q)
        q = q.next()
    return out


class TradingCalendar:
    """Sorted trading dates of a pack (the union of its price dates)."""

    def __init__(self, dates: pd.DatetimeIndex):
        self.dates = pd.DatetimeIndex(dates).unique().sort_values()
        self._ns = self.dates.values.astype("datetime64[ns]")

    def index_of(self, date: pd.Timestamp) -> int:
        i = int(np.searchsorted(self._ns, np.datetime64(date, "ns")))
        if i >= len(self._ns) or self._ns[i] != np.datetime64(date, "ns"):
            raise KeyError(f"{date} is not a trading day of this pack")
        return i

    @property
    def first(self) -> pd.Timestamp:
        return self.dates[0]

    @property
    def last(self) -> pd.Timestamp:
        return self.dates[-1]

    def next_after(self, date: pd.Timestamp) -> pd.Timestamp:
        """The first trading day strictly after ``date``. Past the pack's last day, the next weekday after ``date``:
        a date after every as-of date this pack can give, which is all a point-in-time test of it needs."""
        i = int(np.searchsorted(self._ns, np.datetime64(date, "ns"), side="right"))
        return self.dates[i] if i < len(self._ns) else (pd.Timestamp(date) + pd.offsets.BDay(1)).normalize()

    def as_of(self, quarter: Quarter, where: str = "invest_quarter") -> pd.Timestamp:
        """Last trading day before ``quarter`` starts; the pack must reach that far."""
        start = np.datetime64(quarter.start, "ns")
        i = int(np.searchsorted(self._ns, start, side="left")) - 1
        if i < 0:
            raise InputError(
                where,
                f"{quarter} starts before the pack's first trading day {self.first.date()}",
                "choose a later quarter or a pack with older data",
            )
        if self.last < quarter.start - pd.Timedelta(days=1):
            raise InputError(
                where,
                f"the pack ends {self.last.date()}, before the as-of date of {quarter} can be known",
                "choose an earlier quarter or extend the pack (madbench data fetch)",
            )
        return self.dates[i]

    def holding_window(self, quarter: Quarter, where: str = "invest_quarter") -> pd.DatetimeIndex:
        """As-of date followed by every trading day of ``quarter``."""
        as_of = self.as_of(quarter, where)
        # The last weekday of the quarter, less one day for a holiday such as Good Friday.
        last_weekday = quarter.end if quarter.end.weekday() < 5 else quarter.end - pd.offsets.BDay(1)
        if self.last < last_weekday - pd.Timedelta(days=1):
            raise InputError(
                where,
                f"the pack ends {self.last.date()}, before {quarter} ends {quarter.end.date()}",
                "choose an earlier quarter or extend the pack (madbench data fetch)",
            )
        inside = self.dates[(self.dates >= quarter.start) & (self.dates <= quarter.end)]
        return pd.DatetimeIndex([as_of]).append(inside)
