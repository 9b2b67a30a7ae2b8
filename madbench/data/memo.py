"""The point-in-time memo a debate reasons over.

A memo is a list of evidence items with stable IDs (``[L1-10Y]``,
``[AAPL-RET60]``, ``[AAPL-F3]``) grouped into sections, plus its plain-text
rendering. It uses only information public on or before the as-of date (the
last trading day before the invest quarter): adding later prices or macro rows
to a pack changes nothing, and later results-filing dates serve only to keep
out calls not yet held. Every item's ``as_of`` is the calendar date its information
became public: the close used (prices), the publication date (macro, with the
release lags of ``macro_series``), the filing date (filings), the trading day
after the news window ends (news sentiment; ``news_available``), and the results
release of the fiscal quarter it describes (earnings calls, fundamentals; see
"When results became public").
The same inputs give byte-identical output: no clocks, no unordered iteration. A blind counterpart (pseudonyms
for tickers and names, dates relative to the as-of date) is made from a memo by ``madbench.data.blind``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from pydantic import BaseModel

from madbench.data.market import features as F
from madbench.data.market.calendar import Quarter
from madbench.data.market.macro_series import period_end, release_of
from madbench.data.market.pack import BENCHMARK, Pack
from madbench.data.market.table_specs import CALL_SECTIONS, FILING_SECTIONS
from madbench.data.scenario import Scenario, check_against_pack

NA_HISTORY = "n/a (insufficient history)"


class EvidenceItem(BaseModel):
    id: str
    label: str
    value: float | str | None
    unit: str
    as_of: str | None  # YYYY-MM-DD: when the information became public, on or before the memo's as-of date
    source: str
    note: str | None = None
    period: str | None = None  # the period the value describes where that is not as_of (a month, a fiscal quarter)


@dataclass
class Section:
    title: str
    items: list[EvidenceItem]
    ticker: str | None = None
    header: str | None = None


@dataclass
class Memo:
    scenario_id: str
    invest_quarter: str
    as_of: pd.Timestamp
    tickers: list[str]
    sections: list[Section]
    #: A blind memo (``madbench.data.blind``): pseudonyms and relative dates, told in its header with ``notes``.
    blind: bool = False
    #: Sector label by ticker, shown beside it (blind memos only: a named ticker tells its sector itself).
    sectors: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def items(self) -> list[EvidenceItem]:
        return [it for s in self.sections for it in s.items]

    @property
    def evidence_ids(self) -> set[str]:
        return {it.id for it in self.items}

    def to_json(self) -> str:
        return json.dumps([it.model_dump() for it in self.items], indent=1, ensure_ascii=False)

    @property
    def text(self) -> str:
        return render_text(self)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()


# ---------------------------------------------------------------- formatting

def _fmt(value: float | str | None, kind: str) -> str:
    if value is None:
        return NA_HISTORY
    if isinstance(value, str):
        return value
    return {
        "pct_signed": lambda v: f"{v:+.1f} percent",
        "pct": lambda v: f"{v:.1f} percent",
        "pct2": lambda v: f"{v:.2f} percent",
        "pp": lambda v: f"{v:+.2f} percentage points",
        "usd": lambda v: f"{v:.2f} USD",
        "usd_big": lambda v: f"{v:,.0f} USD",
        "ratio": lambda v: f"{v:.2f}",
        "ratio4": lambda v: f"{v:.4f}",
        "share": lambda v: f"{v:.2f}",
        "index": lambda v: f"{v:.2f}",
    }[kind](value)


# ---------------------------------------------------------------- macro layer

@dataclass(frozen=True)
class MacroSpec:
    id: str
    label: str
    series: tuple[str, ...]  # one series, or two combined by ``combine``
    unit: str
    fmt: str
    change: str | None  # how the quarter-on-quarter change is shown: bps, pp, pct, points
    combine: Callable[[float, float], float] | None = None


MACRO: tuple[MacroSpec, ...] = (
    MacroSpec("L1-FF", "Effective Fed Funds rate", ("DFF",), "percent", "pct2", "bps"),
    MacroSpec("L1-2Y", "2-year Treasury yield", ("DGS2",), "percent", "pct2", "bps"),
    MacroSpec("L1-10Y", "10-year Treasury yield", ("DGS10",), "percent", "pct2", "bps"),
    MacroSpec("L1-30Y", "30-year Treasury yield", ("DGS30",), "percent", "pct2", "bps"),
    MacroSpec("L1-CURVE", "10Y minus 2Y Treasury spread", ("T10Y2Y",), "percentage points", "pct2", "bps"),
    MacroSpec("L1-REAL", "10-year real yield (10Y minus 10Y breakeven inflation)", ("DGS10", "T10YIE"), "percent", "pct2", "bps", lambda a, b: a - b),
    MacroSpec("L1-CPI", "CPI inflation, year on year", ("CPIAUCSL_YOY",), "percent", "pct2", "pp"),
    MacroSpec("L1-CORE", "Core CPI inflation, year on year", ("CPILFESL_YOY",), "percent", "pct2", "pp"),
    MacroSpec("L1-INDPRO", "Industrial production index (2017=100)", ("INDPRO",), "index", "index", "pct"),
    MacroSpec("L1-UNEMP", "Unemployment rate", ("UNRATE",), "percent", "pct2", "pp"),
    MacroSpec("L1-HY", "High-yield corporate bond spread (ICE BofA OAS)", ("BAMLH0A0HYM2",), "percent", "pct2", "bps"),
    MacroSpec("L1-DXY", "Broad trade-weighted US dollar index (FRED DTWEXBGS)", ("DTWEXBGS",), "index", "index", "pct"),
    MacroSpec("L1-WTI", "WTI crude oil spot price", ("DCOILWTICO",), "USD per barrel", "usd", "pct"),
    MacroSpec("L1-VIX", "VIX implied volatility index", ("VIXCLS",), "index", "index", "points"),
)


@dataclass(frozen=True)
class MacroValue:
    value: float
    period: str  # the period observed: a day, a week's end, a month (YYYY-MM) or a quarter
    published: pd.Timestamp  # when the last of its series' observations was released


def _period_label(date: pd.Timestamp, frequency: str) -> str:
    if frequency == "M":
        return f"{date.year}-{date.month:02d}"
    if frequency == "Q":
        return str(Quarter.of(date))
    return str(date.date())


def _macro_value(pack: Pack, spec: MacroSpec, as_of: pd.Timestamp) -> MacroValue | None:
    obs = []
    for s in spec.series:
        ps = pack.published(s)
        o = ps.latest(as_of) if ps is not None else None
        if o is None:
            return None
        obs.append(o)
    value = spec.combine(obs[0].value, obs[1].value) if spec.combine else obs[0].value
    periods, published = [], []
    for o in obs:
        rel = release_of(o.series)
        published.append(period_end(pd.DatetimeIndex([o.date]), rel.frequency)[0] + pd.Timedelta(days=rel.lag_days))
        label = _period_label(o.date, rel.frequency)
        if label not in periods:
            periods.append(label)
    return MacroValue(value, " / ".join(periods), max(published))


def _change_note(spec: MacroSpec, now: float, before: float | None) -> str | None:
    if before is None or spec.change is None:
        return None
    d = now - before
    if spec.change == "bps":
        return f"{d * 100:+.0f} bps QoQ"
    if spec.change == "pp":
        return f"{d:+.2f} pp QoQ"
    if spec.change == "points":
        return f"{d:+.2f} points QoQ"
    return f"{(now / before - 1) * 100:+.1f} percent QoQ" if before else None


def macro_items(pack: Pack, as_of: pd.Timestamp, prev_as_of: pd.Timestamp | None) -> list[EvidenceItem]:
    items = []
    for spec in MACRO:
        got = _macro_value(pack, spec, as_of)
        source = "FRED " + " - ".join(spec.series)
        if got is None:
            missing = [s for s in spec.series if pack.macro_series(s) is None]
            why = f"n/a (series {', '.join(missing)} not in the pack)" if missing else "n/a (no value published by the as-of date)"
            items.append(EvidenceItem(id=spec.id, label=spec.label, value=None, unit=spec.unit, as_of=None, source=source, note=why))
            continue
        before = _macro_value(pack, spec, prev_as_of) if prev_as_of is not None else None
        note = _change_note(spec, got.value, before.value if before else None)
        items.append(EvidenceItem(id=spec.id, label=spec.label, value=got.value, unit=spec.unit,
                                  as_of=str(got.published.date()), source=source, note=note, period=got.period))
    return items


def macro_section(pack: Pack, q: Quarter, where: str = "scenario") -> Section:
    """The macro section of a memo for invest quarter ``q``."""
    as_of = pack.calendar.as_of(q, where=f"{where}.invest_quarter")
    # QoQ changes need the previous quarter's as-of date, which exists only if
    # the pack starts before that quarter; otherwise the memo shows levels only.
    prev_as_of = pack.calendar.as_of(q.previous()) if pack.calendar.first < q.previous().start else None
    return Section("Macro regime", macro_items(pack, as_of, prev_as_of))


# ---------------------------------------------------------------- ticker layer

#: A feature of (prices, SPY's prices, volume); None where its window is not covered.
FeatureFn = Callable[[np.ndarray, np.ndarray | None, np.ndarray], float | None]


@dataclass(frozen=True)
class FeatureSpec:
    key: str
    label: str
    unit: str
    fmt: str
    section: str
    compute: FeatureFn


def _needs_spy(fn: Callable[[np.ndarray, np.ndarray], float | None]) -> FeatureFn:
    return lambda p, m, v: None if m is None else fn(p, m)


FEATURES: tuple[FeatureSpec, ...] = (
    FeatureSpec("PX", "Close", "USD", "usd", "Price and returns", lambda p, m, v: float(p[-1]) if not np.isnan(p[-1]) else None),
    FeatureSpec("RET20", "20-day return", "percent", "pct_signed", "Price and returns", lambda p, m, v: F.ret(p, 20)),
    FeatureSpec("RET60", "60-day return", "percent", "pct_signed", "Price and returns", lambda p, m, v: F.ret(p, 60)),
    FeatureSpec("RET120", "120-day return", "percent", "pct_signed", "Price and returns", lambda p, m, v: F.ret(p, 120)),
    FeatureSpec("RET252", "1-year return", "percent", "pct_signed", "Price and returns", lambda p, m, v: F.ret(p, 252)),
    FeatureSpec("VOL20", "20-day volatility (annualised)", "percent", "pct", "Volatility and risk", lambda p, m, v: F.vol(p, 20)),
    FeatureSpec("VOL60", "60-day volatility (annualised)", "percent", "pct", "Volatility and risk", lambda p, m, v: F.vol(p, 60)),
    FeatureSpec("DVOL60", "60-day downside volatility (annualised)", "percent", "pct", "Volatility and risk", lambda p, m, v: F.downside_vol(p, 60)),
    FeatureSpec("DD60", "Drawdown from the 60-day high", "percent", "pct_signed", "Volatility and risk", lambda p, m, v: F.drawdown(p, 60)),
    FeatureSpec("MDD1Y", "1-year maximum drawdown", "percent", "pct_signed", "Volatility and risk", lambda p, m, v: F.max_drawdown(p, 252)),
    FeatureSpec("SHARPE", "60-day Sharpe ratio (no risk-free rate)", "ratio", "ratio", "Volatility and risk", lambda p, m, v: F.sharpe(p, 60)),
    FeatureSpec("BETA", "1-year beta to SPY", "ratio", "ratio", "Volatility and risk", _needs_spy(lambda p, m: F.beta(p, m, 252))),
    FeatureSpec("SMA20", "20-day simple moving average", "USD", "usd", "Trend and momentum", lambda p, m, v: F.sma(p, 20)),
    FeatureSpec("SMA50", "50-day simple moving average", "USD", "usd", "Trend and momentum", lambda p, m, v: F.sma(p, 50)),
    FeatureSpec("SMA200", "200-day simple moving average", "USD", "usd", "Trend and momentum", lambda p, m, v: F.sma(p, 200)),
    FeatureSpec("MOM200", "Price over its 200-day average", "ratio", "ratio", "Trend and momentum", lambda p, m, v: F.mom200(p)),
    FeatureSpec("MOM12_1", "12-month return excluding the last month", "percent", "pct_signed", "Trend and momentum", lambda p, m, v: F.mom12_1(p)),
    FeatureSpec("IDMOM", "60-day return beyond beta x SPY (idiosyncratic momentum)", "percent", "pct_signed", "Trend and momentum", _needs_spy(lambda p, m: F.idiosyncratic_momentum(p, m))),
    FeatureSpec("TREND", "Share of up days over 60 days", "share", "share", "Trend and momentum", lambda p, m, v: F.trend(p, 60)),
    FeatureSpec("RS60", "60-day return minus SPY's", "percentage points", "pp", "Trend and momentum", _needs_spy(lambda p, m: F.relative_strength(p, m, 60))),
    FeatureSpec("ADVOL", "20-day average dollar volume", "USD", "usd_big", "Liquidity", lambda p, m, v: F.avg_dollar_volume(p, v, 20)),
)
#: The field part of every price-derived evidence ID (``AAPL-RET60`` → ``RET60``).
PRICE_FEATURE_KEYS: frozenset[str] = frozenset(f.key for f in FEATURES)


_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"(\[])")


def split_sentences(text: str) -> list[str]:
    """One fact per sentence; deterministic and conservative."""
    text = " ".join(str(text).split())
    return [s.strip() for s in _SENTENCE.split(text) if s.strip()]


def _ticker_price_items(pack: Pack, ticker: str, idx: int) -> list[tuple[str, EvidenceItem]]:
    col = pack.tickers.index(ticker)
    p = pack.px_np[: idx + 1, col]
    v = pack.volume_np[: idx + 1, col]
    m = pack.px_np[: idx + 1, pack.tickers.index(BENCHMARK)] if pack.has_ticker(BENCHMARK) else None
    basis = pack.price_basis[ticker]
    as_of = str(pack.calendar.dates[idx].date())
    out = []
    for f in FEATURES:
        value = f.compute(p, m, v)
        note = None
        if value is None:
            if m is None and f.key in ("BETA", "IDMOM", "RS60"):
                note = f"n/a (no {BENCHMARK} prices in the pack)"
            elif f.key == "ADVOL" and np.isnan(v[-20:]).all():
                note = "n/a (no volume in the pack)"
            else:
                note = NA_HISTORY
        unit = f.unit + (" (split- and dividend-adjusted)" if f.unit == "USD" and basis == "adj_close" and f.key != "ADVOL" else "")
        out.append((f.section, EvidenceItem(id=f"{ticker}-{f.key}", label=f.label, value=value, unit=unit,
                                            as_of=as_of, source=f"prices:{basis}", note=note)))
    return out


# ---------------------------------------------------------------- when results became public
#
# Earnings calls and quarterly fundamentals describe a fiscal quarter, and become public with its
# results, weeks after the quarter ends. A call enters a memo only once its date is on or before
# the as-of date. The paper's ``earnings_calls`` table has no call date, so a call is dated by the
# issuer's results filing (SEC 8-K Item 2.02, the pack's optional ``earnings_dates`` table): the
# first one more than RESULTS_MIN_DAYS after the fiscal quarter ends and no later than
# RESULTS_MIN_DAYS after the next fiscal quarter ends (so a filing dates one quarter at most, and
# the window spans about 98 days). Calls are held the day of the release (a few the next
# morning); the filing date stands for both.
# Where no such filing is known, the results are assumed public RESULTS_LAG_DAYS after the quarter
# ends (RESULTS_LAG_DAYS_YEAR_END after a fiscal year ends), and the memo says so.

#: A results release comes more than a week after its quarter ends. Earlier Item 2.02 filings are
#: something else: TSLA's delivery reports (1-5 days after the quarter), ABBV's notices of
#: in-process R&D charges (3-6 days), AAPL's revenue warning of 2019-01-02. The earliest filings
#: matched in the market pack come 8-9 days after a quarter (banks report after 11-16 days).
RESULTS_MIN_DAYS = 7
#: Days after a fiscal quarter's end by which its results are assumed public when the pack has no
#: filing date for them. SEC deadlines: a 10-Q is due 40 days after the quarter (45 for smaller
#: filers) and a 10-K 60 days after the fiscal year (75 or 90 for smaller filers); the release and
#: call come on or before those filings. Across the market pack's 8-K dates (99 stocks, 2017-2025,
#: matched as above), releases came a median 25 days after fiscal Q1-Q3 ends (at most 60: UBER's
#: first report after its 2019 IPO) and 27 days after fiscal year ends (at most 58: BKNG), leaving
#: aside 14 matches 93-98 days out (ABBV's charge notices where its release is missing, one TMO).
#: Counted from the latest day a 52/53-week quarter can end.
RESULTS_LAG_DAYS = 60
RESULTS_LAG_DAYS_YEAR_END = 90


@dataclass(frozen=True)
class FiscalCalendar:
    """Where an issuer's fiscal quarters end.

    Evidence labelled by quarter uses the issuer's own fiscal year and quarter, as the paper's
    ``earnings_calls`` table does: AAPL "2021Q1" is "Q1 FY2021" (the quarter ended 2020-12-26,
    called 2021-01-27), MSFT "2021Q1" the quarter ended 2020-09-30, NVDA "2025Q3" the quarter
    ended 2024-10-27, HD "2021Q4" its fiscal 2021 ended 2022-01-30, PG "2023Q3" "the January to
    March quarter". ``ends`` holds the nominal (month, day) on which fiscal Q1..Q4 end (31: the
    month's last day); fiscal year Y ends in calendar year Y, or Y+1 when ``named_by_start``. On a
    52/53-week year a quarter ends up to ``slack`` days either side of its nominal date.
    """

    ends: tuple[tuple[int, int], ...]
    named_by_start: bool = False
    slack: int = 0

    def quarter_end(self, fq: Quarter) -> pd.Timestamp:
        """The nominal end of fiscal quarter ``fq``."""
        return _quarter_end(self, fq)

    def latest_ended(self, date: pd.Timestamp) -> Quarter:
        """The latest fiscal quarter that can have ended on or before ``date``."""
        candidates = [Quarter(y, q) for y in range(date.year - 1, date.year + 2) for q in (1, 2, 3, 4)]
        return max(fq for fq in candidates if self.quarter_end(fq) - pd.Timedelta(days=self.slack) <= date)


@functools.cache
def _quarter_end(fiscal: FiscalCalendar, fq: Quarter) -> pd.Timestamp:
    year_end_month = fiscal.ends[3][0]
    year_end = fq.year + (1 if fiscal.named_by_start else 0)
    month, day = fiscal.ends[fq.q - 1]
    year = year_end - 1 if month > year_end_month else year_end
    first = pd.Timestamp(year, month, 1)
    return min(first + pd.offsets.MonthEnd(0), first + pd.Timedelta(days=day - 1))


def _fiscal_year(end_month: int, slack: int = 0, named_by_start: bool = False) -> FiscalCalendar:
    """Quarters ending on the last day of every third month, the fourth in ``end_month``."""
    months = [(end_month - 10 + 3 * i) % 12 + 1 for i in range(4)]
    return FiscalCalendar(tuple((m, 31) for m in months), named_by_start, slack)


CALENDAR_YEAR = _fiscal_year(12)
#: Issuers of the market pack whose fiscal quarters are not calendar quarters; any other ticker
#: reports on calendar quarters. Checked against the 8-K dates: with these calendars every
#: matched release falls 8-46 days after its fiscal quarter's nominal end.
FISCAL_CALENDARS: dict[str, FiscalCalendar] = {
    "AAPL": _fiscal_year(9, slack=7),  # last Saturday of September
    "ACN": _fiscal_year(8),  # August 31
    "ADBE": _fiscal_year(11, slack=7),  # Friday nearest November 30
    "ADI": _fiscal_year(10, slack=7),  # Saturday nearest October 31
    "AMAT": _fiscal_year(10, slack=7),  # last Sunday of October
    "AVGO": _fiscal_year(10, slack=7),  # Sunday nearest October 31
    "COST": FiscalCalendar(((11, 23), (2, 15), (5, 10), (8, 31)), slack=7),  # Sunday nearest August 31; 12/12/12/16-week quarters
    "CRM": _fiscal_year(1),  # January 31; fiscal 2025 ended 2025-01-31
    "CSCO": _fiscal_year(7, slack=7),  # last Saturday of July
    "DE": _fiscal_year(10, slack=7),  # last Sunday of October
    "DIS": _fiscal_year(9, slack=7),  # Saturday nearest September 30
    "HD": _fiscal_year(1, slack=7, named_by_start=True),  # Sunday nearest January 31; fiscal 2021 ended 2022-01-30
    "INTU": _fiscal_year(7),  # July 31
    "KLAC": _fiscal_year(6),  # June 30
    "LOW": _fiscal_year(1, slack=7, named_by_start=True),  # Friday nearest January 31; fiscal 2024 ended 2025-01-31
    "LRCX": _fiscal_year(6, slack=7),  # last Sunday of June
    "MDT": _fiscal_year(4, slack=7),  # last Friday of April
    "MSFT": _fiscal_year(6),  # June 30
    "MU": _fiscal_year(8, slack=7),  # Thursday nearest August 31
    "NKE": _fiscal_year(5),  # May 31
    "NVDA": _fiscal_year(1, slack=7),  # last Sunday of January; fiscal 2025 ended 2025-01-26
    "ORCL": _fiscal_year(5),  # May 31
    "PANW": _fiscal_year(7),  # July 31
    "PEP": FiscalCalendar(((3, 22), (6, 14), (9, 6), (12, 31)), slack=7),  # last Saturday of December; 12/12/12/16-week quarters
    "PG": _fiscal_year(6),  # June 30
    "QCOM": _fiscal_year(9, slack=7),  # last Sunday of September
    "SBUX": _fiscal_year(9, slack=7),  # Sunday nearest September 30
    "TJX": _fiscal_year(1, slack=7),  # Saturday nearest January 31; fiscal 2025 ended 2025-02-01
    "V": _fiscal_year(9),  # September 30
    "WMT": _fiscal_year(1),  # January 31; fiscal 2025 ended 2025-01-31
}
#: Tickers whose results are filed under another ticker of the same issuer (the market pack files
#: Alphabet's under GOOGL).
RESULTS_DATES_ALIASES: dict[str, str] = {"GOOG": "GOOGL"}
#: Tickers whose Item 2.02 filings in the market pack are not their results releases.
RESULTS_DATES_UNUSABLE: dict[str, str] = {
    "TSLA": "TSLA's Item 2.02 filings in the pack are delivery reports",
}


@dataclass(frozen=True)
class Release:
    """When a fiscal quarter's results (release, call, quarterly figures) became public."""

    fiscal_quarter: Quarter
    quarter_end: pd.Timestamp  # nominal
    approximate: bool  # a 52/53-week quarter ends within a few days of ``quarter_end``
    date: pd.Timestamp
    filed: bool  # ``date`` is the 8-K results filing; otherwise the lag rule's assumption
    lag_days: int | None = None
    why_no_filing: str | None = None

    @property
    def ended(self) -> str:
        return ("about " if self.approximate else "") + str(self.quarter_end.date())

    @property
    def period(self) -> str:
        return f"fiscal {self.fiscal_quarter}"

    def dating(self, what: str, why: bool = True) -> str:
        """How ``what`` (the call, the results) is dated, in words; ``why`` adds why a lag was assumed."""
        if self.filed:
            return f"{what} dated {self.date.date()} by its 8-K results filing"
        reason = f" ({self.why_no_filing})" if why else ""
        return f"{what} date unknown{reason}, assumed {self.lag_days} days after the quarter ended: {self.date.date()}"


