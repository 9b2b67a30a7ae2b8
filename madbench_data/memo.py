"""The point-in-time memo a debate reasons over.

A memo is a list of evidence items with stable IDs (``[L1-10Y]``,
``[AAPL-RET60]``, ``[AAPL-F3]``) grouped into sections, plus its plain-text
rendering. It uses only data dated on or before the as-of date (the last
trading day before the invest quarter), with macro publication lags applied,
so adding future rows to a pack changes nothing. The same inputs give
byte-identical output: no clocks, no unordered iteration.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
from pydantic import BaseModel

from madbench_data.market import features as F
from madbench_data.market.calendar import Quarter
from madbench_data.market.pack import BENCHMARK, Pack
from madbench_data.market.table_specs import FILING_SECTIONS
from madbench_data.scenario import Scenario, check_against_pack

NA_HISTORY = "n/a (insufficient history)"


class EvidenceItem(BaseModel):
    id: str
    label: str
    value: float | str | None
    unit: str
    as_of: str | None  # the date (or period) the value describes
    source: str
    note: str | None = None


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


def _macro_value(pack: Pack, spec: MacroSpec, as_of: pd.Timestamp) -> tuple[float, pd.Timestamp] | None:
    obs = []
    for s in spec.series:
        ps = pack.published(s)
        o = ps.latest(as_of) if ps is not None else None
        if o is None:
            return None
        obs.append(o)
    value = spec.combine(obs[0].value, obs[1].value) if spec.combine else obs[0].value
    return value, min(o.date for o in obs)


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
        value, obs_date = got
        before = _macro_value(pack, spec, prev_as_of) if prev_as_of is not None else None
        note = _change_note(spec, value, before[0] if before else None)
        items.append(EvidenceItem(id=spec.id, label=spec.label, value=value, unit=spec.unit,
                                  as_of=str(obs_date.date()), source=source, note=note))
    return items


# ---------------------------------------------------------------- ticker layer

@dataclass(frozen=True)
class FeatureSpec:
    key: str
    label: str
    unit: str
    fmt: str
    section: str
    compute: Callable[[np.ndarray, np.ndarray | None, np.ndarray], float | None]  # (prices, spy, volume)


def _needs_spy(fn):
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


def _latest(df: pd.DataFrame | None, mask, order: str) -> pd.Series | None:
    """The latest matching row. Rows tied on ``order`` resolve to the last in file
    order (a stable sort); `madbench data check` reports such duplicates."""
    if df is None:
        return None
    idx = np.flatnonzero(np.asarray(mask(df), dtype=bool))
    if idx.size == 0:
        return None
    keys = df[order].to_numpy()[idx]
    return df.iloc[int(idx[np.flatnonzero(keys == keys.max())[-1]])]


def _evidence_sections(pack: Pack, ticker: str, as_of: pd.Timestamp, known_q: Quarter) -> list[Section]:
    """Fundamentals, sentiment, filing and earnings-call evidence known by ``as_of``.

    Quarter-labelled rows (calls, sentiment) count as known once their quarter
    has ended, i.e. quarter <= the quarter before the invest quarter.
    """
    sections = []
    known = known_q.year * 4 + known_q.q - 1
    af = pack.evidence_for("asset_features", ticker)
    if af is not None:
        row = _latest(af, (lambda d: d["_date"] <= as_of) if "_date" in af.columns else (lambda d: d["_qord"] <= known), "_qord")
        items = []
        if row is not None:
            for key, col, label, unit, scale in (
                ("ESURP", "earnings_surprise_pct", "Latest earnings surprise", "percent", 100.0),
                ("GM", "gross_margin", "Gross margin", "percent", 100.0),
                ("ROE", "roe", "Return on equity", "percent", 100.0),
                ("DE", "debt_to_equity", "Debt to equity", "ratio", 1.0),
            ):
                if col in row.index and pd.notna(row[col]):
                    items.append(EvidenceItem(id=f"{ticker}-{key}", label=label, value=float(row[col]) * scale, unit=unit,
                                              as_of=str(row.get("as_of", row["quarter"])), source=f"asset_features:{row['quarter']}"))
        if items:
            sections.append(Section("Fundamentals", items, ticker))
    sent = None
    ns = pack.evidence_for("news_sentiment", ticker)
    row = _latest(ns, lambda d: d["_qord"] <= known, "_qord")
    if row is not None:
        sent = ("news_sentiment", row["quarter"], float(row["mean_sentiment"]), float(row["volatility"]),
                f"news articles ({int(row['article_count'])})")
    calls = pack.evidence_for("earnings_calls", ticker)
    call = _latest(calls, lambda d: d["_qord"] <= known, "_qord")
    if sent is None and call is not None and pd.notna(call.get("sentiment")):
        svol = call.get("sentiment_volatility")
        sent = ("earnings_calls", call["quarter"], float(call["sentiment"]), float(svol) if pd.notna(svol) else None, "earnings call")
    if sent is not None:
        table, q, mean, svol, what = sent
        items = [EvidenceItem(id=f"{ticker}-SENT", label=f"Mean sentiment of {what}", value=mean, unit="score in [-1, 1]",
                              as_of=str(q), source=f"{table}:{q}")]
        if svol is not None:
            items.append(EvidenceItem(id=f"{ticker}-SVOL", label="Sentiment volatility", value=svol, unit="score",
                                      as_of=str(q), source=f"{table}:{q}"))
        sections.append(Section("Sentiment", items, ticker))
    fl = pack.evidence_for("filings", ticker)
    row = _latest(fl, lambda d: d["_date"] <= as_of, "_date")
    if row is not None:
        facts = [s for col in FILING_SECTIONS if col in row.index and pd.notna(row[col]) for s in split_sentences(row[col])]
        form = row.get("form", "filing")
        items = [EvidenceItem(id=f"{ticker}-F{i}", label=f"Filing fact {i}", value=fact, unit="text",
                              as_of=str(row["filing_date"]), source=f"filings:{form} {row['filing_date']}")
                 for i, fact in enumerate(facts, 1)]
        period = f", fiscal period {row['fiscal_period']}" if pd.notna(row.get("fiscal_period")) else ""
        if items:
            sections.append(Section("Filing", items, ticker, header=f"{form} filed {row['filing_date']}{period}"))
    if call is not None:
        facts = [s for col in ("summary", "outlook", "risks", "drivers") if col in call.index and pd.notna(call[col])
                 for s in split_sentences(call[col])]
        items = [EvidenceItem(id=f"{ticker}-EC{i}", label=f"Earnings-call fact {i}", value=fact, unit="text",
                              as_of=str(call["quarter"]), source=f"earnings_calls:{call['quarter']}")
                 for i, fact in enumerate(facts, 1)]
        if items:
            sections.append(Section("Earnings call", items, ticker, header=f"call in {call['quarter']}"))
    return sections


# ---------------------------------------------------------------- assembly

def build_memo(scenario: Scenario, pack: Pack, where: str = "scenario") -> Memo:
    check_against_pack(scenario, pack, where)
    q = scenario.quarter
    as_of = pack.calendar.as_of(q, where=f"{where}.invest_quarter")
    # QoQ changes need the previous quarter's as-of date, which exists only if
    # the pack starts before that quarter; otherwise the memo shows levels only.
    prev_as_of = pack.calendar.as_of(q.previous()) if pack.calendar.first < q.previous().start else None
    idx = pack.calendar.index_of(as_of)
    known_q = q.previous()
    sections = [Section("Macro regime", macro_items(pack, as_of, prev_as_of))]
    for t in scenario.tickers:
        grouped: dict[str, list[EvidenceItem]] = {}
        for sec, item in _ticker_price_items(pack, t, idx):
            grouped.setdefault(sec, []).append(item)
        sections += [Section(title, items, t) for title, items in grouped.items()]
        sections += _evidence_sections(pack, t, as_of, known_q)
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
        f"Universe: {', '.join(memo.tickers)}",
        "Cite evidence by its bracketed ID, e.g. [L1-10Y] or [" + memo.tickers[0] + "-RET60]. Only the IDs below exist.",
        "Prices are split- and dividend-adjusted closes where the pack has them; macro values are those published by the as-of date.",
    ]
    current = object()
    fmt_of = {f"L1-{s.id[3:]}": s.fmt for s in MACRO}
    fmt_of.update({f.key: f.fmt for f in FEATURES})
    fmt_of.update(ESURP="pct_signed", GM="pct", ROE="pct", DE="ratio", SENT="ratio4", SVOL="ratio4")
    for sec in memo.sections:
        if sec.ticker != current:
            current = sec.ticker
            lines += ["", rule, "MACRO REGIME" if sec.ticker is None else f"TICKER {sec.ticker}", rule]
        if sec.ticker is not None:
            lines.append(f"{sec.title}" + (f" ({sec.header})" if sec.header else "") + ":")
        for it in sec.items:
            key = it.id if sec.ticker is None else it.id[len(sec.ticker) + 1:]
            if it.value is None:
                body = it.note or NA_HISTORY
            elif isinstance(it.value, str):
                body = it.value
            else:
                body = _fmt(it.value, fmt_of.get(key, _unit_fmt(it.unit)))
                extra = [x for x in (it.note, f"observed {it.as_of}" if sec.ticker is None else None) if x]
                if extra:
                    body += " (" + "; ".join(extra) + ")"
            lines.append(f"[{it.id}] {it.label}: {body}" if not isinstance(it.value, str) else f"[{it.id}] {body}")
    return "\n".join(lines) + "\n"


def _unit_fmt(unit: str) -> str:
    return {"percent": "pct", "ratio": "ratio", "score": "ratio4", "score in [-1, 1]": "ratio4"}.get(unit, "ratio")
