"""Blind memos: the same evidence without the names, tickers and calendar that let a model recall what came next.

A model trained on 2021-2025 news may remember how NVDA did in 2023Q2; a blind memo asks the same question about
ASSET_C in the quarter after ``t``. The transformation is pure and deterministic (the same memo, universe and
options give the same blind memo):

- tickers become pseudonyms (``ASSET_A``, ``ASSET_B``, …) assigned by a shuffle seeded with the sorted universe, so
  the letters do not follow the alphabetical order of the tickers and one universe always gets the same ones (a
  protocol's decision log can then follow it from quarter to quarter); evidence IDs follow (``[AAPL-RET60]`` →
  ``[ASSET_A-RET60]``) and ticker sections are listed in pseudonym order;
- in every text (filing and earnings-call facts, labels, notes, headers) a universe company's names, aliases and
  ticker become its pseudonym; another stock of the pack (by its names and aliases) and a well-known company outside
  the pack (``OTHER_COMPANIES``) become "another company". Names match in any case ("Nvidia" is NVIDIA) as whole
  words; tickers and forms of three characters or fewer (FB, GE, Lam) only as written;
- calendar dates become relative to the as-of date ``t`` (``t−20d``, calendar days), months to its month
  (``M−1``), years to its year (``Y−1``, fiscal years ``FY−1``, by the calendar year they end in), calendar quarters
  to the invest quarter (``Q0``; ``Q−1`` ends at ``t``), and so do fiscal quarters, each by the calendar quarter it
  ends in on its issuer's calendar (``calendar_positions``: MSFT's "Q2 FY2022", ended December 2021, is ``Q−2``
  from 2022Q2; a fiscal number would say where the issuer's year ends);
- price levels (the close and its moving averages) are rebased so that the close at ``t`` is 100, and dollar
  volume becomes a share of the universe's (its absolute size names the company as surely as a ticker);
- every other name in the evidence's own words (products, segments, people, places, deals, events) is masked by a
  general rule (``madbench.data.neuter``: every capitalised, camel-cased or all-caps token outside a shipped generic
  vocabulary), as ``[PRODUCT_1]``, ``[PERSON_2]``, ...; so is every lower-case word of the texts outside that
  vocabulary's generic words (``[TERM_3]``: "metaverse", "tariffs", a word never seen), month names, month-day dates
  and the years of index bases and real-dollar units ("(2017=100)" -> "(base=100)");
- absolute amounts in every text become their order of magnitude ("$394.3 billion" -> "$[100–1000 billion]", "41.9
  million shares" -> "[10–100 million] shares": ``madbench.data.amounts``), in the memo and in every prompt of a
  blind run;
- percentages, percentage points and basis points in the evidence's texts become their bin in the 1–2.5–5 series
  ("71.5%" -> "[50–100%]", "-12%" -> "−[10–25%]": ``madbench.data.percents``), in the memo; the rest of a blind
  run's prompts keep theirs (they are madbench's own thresholds and features, "holdings above 10%", and the models'
  allocations), and every evidence figure they quote comes from the blind memo, binned;
- a number right after a company's name, which its pseudonym would keep ("Microsoft 365" -> "ASSET_A 365"), is
  masked as a product (``ASSET_A [PRODUCT_4]``: ``unfuse``);
- options: sector labels shown or dropped; macro as three regime bands with every other series withheld (the
  default, ``MACRO_REGIME``: each quarter's block is shared by at least four quarters of 2018-2025), rounded to a
  coarse grid with quarterly changes as directions (``macro: bucket``, which still dates almost every quarter) or
  exact as published (``macro: exact``, only when asked: an exact Fed funds rate dates the quarter); company texts
  redacted or dropped.

Not masked: ratios and multiples inside the texts ("2.5x", "1.70 to 1.76"), the relative position of a fiscal year
(``FY+1`` results in the past tense hint at a year that does not end in December), bare quarter numbers without a
year ("guidance for Q3"), and the days between a quarter's end and ``t`` ("quarter ended t−61d"). ``madbench leakage
audit`` counts what is left in each blind memo (fiscal quarter labels, exact percentages and numbers fused to a
pseudonym among it) and asks a model to name its companies and quarter.
"""

from __future__ import annotations

import functools
import hashlib
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal, overload

import pandas as pd
from pydantic import BaseModel, ConfigDict

from madbench.data.amounts import bucket_amounts
from madbench.data.market.calendar import Quarter
from madbench.data.memo import CALENDAR_YEAR, FISCAL_CALENDARS, EvidenceItem, FiscalCalendar, Memo, Section
from madbench.data.neuter import MaskedTerm, Masker, yearless_units
from madbench.data.percents import bucket_percents
from madbench.data.scenario import Scenario