class ResultsCalendar:
    """Release dates of one issuer's fiscal quarters: its results filings, else the lag rule."""

    def __init__(self, pack: Pack, ticker: str):
        self.ticker = ticker
        self.fiscal = FISCAL_CALENDARS.get(ticker, CALENDAR_YEAR)
        self.dates = np.array([], dtype="datetime64[ns]")
        self.unknown: str | None = None
        if ticker in RESULTS_DATES_UNUSABLE:
            self.unknown = RESULTS_DATES_UNUSABLE[ticker]
        elif not pack.has_results_dates:
            self.unknown = "no earnings_dates table in the pack"
        else:
            self.dates = pack.results_dates(ticker)
            alias = RESULTS_DATES_ALIASES.get(ticker)
            if self.dates.size == 0 and alias is not None:
                self.dates = pack.results_dates(alias)
            if self.dates.size == 0:
                self.unknown = f"no results filings for {ticker} in the pack"

    def release(self, fq: Quarter) -> Release:
        end = self.fiscal.quarter_end(fq)
        approximate = self.fiscal.slack > 0
        lo = end + pd.Timedelta(days=RESULTS_MIN_DAYS)
        hi = self.fiscal.quarter_end(fq.next()) + pd.Timedelta(days=RESULTS_MIN_DAYS)
        i = int(np.searchsorted(self.dates, np.datetime64(lo, "ns"), side="right"))
        if i < self.dates.size and self.dates[i] <= np.datetime64(hi, "ns"):
            return Release(fq, end, approximate, pd.Timestamp(self.dates[i]), filed=True)
        lag = RESULTS_LAG_DAYS_YEAR_END if fq.q == 4 else RESULTS_LAG_DAYS
        why = self.unknown or f"no results filing between {lo.date()} and {hi.date()}"
        date = end + pd.Timedelta(days=self.fiscal.slack + lag)
        return Release(fq, end, approximate, date, filed=False, lag_days=lag, why_no_filing=why)

    def last_release_by(self, date: pd.Timestamp) -> Release | None:
        """The latest results known to be filed on or before ``date``; None when the latest results
        that could be out by then have no filing date (so which results they were is unknown)."""
        # the latest quarter whose matching window (see ``release``) has opened by ``date``
        fq = self.fiscal.latest_ended(date - pd.Timedelta(days=RESULTS_MIN_DAYS + self.fiscal.slack))
        for _ in range(8):
            r = self.release(fq)
            if not r.filed:
                return None
            if r.date <= date:
                return r
            fq = fq.previous()
        return None


