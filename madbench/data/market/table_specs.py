"""The tables a data pack may hold, their columns, and column aliases.

A pack is a directory of Parquet files, one per table. ``prices``, ``macro``
and ``universe`` are required; the evidence tables and ``earnings_dates`` are
optional and may also come from a separate evidence directory (for example
``shared/data/paper``). An optional table sits at the top of its directory or
in its ``optional/`` folder (the market pack keeps ``earnings_dates`` there).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class TableSpec:
    name: str
    required: tuple[str, ...]
    optional: tuple[str, ...] = ()
    key: tuple[str, ...] = ()
    # Other spellings seen in real packs, renamed on load (source name -> ours).
    aliases: dict[str, str] = field(default_factory=dict)

    @property
    def filename(self) -> str:
        return f"{self.name}.parquet"


PRICES = TableSpec(
    "prices",
    required=("date", "ticker"),
    optional=("adj_close", "close", "volume", "adj_open", "adj_high", "adj_low"),
    key=("date", "ticker"),
)
MACRO = TableSpec("macro", required=("date", "series", "value"), key=("date", "series"))
UNIVERSE = TableSpec(
    "universe",
    required=("ticker", "name", "sector", "asset_class"),
    optional=("etf_category",),
    key=("ticker",),
    aliases={"gics_sector": "sector"},
)

FILINGS = TableSpec(
    "filings",
    required=("ticker", "filing_date"),
    optional=("form", "fiscal_period", "period_type"),
    key=("ticker", "filing_date", "form"),
)
EARNINGS_CALLS = TableSpec(
    "earnings_calls",
    required=("ticker", "quarter", "summary"),
    optional=("outlook", "risks", "drivers", "sentiment", "sentiment_volatility"),
    key=("ticker", "quarter"),
    aliases={"management_outlook": "outlook", "key_drivers": "drivers", "mean_sentiment": "sentiment"},
)
NEWS_SENTIMENT = TableSpec(
    "news_sentiment",
    required=("ticker", "quarter", "article_count", "mean_sentiment", "volatility"),
    optional=("surprise_sentiment",),
    key=("ticker", "quarter"),
    aliases={"sentiment_volatility": "volatility"},
)
ASSET_FEATURES = TableSpec(
    "asset_features",
    required=("ticker", "quarter"),
    optional=("as_of", "gross_margin", "roe", "debt_to_equity", "earnings_surprise_pct"),
    key=("ticker", "quarter"),
)

# Filing dates of results reports (SEC 8-K Item 2.02), one row per filing. Not shown to agents: the
# memo uses them to date earnings calls and fundamentals (see madbench.data.memo).
EARNINGS_DATES = TableSpec("earnings_dates", required=("ticker", "date"), key=("ticker", "date"))

REQUIRED_TABLES = (PRICES, MACRO, UNIVERSE)
EVIDENCE_TABLES = (FILINGS, EARNINGS_CALLS, NEWS_SENTIMENT, ASSET_FEATURES)
#: Optional tables that date the evidence rather than being evidence themselves.
DATING_TABLES = (EARNINGS_DATES,)
OPTIONAL_TABLES = EVIDENCE_TABLES + DATING_TABLES
ALL_TABLES = {t.name: t for t in REQUIRED_TABLES + OPTIONAL_TABLES}
#: The folder of a pack or evidence directory that may hold optional tables.
OPTIONAL_DIR = "optional"

# Filing text columns, in the order their facts are numbered F1, F2, ...
FILING_SECTIONS = (
    "operating_state",
    "cost_structure",
    "material_events",
    "macro_exposures",
    "forward_outlook",
    "uncertainty_profile",
)
# Earnings-call text columns (after the aliases), in the order their facts are numbered EC1, EC2, ...
CALL_SECTIONS = ("summary", "outlook", "risks", "drivers")