MINUS = "\u2212"
PSEUDONYM_PREFIX = "ASSET_"
#: What a stock of the pack outside the scenario's universe is called in a blind text.
OTHER_COMPANY = "another company"
#: Price-level features (the close and its averages): rebased to 100 at the as-of close.
PRICE_LEVELS = ("PX", "SMA20", "SMA50", "SMA200")
REBASED_UNIT = "index (close at t = 100)"
#: Macro grid of ``macro: bucket``: each value rounded to the nearest step (units of the series). It dates the quarter:
#: on the market pack's 2018Q1-2025Q4 every quarter's bucketed block but one is unique (``madbench.data.macro_anonymity``).
MACRO_STEPS = {"FF": 1.0, "2Y": 1.0, "10Y": 1.0, "30Y": 1.0, "CURVE": 0.5, "REAL": 1.0, "CPI": 1.0, "CORE": 1.0,
               "INDPRO": 5.0, "UNEMP": 1.0, "HY": 1.0, "DXY": 10.0, "WTI": 20.0, "VIX": 5.0}


@dataclass(frozen=True)
class MacroBand:
    """A series of ``macro: regime`` shown as the side of ``cut`` its value is on."""

    cut: float
    below: str
    at_or_above: str

    def of(self, value: float) -> str:
        return self.below if value < self.cut else self.at_or_above


#: ``macro: regime`` (the default): three bands, each a regime a desk reads (policy restrictive or not, the curve
#: inverted or not, inflation high or not) at a conventional cut (a neutral policy rate near 2.5%; the rule-based
#: macro analyst's own inversion and 4% CPI), and every other series withheld. Chosen by measurement: each of the
#: market pack's 32 quarters 2018Q1-2025Q4 shares its block with at least 3 others (k-anonymity >= 4,
#: ``madbench.data.macro_anonymity``); no set of candidate bands with k >= 4 told more blocks apart, and a fourth
#: band (stress: VIX >= 25 or high-yield spread >= 5) left 2022Q3 and 2022Q4 alone. The quarters that share a block
#: are consecutive: the block still dates the quarter to within about a year, not to a quarter.
MACRO_REGIME: dict[str, MacroBand] = {
    "FF": MacroBand(2.5, "below 2.5 percent", "2.5 percent or more"),
    "CURVE": MacroBand(0.0, "inverted (the 10-year yield below the 2-year)", "not inverted"),
    "CPI": MacroBand(4.0, "below 4 percent", "4 percent or more"),
}
MACRO_WITHHELD = "withheld in a blind memo (with the bands above it would date the quarter)"

#: Short and former names the market pack's companies go by in filings and calls, beyond the pack's own ``name``
#: (made by hand from the evidence texts). They are redacted for every stock of the pack, in or out of the universe,
#: but for ``UNIVERSE_ONLY_ALIASES``.
ALIASES: dict[str, tuple[str, ...]] = {
    "NVDA": ("Nvidia",), "CSCO": ("Cisco",), "LRCX": ("Lam",), "MU": ("Micron",), "ANET": ("Arista",),
    "GOOGL": ("Google",), "GOOG": ("Google",), "META": ("Meta", "Facebook"), "DIS": ("Disney",),
    "BKNG": ("Booking.com", "Priceline"), "PG": ("P&G",), "PM": ("Philip Morris",), "LLY": ("Lilly",),
    "UNH": ("UnitedHealth Group", "UnitedHealthcare"), "JNJ": ("J&J",), "MRK": ("Merck",), "TMO": ("Thermo Fisher",),
    "ABT": ("Abbott",), "BMY": ("Bristol Myers Squibb", "Bristol-Myers"), "GILD": ("Gilead",), "VRTX": ("Vertex",),
    "CI": ("Cigna",), "ELV": ("Elevance", "Anthem"), "BRK-B": ("Berkshire",), "JPM": ("JPMorgan", "J.P. Morgan", "Chase"),
    "GS": ("Goldman",), "AXP": ("Amex",), "SCHW": ("Schwab",), "C": ("Citi",),
    "XOM": ("ExxonMobil", "Exxon"), "RTX": ("Raytheon",), "DE": ("Deere", "John Deere"), "LMT": ("Lockheed",),
    "UBER": ("Uber",), "NEE": ("NextEra",), "DAL": ("Delta",), "OXY": ("Occidental", "Oxy", "OxyChem"),
    "WMT": ("Wal-Mart",), "MCD": ("McDonald",),
}
#: Aliases that also name something else in the texts, redacted only where their company is in the universe (there
#: the cost of a redacted ordinary word is small beside a leak): "Delta" is the COVID-19 variant in the 2021 texts of
#: Apple, J&J, Goldman Sachs and Disney, "Vertex" Google's Vertex AI.
UNIVERSE_ONLY_ALIASES = frozenset({"Delta", "Vertex"})
#: Well-known companies outside the pack that its evidence texts name as competitors, suppliers, customers or peers
#: (found by a search of the paper's filings and calls: "competition from Intel's discrete GPU expansion" in AMD's
#: names a rival, and with it the industry). Each becomes "another company", like a pack stock outside the universe;
#: a longer form first, so that "First Republic Bank" leaves no "Bank" behind. No name that is also an ordinary
#: word in any case: "Ford" is Eagle Ford shale in Chevron's texts and "paramount" an adjective, so "Ford Motor" only
#: and no Paramount. Not exhaustive: a name missing here survives; product, segment and deal names are not companies.
OTHER_COMPANIES: tuple[str, ...] = (
    "Intel", "Samsung", "TSMC", "Taiwan Semiconductor", "SK Hynix", "Huawei", "Dell", "Hewlett Packard", "Marvell",
    "Marvell Technology", "ASML", "Sony", "Alibaba", "Tencent", "OpenAI", "Anthropic", "TikTok", "ByteDance",
    "T-Mobile", "Warner Bros", "Rivian", "Rivian Automotive", "Ford Motor", "General Motors", "Toyota", "Airbus",
    "GSK", "Novartis", "Novo Nordisk", "AstraZeneca", "Moderna", "CVS", "CVS Health", "CVS Caremark", "Humana",
    "Walgreens", "Kroger", "HSBC", "First Republic", "First Republic Bank", "Silicon Valley Bank", "Signature Bank",
)