def _dates(values: list[pd.Timestamp]) -> np.ndarray:
    return np.array([np.datetime64(v, "ns") for v in values], dtype="datetime64[ns]")


def _last(public: np.ndarray, as_of: pd.Timestamp, present: np.ndarray | None = None) -> int | None:
    """Position of the last row (rows are in order) public by ``as_of`` and, if given, ``present``.
    Rows tied on the order key resolve to the last in file order (the sort is stable); `madbench
    data check` reports such duplicates."""
    ok = public <= np.datetime64(as_of, "ns")
    if present is not None:
        ok &= present
    idx = np.flatnonzero(ok)
    return int(idx[-1]) if idx.size else None


@dataclass
class TickerEvidence:
    """One ticker's evidence rows, in order, with the dates they became public.

    None of this depends on the memo's as-of date, so it is computed once per pack and ticker.
    """

    results: ResultsCalendar
    calls: pd.DataFrame | None  # by fiscal quarter
    call_releases: list[Release]
    news: pd.DataFrame | None  # by calendar quarter
    news_public: np.ndarray  # the trading day after the window's last day (``news_available``)
    features: pd.DataFrame | None  # by snapshot quarter
    esurp_releases: list[Release | None]  # None: the release is not known
    esurp_public: np.ndarray
    fund_releases: list[Release]
    filings: pd.DataFrame | None  # by filing date

    @property
    def call_public(self) -> np.ndarray:
        return _dates([r.date for r in self.call_releases])

    @property
    def fund_public(self) -> np.ndarray:
        return _dates([r.date for r in self.fund_releases])


def ticker_evidence(pack: Pack, ticker: str) -> TickerEvidence:
    """The dated evidence of ``ticker`` (cached on the pack)."""
    return pack.derived(("memo.ticker_evidence", ticker), lambda: _date_evidence(pack, ticker))


def news_available(pack: Pack, window: Quarter) -> pd.Timestamp:
    """A news window's sentiment is available the trading day after the window's last day.

    The table aggregates a calendar quarter of articles with no article dates, so articles of the window's last day,
    published during or after that day's close, are in it. The memo's as-of date is the last trading day before the
    invest quarter, and the backtest buys at that day's close: a window ending on the as-of day (a quarter ending on
    a trading day) would let the memo see news the broker could not have traded on. So the window is dated the next
    trading day (``TradingCalendar.next_after``), and the memo takes it only when that is on or before its as-of
    date: the window of the quarter just ended is always left out, and the latest news a memo holds is the quarter
    before (or, without any, the latest call's sentiment). The alternative, ending the window the day before the
    as-of date, would need article dates the table does not have."""
    return pack.calendar.next_after(window.end)


def _date_evidence(pack: Pack, ticker: str) -> TickerEvidence:
    results = ResultsCalendar(pack, ticker)

    def in_order(table: str, key: str) -> pd.DataFrame | None:
        df = pack.evidence_for(table, ticker)
        return None if df is None else df.iloc[np.argsort(df[key].to_numpy(), kind="stable")]

    calls = in_order("earnings_calls", "_qord")
    call_releases = ([] if calls is None else
                     [results.release(Quarter.parse(q, where="earnings_calls.quarter")) for q in calls["quarter"].astype(str)])
    news = in_order("news_sentiment", "_qord")
    news_public = _dates([] if news is None else
                         [news_available(pack, Quarter.parse(q, where="news_sentiment.quarter")) for q in news["quarter"].astype(str)])
    features = in_order("asset_features", "_qord")
    snapshots = []
    if features is not None:
        has_date = "as_of" in features.columns
        for q, d in zip(features["quarter"].astype(str), features["as_of"] if has_date else [None] * len(features), strict=True):
            snapshots.append(pd.Timestamp(d).normalize() if d is not None and pd.notna(d) else Quarter.parse(q, where="asset_features.quarter").end)
    esurp_releases = [results.last_release_by(s) for s in snapshots]
    esurp_public = _dates([r.date if r is not None else s for r, s in zip(esurp_releases, snapshots, strict=True)])
    fund_releases = [results.release(results.fiscal.latest_ended(s)) for s in snapshots]
    return TickerEvidence(results, calls, call_releases, news, news_public, features, esurp_releases, esurp_public,
                          fund_releases, in_order("filings", "_date"))