class BlindOptions(BaseModel):
    """``blind:`` of a debate config (``blind: true`` is ``{enabled: true}``)."""

    model_config = ConfigDict(extra="forbid")
    enabled: bool = True
    #: Sector labels beside each pseudonym (the real ticker implies its sector; ``drop`` hides that too).
    sectors: Literal["keep", "drop"] = "keep"
    #: Macro as ``MACRO_REGIME``'s three bands, every other series withheld (the default: the least that dates the
    #: quarter, see ``madbench.data.macro_anonymity``); values rounded to ``MACRO_STEPS`` with their changes as
    #: directions (``bucket``: the block still dates almost every quarter); or exact as published, only when asked
    #: (the run's ``blind_map`` records it: an exact Fed funds rate or VIX dates the quarter on its own).
    macro: Literal["regime", "bucket", "exact"] = "regime"
    #: Filing and earnings-call facts with names and dates redacted, or left out.
    text: Literal["redact", "drop"] = "redact"


def pseudonym(i: int) -> str:
    """ASSET_A … ASSET_Z, then ASSET_AA, ASSET_AB, … (bijective base 26)."""
    letters = ""
    i += 1
    while i:
        i, r = divmod(i - 1, 26)
        letters = chr(ord("A") + r) + letters
    return PSEUDONYM_PREFIX + letters


def pseudonyms(tickers: list[str]) -> dict[str, str]:
    """Real ticker → pseudonym, by a shuffle seeded with the sorted universe (stable for a universe)."""
    universe = sorted(tickers)
    seed = int(hashlib.sha256(",".join(universe).encode()).hexdigest()[:16], 16)
    order = list(universe)
    random.Random(seed).shuffle(order)
    return {t: pseudonym(i) for i, t in enumerate(order)}


# ---------------------------------------------------------------- relative dates

def _signed(n: int) -> str:
    return "" if n == 0 else (f"+{n}" if n > 0 else f"{MINUS}{-n}")


@dataclass(frozen=True)
class Anchor:
    """What relative dates count from: the as-of date ``t`` and the invest quarter ``Q0``."""

    as_of: pd.Timestamp
    invest: Quarter

    def day(self, date: pd.Timestamp) -> str:
        days = (date.normalize() - self.as_of.normalize()).days
        return f"t{_signed(days)}d" if days else "t"

    def month(self, year: int, month: int) -> str:
        return "M" + (_signed((year - self.as_of.year) * 12 + month - self.as_of.month) or "0")

    def quarter(self, q: Quarter) -> str:
        return "Q" + (_signed((q.year - self.invest.year) * 4 + q.q - self.invest.q) or "0")

    def year(self, year: int) -> str:
        return "Y" + (_signed(year - self.as_of.year) or "0")

    def fiscal_year(self, year: int) -> str:
        return "FY" + (_signed(year - self.as_of.year) or "0")


_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october", "november",
           "december")
_MONTH = r"(?P<mon>(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)[a-z]*\.?)"
_Y4 = r"(?P<y>(?:19|20)\d\d)"
_YY = r"(?P<y>(?:19|20)\d\d|'?\d\d)"  # a two-digit year only where FY or an apostrophe says it is one


def _month_no(text: str) -> int | None:
    key = text.lower().rstrip(".")
    return next((i + 1 for i, m in enumerate(_MONTHS) if m.startswith(key) and len(key) >= 3), None)


def _year(text: str) -> int:
    digits = text.lstrip("'")
    return int(digits) if len(digits) == 4 else 2000 + int(digits)