FUNDAMENTALS = (
    ("GM", "gross_margin", "Gross margin", "percent", 100.0),
    ("ROE", "roe", "Return on equity", "percent", 100.0),
    ("DE", "debt_to_equity", "Debt to equity", "ratio", 1.0),
)


def _fundamentals(ev: TickerEvidence, ticker: str, as_of: pd.Timestamp) -> Section | None:
    """ESURP, GM, ROE and DE from ``asset_features``, each from the latest row public by ``as_of``.

    A row is a snapshot on its ``as_of`` date (its quarter's end when absent). Its earnings surprise
    is that of the latest results released by the snapshot (checked by hand on AAPL and DAL rows
    against reported EPS and consensus), so it is public from that release; when the release date
    is unknown, from the snapshot. Its gross margin, ROE and debt to equity are those of the latest
    fiscal quarter ended by the snapshot (AAPL's 2024-12-31 row holds the balance sheet of
    2024-12-28, published 2025-01-30), public only with that quarter's results.
    """
    af = ev.features
    if af is None:
        return None
    items = []
    if "earnings_surprise_pct" in af.columns:
        i = _last(ev.esurp_public, as_of, af["earnings_surprise_pct"].notna().to_numpy())
        if i is not None:
            row, r = af.iloc[i], ev.esurp_releases[i]
            public = pd.Timestamp(ev.esurp_public[i])
            note = (f"results of fiscal {r.fiscal_quarter} (quarter ended {r.ended}), released {r.date.date()}" if r is not None
                    else f"results released by {public.date()}, the table's date; release date not in the pack")
            items.append(EvidenceItem(id=f"{ticker}-ESURP", label="Latest earnings surprise", value=float(row["earnings_surprise_pct"]) * 100.0,
                                      unit="percent", as_of=str(public.date()), source=f"asset_features:{row['quarter']}", note=note,
                                      period=r.period if r is not None else None))
    fund_public = ev.fund_public
    for key, col, label, unit, scale in FUNDAMENTALS:
        if col not in af.columns:
            continue
        i = _last(fund_public, as_of, af[col].notna().to_numpy())
        if i is not None:
            row, r = af.iloc[i], ev.fund_releases[i]
            items.append(EvidenceItem(id=f"{ticker}-{key}", label=label, value=float(row[col]) * scale, unit=unit,
                                      as_of=str(r.date.date()), source=f"asset_features:{row['quarter']}",
                                      note=f"fiscal {r.fiscal_quarter}, quarter ended {r.ended}; " + r.dating("results"), period=r.period))
    return Section("Fundamentals", items, ticker) if items else None


def _evidence_sections(pack: Pack, ticker: str, as_of: pd.Timestamp) -> list[Section]:
    """Fundamentals, sentiment, filing and earnings-call evidence public by ``as_of``."""
    ev = ticker_evidence(pack, ticker)
    sections = []
    fundamentals = _fundamentals(ev, ticker, as_of)
    if fundamentals is not None:
        sections.append(fundamentals)
    latest_call: tuple[Any, Release] | None = None  # the row and its release
    if ev.calls is not None:
        i = _last(ev.call_public, as_of)
        if i is not None:
            latest_call = ev.calls.iloc[i], ev.call_releases[i]
    # Without news, the latest call's sentiment stands in.
    sentiment = None
    i = _last(ev.news_public, as_of) if ev.news is not None else None
    if ev.news is not None and i is not None:
        row, window = ev.news.iloc[i], Quarter.parse(ev.news["quarter"].iloc[i])
        sentiment = dict(mean=float(row["mean_sentiment"]), svol=float(row["volatility"]), what=f"news articles ({int(row['article_count'])})",
                         source=f"news_sentiment:{window}", public=pd.Timestamp(ev.news_public[i]), period=str(window),
                         note=f"news through {window.end.date()}, dated the next trading day (no article dates)",
                         header=f"news of {window}, through {window.end.date()}")
    elif latest_call is not None and pd.notna(latest_call[0].get("sentiment")):
        call, call_release = latest_call
        svol = call.get("sentiment_volatility")
        sentiment = dict(mean=float(call["sentiment"]), svol=float(svol) if pd.notna(svol) else None, what="earnings call",
                         source=f"earnings_calls:{call['quarter']}", public=call_release.date, period=call_release.period,
                         note=call_release.dating("call", why=False), header=f"{call_release.period} earnings call")
    if sentiment is not None:
        common = dict(as_of=str(sentiment["public"].date()), source=sentiment["source"], note=sentiment["note"], period=sentiment["period"])
        items = [EvidenceItem(id=f"{ticker}-SENT", label=f"Mean sentiment of {sentiment['what']}", value=sentiment["mean"],
                              unit="score in [-1, 1]", **common)]
        if sentiment["svol"] is not None:
            items.append(EvidenceItem(id=f"{ticker}-SVOL", label="Sentiment volatility", value=sentiment["svol"], unit="score", **common))
        sections.append(Section("Sentiment", items, ticker, header=sentiment["header"]))
    fl = ev.filings
    i = _last(fl["_date"].to_numpy(dtype="datetime64[ns]"), as_of) if fl is not None else None
    if fl is not None and i is not None:
        row = fl.iloc[i]
        facts = [s for col in FILING_SECTIONS if col in row.index and pd.notna(row[col]) for s in split_sentences(row[col])]
        form = row.get("form", "filing")
        filed = str(row["_date"].date())
        fiscal_period = str(row["fiscal_period"]) if pd.notna(row.get("fiscal_period")) else None
        items = [EvidenceItem(id=f"{ticker}-F{i}", label=f"Filing fact {i}", value=fact, unit="text",
                              as_of=filed, source=f"filings:{form} {row['filing_date']}", period=fiscal_period)
                 for i, fact in enumerate(facts, 1)]
        period = f", fiscal period {fiscal_period}" if fiscal_period else ""
        if items:
            sections.append(Section("Filing", items, ticker, header=f"{form} filed {filed}{period}"))
    if latest_call is not None:
        call, r = latest_call
        facts = [s for col in CALL_SECTIONS if col in call.index and pd.notna(call[col])
                 for s in split_sentences(call[col])]
        note = r.dating("call")
        items = [EvidenceItem(id=f"{ticker}-EC{i}", label=f"Earnings-call fact {i}", value=fact, unit="text",
                              as_of=str(r.date.date()), source=f"earnings_calls:{call['quarter']}", note=note, period=r.period)
                 for i, fact in enumerate(facts, 1)]
        if items:
            sections.append(Section("Earnings call", items, ticker, header=f"{r.period}, quarter ended {r.ended}; {note}"))
    return sections