def _day(a: Anchor, y: str, m: int | None, d: str) -> str | None:
    try:
        return a.day(pd.Timestamp(int(y), m, int(d))) if m else None
    except ValueError:  # not a calendar date (31 February): left as it is
        return None


def _date_rules(a: Anchor) -> list[tuple[re.Pattern[str], Callable[[re.Match[str]], str]]]:
    """(pattern, replacement) in the order they apply: the longest forms first. A form that names no real date
    (``fn`` gives None) is left as it is."""
    def rule(pattern: str, fn: Callable[[re.Match[str]], str | None]) -> tuple[re.Pattern[str], Callable[[re.Match[str]], str]]:
        return re.compile(pattern), lambda m: fn(m) or m.group(0)
    return [
        rule(rf"(?<!\d){_Y4}-(?P<m>\d\d)-(?P<d>\d\d)(?!\d)", lambda m: _day(a, m["y"], int(m["m"]), m["d"])),
        rule(rf"\b{_MONTH} (?P<d>\d{{1,2}}),? {_Y4}\b", lambda m: _day(a, m["y"], _month_no(m["mon"]), m["d"])),
        rule(rf"\b(?P<d>\d{{1,2}}) {_MONTH} {_Y4}\b", lambda m: _day(a, m["y"], _month_no(m["mon"]), m["d"])),
        rule(rf"(?<![\d/])(?P<m>\d{{1,2}})/(?P<d>\d{{1,2}})/{_Y4}(?!\d)", lambda m: _day(a, m["y"], int(m["m"]), m["d"])),
        # fiscal quarters as the issuer numbers them (``calendar_positions`` then places them with its calendar)
        # the filings table's "fiscal period 2022-Q2" is the calendar quarter the filed period ended in (AAPL's 10-Q
        # of the quarter ended 2022-06-25, NVDA's of 2022-07-31 is "2022-Q3"), unlike the calls' "fiscal 2022Q3"
        rule(rf"\bfiscal period {_Y4}-Q(?P<q>[1-4])\b", lambda m: "period " + a.quarter(Quarter(int(m["y"]), int(m["q"])))),
        rule(rf"\b(?P<pre>fiscal (?:period )?){_Y4}-?Q(?P<q>[1-4])\b", lambda m: f"{m['pre']}Q{m['q']} {a.fiscal_year(int(m['y']))}"),
        rule(rf"\b(?P<pre>fiscal )Q(?P<q>[1-4]),? {_Y4}\b", lambda m: f"{m['pre']}Q{m['q']} {a.fiscal_year(int(m['y']))}"),
        rule(rf"\bQ(?P<q>[1-4])[ -]?(?P<of>(?:of )?(?:FY|fiscal(?: year)?) ?){_YY}\b",
             lambda m: f"Q{m['q']} {a.fiscal_year(_year(m['y']))}"),
        rule(rf"\bFY ?{_YY}\b", lambda m: a.fiscal_year(_year(m["y"]))),
        rule(rf"\bfiscal (?:year )?{_Y4}\b", lambda m: a.fiscal_year(int(m["y"]))),
        # calendar quarters, months and years
        # "2021-Q3" alone is a calendar quarter: the filings table's period, the quarter the filed period ended in
        rule(rf"(?<![\d-]){_Y4}(?: ?|-)Q(?P<q>[1-4])\b", lambda m: a.quarter(Quarter(int(m["y"]), int(m["q"])))),
        rule(rf"\bQ(?P<q>[1-4]),? {_Y4}\b", lambda m: a.quarter(Quarter(int(m["y"]), int(m["q"])))),
        rule(r"\bQ(?P<q>[1-4]) ?'(?P<y>\d\d)\b", lambda m: a.quarter(Quarter(2000 + int(m["y"]), int(m["q"])))),
        rule(rf"\b{_MONTH},? {_Y4}\b", lambda m: a.month(int(m["y"]), n) if (n := _month_no(m["mon"])) else None),
        rule(rf"(?<![\d-]){_Y4}-(?P<m>0[1-9]|1[0-2])(?![\d-])", lambda m: a.month(int(m["y"]), int(m["m"]))),
        rule(rf"(?<![\d.,$]){_Y4}(?!\d|[.,]\d)", lambda m: a.year(int(m["y"]))),
    ]


# ---------------------------------------------------------------- names

def name_forms(name: str) -> list[str]:
    """The forms of a pack ``name`` a text may use: the name before any parenthesis, the other names inside it
    ("GE Aerospace (General Electric)", "Meta Platforms (FB before 2022-06)"), "&" spelt "and", and a hyphen as a
    space; a one-word name also in capitals (NIKE)."""
    base, *inside = re.split(r"\s*\(", name.strip())
    forms = [base]
    for part in inside:
        part = re.sub(r"\).*", "", part)
        part = re.sub(r"\s*\b(?:before|after|since)\b.*|\bIPO\b.*|\bClass [A-Z]\b|\bprice\b.*", "", part).strip(" ,;")
        if len(part) >= 2:
            forms.append(part)
    out = []
    for f in forms:
        out += [f, f.replace(" & ", " and "), f.replace("-", " ")]
        if " " not in f and len(f) >= 4:
            out.append(f.upper())
    return sorted({f for f in out if len(f) >= 2}, key=lambda f: (-len(f), f))