# ---------------------------------------------------------------- assembly

def build_memo(scenario: Scenario, pack: Pack, where: str = "scenario") -> Memo:
    check_against_pack(scenario, pack, where)
    q = scenario.quarter
    as_of = pack.calendar.as_of(q, where=f"{where}.invest_quarter")
    idx = pack.calendar.index_of(as_of)
    sections = [macro_section(pack, q, where)]
    for t in scenario.tickers:
        grouped: dict[str, list[EvidenceItem]] = {}
        for sec, item in _ticker_price_items(pack, t, idx):
            grouped.setdefault(sec, []).append(item)
        sections += [Section(title, items, t) for title, items in grouped.items()]
        sections += _evidence_sections(pack, t, as_of)
    memo = Memo(scenario.id, str(q), as_of, list(scenario.tickers), sections)
    ids = [it.id for it in memo.items]
    if len(ids) != len(set(ids)):
        dup = sorted({i for i in ids if ids.count(i) > 1})
        raise AssertionError(f"memo evidence IDs are not unique: {dup}")
    return memo


def render_text(memo: Memo) -> str:
    rule = "=" * 70
    lines = [
        f"POINT-IN-TIME MEMO: scenario {memo.scenario_id}, invest quarter {memo.invest_quarter}",
        f"As-of date: {memo.as_of.date()} (last trading day before the quarter; nothing later is used)",
    ] if not memo.blind else [
        "POINT-IN-TIME MEMO (blind): invest quarter Q0",
        "As-of date: t (last trading day before the quarter; nothing later is used)",
        *memo.notes,
    ]
    lines += [
        f"Universe: {', '.join(memo.tickers)}",
        "Cite evidence by its bracketed ID, e.g. [L1-10Y] or [" + memo.tickers[0] + "-RET60]. Only the IDs below exist.",
        "Prices are split- and dividend-adjusted closes where the pack has them; macro values are those published by the as-of date.",
        "Earnings calls and quarterly fundamentals count from their results filing; where its date is unknown, from an assumed "
        f"reporting delay ({RESULTS_LAG_DAYS} days after a fiscal quarter, {RESULTS_LAG_DAYS_YEAR_END} after a fiscal year), as noted.",
    ]
    current = object()
    for sec in memo.sections:
        if sec.ticker != current:
            current = sec.ticker
            sector = f" (sector: {memo.sectors[sec.ticker]})" if sec.ticker in memo.sectors else ""
            lines += ["", rule, "MACRO REGIME" if sec.ticker is None else f"TICKER {sec.ticker}{sector}", rule]
        if sec.ticker is not None:
            lines.append(f"{sec.title}" + (f" ({sec.header})" if sec.header else "") + ":")
        lines += [_item_line(sec, it) for it in sec.items]
    return "\n".join(lines) + "\n"


@functools.cache
def _formats() -> dict[str, str]:
    fmt_of = {f"L1-{s.id[3:]}": s.fmt for s in MACRO}
    fmt_of.update({f.key: f.fmt for f in FEATURES})
    fmt_of.update(ESURP="pct_signed", GM="pct", ROE="pct", DE="ratio", SENT="ratio4", SVOL="ratio4")
    return fmt_of


def _item_line(sec: Section, it: EvidenceItem) -> str:
    key = it.id if sec.ticker is None else it.id[len(sec.ticker) + 1:]
    if it.value is None:
        body = it.note or NA_HISTORY
    elif isinstance(it.value, str):
        body = it.value
    else:
        kind = _formats().get(key, _unit_fmt(it.unit))
        if kind.startswith("usd") and not it.unit.startswith("USD"):  # a blind memo's rebased price or volume share
            kind = _unit_fmt(it.unit)
        body = _fmt(it.value, kind)
        published = f"value for {it.period}, published {it.as_of}" if sec.ticker is None else None
        extra = [x for x in (it.note, published) if x]
        if extra:
            body += " (" + "; ".join(extra) + ")"
    # A text (a filing or call fact) is its own line; a macro band (a blind memo's) needs its series' label
    labelled = not isinstance(it.value, str) or sec.ticker is None
    return f"[{it.id}] {it.label}: {body}" if labelled else f"[{it.id}] {body}"


def macro_block(memo: Memo) -> str:
    """The memo's macro section as its text shows it, line by line (what dates a blind memo's quarter, if anything)."""
    return "\n".join(_item_line(sec, it) for sec in memo.sections if sec.ticker is None for it in sec.items)


def _unit_fmt(unit: str) -> str:
    return {"percent": "pct", "ratio": "ratio", "score": "ratio4", "score in [-1, 1]": "ratio4"}.get(unit, "ratio")