@dataclass(frozen=True)
class Company:
    ticker: str
    name: str
    sector: str | None = None


def pack_companies(universe: pd.DataFrame) -> list[Company]:
    """Every stock of a pack's ``universe`` table (indexed by ticker; ``name``, ``sector``, ``asset_class``)."""
    stocks = universe[universe["asset_class"].astype(str) == "stock"] if "asset_class" in universe.columns else universe
    return [Company(str(t), str(r["name"]), str(r["sector"]) if pd.notna(r.get("sector")) else None)
            for t, r in stocks.iterrows()]


def _as_written(form: str) -> bool:
    """Whether a name form matches only as written: a ticker or a form of three characters or fewer (FB, GE, P&G,
    Lam, Oxy), which in another case is an ordinary word or a piece of a hash; a longer name matches in any case."""
    return len(form) <= 3


def _word(text: str, any_case: bool = False) -> str:
    """A regex for ``text`` as a whole word (a possessive 's still matches); a name also at the head of a compound
    such as AppleCare or VisaNet, a ticker or other capitals only alone (T, not the T of TV or ME&T). ``any_case``
    applies to the word alone: the boundaries stay case-sensitive, so AppleCare's C still marks a compound."""
    tail = r"(?![A-Za-z0-9_]|&[A-Za-z])" if text.isupper() else r"(?![a-z0-9_]|&[A-Za-z])"
    word = f"(?i:{re.escape(text)})" if any_case else re.escape(text)
    return r"(?<![A-Za-z0-9_&])" + word + tail


class Redactor:
    """Replaces names, tickers and calendar dates in a text; idempotent on its own output.

    ``companies``: the stocks of the pack (the universe's become their pseudonyms, the others "another company");
    ``others``: names of companies outside the pack, which become "another company" too."""

    def __init__(self, mapping: dict[str, str], companies: list[Company], anchor: Anchor, others: tuple[str, ...] = ()):
        by_ticker = {c.ticker: c for c in companies}
        self.exact: dict[str, str] = {}  # tickers and short forms, as written
        self.folded: dict[str, str] = {}  # longer names by their lower case: NVIDIA is also Nvidia in a text
        forms: set[str] = set()

        def put(found: list[str], to: str) -> None:
            for f in found:
                forms.add(f)
                if _as_written(f):
                    self.exact[f] = to
                else:
                    self.folded[f.casefold()] = to

        put([f for name in others for f in name_forms(name)], OTHER_COMPANY)
        for c in companies:  # other stocks: names, aliases, and tickers long enough not to be words
            if c.ticker not in mapping:
                aliases = [a for a in ALIASES.get(c.ticker, ()) if a not in UNIVERSE_ONLY_ALIASES]
                put([f for n in (c.name, *aliases) for f in name_forms(n)], OTHER_COMPANY)
                if len(c.ticker) >= 3:
                    self.exact[c.ticker] = OTHER_COMPANY
        for t in sorted(mapping, reverse=True):  # the universe's names win over another company's same name
            known = by_ticker.get(t)
            put([f for n in ((known.name,) if known else ()) + ALIASES.get(t, ()) for f in name_forms(n)], mapping[t])
            self.exact[t] = mapping[t]
        keys = sorted(forms | set(self.exact), key=lambda k: (-len(k), k))
        # the lookahead skips a position no name or ticker starts at without trying each of them (10x faster)
        heads = "".join(sorted({re.escape(h) for k in keys for h in {k[0], k[0].lower(), k[0].upper()}}))
        words = (_word(k, any_case=not (_as_written(k) or k in self.exact)) for k in keys)
        self.names = re.compile(f"(?=[{heads}])(?:" + "|".join(words) + ")") if keys else None
        self.dates = _date_rules(anchor)
        self.done: dict[str, str] = {}  # labels, units and notes repeat across tickers

    def _replace(self, m: re.Match[str]) -> str:
        found = m.group(0)
        return self.exact[found] if found in self.exact else self.folded[found.casefold()]

    @overload
    def __call__(self, text: str) -> str: ...
    @overload
    def __call__(self, text: None) -> None: ...
    def __call__(self, text: str | None) -> str | None:
        if text is None:
            return None
        if text not in self.done:
            out = bucket_amounts(yearless_units(text))  # an exact amount names a company (madbench.data.amounts)
            if self.names is not None:
                out = self.names.sub(self._replace, out)
            for pattern, fn in self.dates:
                out = pattern.sub(fn, out)
            self.done[text] = out
        return self.done[text]


# ---------------------------------------------------------------- fiscal periods and fused names

_FY = r"FY(?P<fy>0|[+\u2212]\d+)"
_ORDINALS = {"first": 1, "second": 2, "third": 3, "fourth": 4}
#: The fiscal labels the date rules leave ("Q4 FY0", "fiscal period Q1 FY+1", "the fourth quarter of FY0", "H1 FY+1"),
#: then the bare fiscal years ("FY+1").
_FISCAL_QUARTER = re.compile(rf"\b(?:fiscal (?:period )?)?Q(?P<q>[1-4]) (?:of )?{_FY}\b")
_FISCAL_ORDINAL = re.compile(rf"\b(?:the )?(?:fiscal )?(?P<ord>first|second|third|fourth)[ -](?:fiscal )?quarter,? "
                             rf"(?:of )?(?:the )?{_FY}\b")
_FISCAL_HALF = re.compile(rf"\b(?:fiscal )?H(?P<h>[12]) (?:of )?{_FY}\b")
_FISCAL_YEAR = re.compile(rf"\b{_FY}\b")


def _fy(text: str) -> int:
    return int(text.replace(MINUS, "-"))


def calendar_positions(text: str, fiscal: FiscalCalendar, anchor: Anchor) -> str:
    """``text`` (redacted already) with each fiscal quarter of an issuer on ``fiscal`` relabelled by the calendar
    quarter it ends in, relative to the invest quarter as calendar quarters are ("Q2 FY+1" of a June year ending
    -> "Q−1"): a fiscal number beside the calendar says where the issuer's year ends, and so, with the sector, which
    issuer it is. A fiscal half is its two quarters ("H1 FY+1" -> "Q−1–Q0"); a fiscal year is counted from the
    calendar year it ends in (a year named by its start, as HD's, moves up one)."""
    def position(fy: int, q: int) -> str:
        end = fiscal.quarter_end(Quarter(anchor.as_of.year + fy, q))
        return anchor.quarter(Quarter(end.year, (end.month - 1) // 3 + 1))

    text = _FISCAL_QUARTER.sub(lambda m: position(_fy(m["fy"]), int(m["q"])), text)
    text = _FISCAL_ORDINAL.sub(lambda m: position(_fy(m["fy"]), _ORDINALS[m["ord"]]), text)
    text = _FISCAL_HALF.sub(lambda m: f"{position(_fy(m['fy']), 2 * int(m['h']) - 1)}\u2013"
                                      f"{position(_fy(m['fy']), 2 * int(m['h']))}", text)
    if fiscal.named_by_start:
        text = _FISCAL_YEAR.sub(lambda m: anchor.fiscal_year(anchor.as_of.year + _fy(m["fy"]) + 1), text)
    return text


#: "Q3 2022" in an issuer's own filing or call: its fiscal quarter, as issuers number quarters on their own calendar
#: (AAPL's 10-Q of the quarter ended June 2022 says "in Q3 2022"); read as "fiscal Q3 2022", so that
#: ``calendar_positions`` places it by the issuer's calendar (a calendar-year issuer's is the same quarter).
_ISSUER_QUARTER = re.compile(rf"(?<!fiscal )\bQ(?P<q>[1-4]),? {_Y4}\b")


def issuer_quarters(text: str) -> str:
    """``text`` (an issuer's own words) with each bare "Qn YYYY" written as the fiscal quarter it is."""
    return _ISSUER_QUARTER.sub(lambda m: f"fiscal Q{m['q']} {m['y']}", text)


#: A company (its pseudonym, or another company) right before a number: what followed the name in the evidence
#: ("Microsoft 365", a model number), which the name's replacement would otherwise keep.
_FUSED = re.compile(rf"(?P<name>\b{PSEUDONYM_PREFIX}[A-Z]+|\b{OTHER_COMPANY})(?P<gap>\s+)(?P<num>\d+(?:[.\-]?\w+)*)")


def unfuse(text: str, masker: Masker) -> str:
    """``text`` with the number after a company masked as a product ("ASSET_A 365" -> "ASSET_A [PRODUCT_4]"): the
    same number after the same company has the same mask throughout the memo."""
    return _FUSED.sub(lambda m: m["name"] + m["gap"] + masker.mask_of(f"{m['name']} {m['num']}", "PRODUCT"), text)


# ---------------------------------------------------------------- the memo

@dataclass(frozen=True)
class Blinded:
    """A blind memo, the pseudonymised scenario the debate runs on, and the mapping back."""

    memo: Memo
    scenario: Scenario
    mapping: dict[str, str]  # real ticker → pseudonym
    #: The names the company texts carried and their masks (``madbench.data.neuter``), in order of first use.
    masked: list[MaskedTerm]
    #: The last pass over every prompt: the universe's names and tickers and calendar dates only (an example ID of
    #: another ticker in a template is left alone: it names no company of the scenario).
    outgoing: Redactor

    def prompt(self, text: str) -> str:
        """A rendered prompt as a model of a blind run may read it: whatever a template or a protocol wrote around the
        blind memo (an example ID such as AAPL-RET60, a quarter label) passes ``outgoing``; the memo, blind already,
        is kept as it is."""
        return self.memo_text.join(self.outgoing(part) for part in text.split(self.memo_text))

    @functools.cached_property
    def memo_text(self) -> str:
        return self.memo.text

    def data(self, value: Any) -> Any:
        """``outgoing`` over every string inside ``value`` (a request's context, which a provider may be sent)."""
        if isinstance(value, str):
            return self.outgoing(value)
        if isinstance(value, dict):
            return {k: self.data(v) for k, v in value.items()}
        return [self.data(v) for v in value] if isinstance(value, (list, tuple)) else value

    @property
    def reverse(self) -> dict[str, str]:
        return {p: t for t, p in self.mapping.items()}

    def to_real(self, weights: dict[str, float]) -> dict[str, float]:
        """An allocation in pseudonyms, in real tickers (in the real scenario's order); a name outside the blind
        universe is an error (validation keeps answers inside it)."""
        back = self.reverse
        unknown = sorted(set(weights) - set(back))
        if unknown:
            raise ValueError(f"allocation names {', '.join(unknown)}, not pseudonyms of this scenario")
        real = {back[p]: w for p, w in weights.items()}
        return {t: real[t] for t in self.mapping if t in real}


def _macro_item(item: EvidenceItem, options: BlindOptions) -> EvidenceItem:
    key = item.id.removeprefix("L1-")
    if options.macro == "regime":
        band = MACRO_REGIME.get(key)
        if band is None:
            return item.model_copy(update={"value": None, "note": MACRO_WITHHELD, "as_of": None, "period": None})
        if not isinstance(item.value, float):
            return item  # n/a, with its reason
        # no release date or period: the days between them and t follow the weekday the quarter ends on
        return item.model_copy(update={"value": band.of(item.value), "note": None, "as_of": None, "period": None})
    step = MACRO_STEPS.get(key)
    if options.macro == "exact" or step is None or not isinstance(item.value, float):
        return item
    change = re.search(r"[+-]\d+(?:\.\d+)?", item.note or "")
    direction = None if change is None else ("unchanged" if float(change.group(0)) == 0 else
                                            "up" if change.group(0).startswith("+") else "down") + " on the quarter"
    note = "; ".join(x for x in (f"rounded to the nearest {step:g}", direction) if x)
    return item.model_copy(update={"value": round(item.value / step) * step, "note": note})


def _ticker_item(item: EvidenceItem, field: str, px: object, dollar_volume: float | None) -> EvidenceItem:
    if field in PRICE_LEVELS and isinstance(item.value, float):
        if not isinstance(px, float) or not px > 0:
            return item.model_copy(update={"value": None, "unit": REBASED_UNIT, "note": "n/a (no close at t to rebase to)"})
        return item.model_copy(update={"value": item.value * 100.0 / px, "unit": REBASED_UNIT})
    if field == "ADVOL" and isinstance(item.value, float):
        share = item.value / dollar_volume * 100.0 if dollar_volume else None
        return item.model_copy(update={"label": "Share of the universe's 20-day average dollar volume", "unit": "percent",
                                       "value": share})
    return item


Scrub = Callable[[str | None], str | None]


def _scrub(item: EvidenceItem, redact: Scrub, words: Scrub | None = None, names: Scrub | None = None) -> EvidenceItem:
    """Names, tickers and dates out of every field; ``words`` (masking every other name and every term outside the
    generic vocabulary) over the evidence's own words, a text's value; ``names`` (names only) over its note, which
    madbench writes. Labels and units are madbench's ("60-day Sharpe ratio"), masked of nothing."""
    return item.model_copy(update={
        "label": redact(item.label), "value": (words or redact)(item.value) if isinstance(item.value, str) else item.value,
        "unit": redact(item.unit), "as_of": redact(item.as_of), "source": redact(item.source),
        "note": (names or redact)(item.note), "period": redact(item.period)})


def blind_memo(memo: Memo, scenario: Scenario, companies: list[Company], options: BlindOptions) -> Blinded:
    """The blind counterpart of ``memo`` (built for ``scenario``); ``companies``: every stock of the pack."""
    shuffled = pseudonyms(list(scenario.tickers))
    mapping = {t: shuffled[t] for t in scenario.tickers}  # in the scenario's order: ``to_real`` keeps it
    anchor = Anchor(memo.as_of, scenario.quarter)
    redact = Redactor(mapping, companies, anchor, OTHER_COMPANIES)
    masker = Masker(seed=memo.sha256)  # masks numbered per memo: [PRODUCT_7] here is not [PRODUCT_7] elsewhere
    values = {it.id: it.value for it in memo.items}
    volumes = [v for t in scenario.tickers if isinstance(v := values.get(f"{t}-ADVOL"), float)]
    total_volume = sum(volumes) or None
    sections: list[Section] = []
    for sec in memo.sections:
        if sec.ticker is None:
            items = [_scrub(_macro_item(it, options), redact) for it in sec.items]  # as blind_macro, with the memo's redactor
            if items:
                sections.append(replace(sec, items=items, header=redact(sec.header)))
            continue
        fiscal = FISCAL_CALENDARS.get(sec.ticker, CALENDAR_YEAR)

        def placed(text: str | None, fiscal: FiscalCalendar = fiscal) -> str | None:
            return None if text is None else calendar_positions(redact(text), fiscal, anchor)

        def neuter(text: str | None, fiscal: FiscalCalendar = fiscal) -> str | None:
            """The evidence's own words: names, dates, amounts, percentages, fiscal labels, every name and term."""
            if text is None:
                return None
            return masker(unfuse(calendar_positions(bucket_percents(redact(issuer_quarters(text))), fiscal, anchor),
                                 masker))

        def neuter_names(text: str | None, fiscal: FiscalCalendar = fiscal) -> str | None:
            return None if text is None else masker(calendar_positions(redact(text), fiscal, anchor), terms=False)
        items = []
        for it in sec.items:
            if not (options.text == "drop" and it.unit == "text"):
                field = it.id[len(sec.ticker) + 1:]
                it = _ticker_item(it, field, values.get(f"{sec.ticker}-PX"), total_volume)
                items.append(_scrub(it, placed, neuter, neuter_names).model_copy(update={"id": f"{mapping[sec.ticker]}-{field}"}))
        if items:
            sections.append(replace(sec, items=items, ticker=mapping[sec.ticker], header=neuter_names(sec.header)))
    blind_tickers = sorted(mapping.values())
    order = {p: i for i, p in enumerate(blind_tickers)}
    sections.sort(key=lambda s: -1 if s.ticker is None else order[s.ticker])  # stable: a ticker's sections keep their order
    sector_of = scenario.sectors or {c.ticker: c.sector for c in companies if c.sector}
    sectors = {mapping[t]: sector_of[t] for t in scenario.tickers if options.sectors == "keep" and sector_of.get(t)}
    blind_id = "blind-" + hashlib.sha256(scenario.id.encode()).hexdigest()[:10]
    blind = Memo(blind_id, "Q0", memo.as_of, blind_tickers, sections, blind=True, sectors=sectors,
                 notes=_header_notes(options))
    blind_scenario = Scenario(id=blind_id, invest_quarter=scenario.invest_quarter, tickers=blind_tickers,
                              constraints=scenario.constraints)
    own = [c for c in companies if c.ticker in mapping]
    return Blinded(blind, blind_scenario, mapping, masker.masked, Redactor(mapping, own, anchor))


def blind_macro(section: Section, as_of: pd.Timestamp, quarter: Quarter, options: BlindOptions) -> Section:
    """A named memo's macro section (invest ``quarter``, as of ``as_of``) as ``blind_memo`` makes it."""
    redact = Redactor({}, [], Anchor(as_of, quarter))
    return replace(section, items=[_scrub(_macro_item(it, options), redact) for it in section.items])


def _header_notes(options: BlindOptions) -> list[str]:
    """What a blind memo's reader is told about the transformation, below its header."""
    notes = [
        f"Dates are relative: t{MINUS}20d is 20 calendar days before the as-of date t; M{MINUS}1 the month before t's; "
        f"Q0 the invest quarter and Q{MINUS}1 the calendar quarter ending at t, a company's fiscal quarter too, by the "
        f"calendar quarter it ends in; Y{MINUS}1 the year before t's; a fiscal year is counted from t's year by the "
        f"calendar year it ends in (FY{MINUS}1).",
        "Companies are pseudonyms (ASSET_A, ...), in their texts too; a company outside the universe is 'another company'; "
        "other names (products, segments, people, places, events) are masked as [PRODUCT_1], [PERSON_2], ..., and "
        "words of the texts that are not generic as [TERM_3], the same name or word with the same mask throughout; month "
        "names and dates without a year are [MONTH] and [DATE]; amounts are orders of magnitude ($[10\u2013100 billion]) and percentages in the texts bins of the 1-2.5-5 "
        "series ([25\u201350%]); a number that followed a company's name is masked as a product. "
        "Prices and moving averages are rebased so that the close at t is 100; dollar volume is a share of the universe's.",
    ]
    if options.macro == "regime":
        notes.append("Macro is given as regime bands (policy rate, yield curve, inflation); the other series are "
                     "withheld, since with them the macro block would date the quarter.")
    elif options.macro == "bucket":
        notes.append("Macro values are rounded to a coarse grid; their quarterly changes are given as directions.")
    if options.text == "drop":
        notes.append("Filing and earnings-call texts are left out.")
    return notes
