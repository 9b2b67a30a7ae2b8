"""`madbench data fetch`: build a pack online from yfinance and FRED's CSV downloads.

Raw downloads are cached on disk (one CSV per ticker and per series), so a
re-run after a failure only fetches what is missing. Without a network the
command fails within seconds with a clear message; it never hangs.
"""

from __future__ import annotations

import io
import socket
import threading
import urllib.request
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from madbench.data.atomic import atomic_write_bytes
from madbench.data.errors import InputError
from madbench.data.market.macro_series import RELEASES
from madbench.data.market.write import write_pack

FRED_CSV = "https://fred.stlouisfed.org/graph/fredgraph.csv?id={series}"
PROBE_HOSTS = (("query1.finance.yahoo.com", 443), ("fred.stlouisfed.org", 443))
FETCH_SERIES = tuple(s for s in RELEASES if not s.endswith("_YOY"))
YOY_OF = {"CPIAUCSL_YOY": "CPIAUCSL", "CPILFESL_YOY": "CPILFESL", "PCEPILFE_YOY": "PCEPILFE"}


def require_network(timeout_s: float = 4.0) -> None:
    """Raise at once if the data hosts cannot be reached (DNS and TCP, bounded in time)."""
    errors: list[str] = []

    def probe(host: str, port: int) -> None:
        try:
            socket.create_connection((host, port), timeout=timeout_s).close()
        except OSError as exc:
            errors.append(f"{host}: {exc}")

    threads = [threading.Thread(target=probe, args=hp, daemon=True) for hp in PROBE_HOSTS]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s + 1)
    if any(t.is_alive() for t in threads):
        errors.append("timed out resolving the data hosts")
    if errors:
        raise InputError(
            "madbench data fetch",
            "no network: cannot reach the data sources (" + "; ".join(errors) + ")",
            "run it on a machine with internet access, or use an offline pack with --pack",
        )


def yoy(frame: pd.DataFrame) -> pd.DataFrame:
    """12-month percent change of a monthly index: (x_t / x_{t-12} - 1) * 100."""
    f = frame.sort_values("date").set_index("date")["value"]
    f.index = pd.DatetimeIndex(f.index)
    prev = f.copy()
    prev.index = prev.index + pd.DateOffset(months=12)
    out = (f / prev.reindex(f.index) - 1.0) * 100.0
    return out.dropna().rename("value").reset_index()


def prices_from_yf(raw: pd.DataFrame, ticker: str) -> pd.DataFrame:
    """One ticker's yfinance history (auto_adjust=False) -> pack price rows."""
    cols = {c.lower().replace(" ", "_"): c for c in raw.columns}
    need = [c for c in ("adj_close", "close", "volume") if c not in cols]
    if need:
        raise InputError(f"yfinance:{ticker}", f"download lacks columns {need}", "retry, or check the ticker symbol")
    out = pd.DataFrame({
        "date": pd.to_datetime(raw.index).tz_localize(None).normalize().date,
        "ticker": ticker,
        "adj_close": raw[cols["adj_close"]].to_numpy(dtype=float),
        "close": raw[cols["close"]].to_numpy(dtype=float),
        "volume": raw[cols["volume"]].to_numpy(dtype=float),
    })
    return out.dropna(subset=["adj_close"])


def _cached(cache: Path, name: str, download: Callable[[], bytes]) -> bytes:
    path = cache / name
    if path.exists():
        return path.read_bytes()
    data = download()
    atomic_write_bytes(path, data)
    return data


def fetch_pack(tickers: list[str], start: str, end: str, out: str | Path, cache_dir: str | Path) -> Path:
    if not tickers:
        raise InputError("--tickers", "no tickers given", "pass a comma-separated list such as AAPL,MSFT,SPY")
    out, cache = Path(out), Path(cache_dir).expanduser()
    if out.exists() and any(out.iterdir()):
        raise InputError(out, "output directory exists and is not empty", "choose a new --out directory")
    require_network()
    import yfinance as yf  # imported late: it is slow and only needed online

    tickers = sorted(set(tickers) | {"SPY"})
    prices, universe = [], []
    for t in tickers:
        def download_prices(t: str = t) -> bytes:
            raw = yf.Ticker(t).history(start=start, end=end, auto_adjust=False, actions=False)
            if raw.empty:
                raise InputError(f"--tickers {t}", "yfinance returned no prices", "check the symbol and the date range")
            text: str = raw.to_csv()
            return text.encode()
        raw = pd.read_csv(io.BytesIO(_cached(cache, f"yf_{t}_{start}_{end}.csv", download_prices)), index_col=0)
        raw.index = pd.to_datetime(raw.index, utc=True)
        prices.append(prices_from_yf(raw, t))
        info = yf.Ticker(t).get_info()
        universe.append({
            "ticker": t,
            "name": info.get("shortName") or t,
            "sector": info.get("sector") or ("ETF" if info.get("quoteType") == "ETF" else "unclassified"),
            "asset_class": {"EQUITY": "stock", "ETF": "etf", "INDEX": "index"}.get(info.get("quoteType", ""), "stock"),
        })
    macro = []
    for s in FETCH_SERIES:
        def download_series(s: str = s) -> bytes:
            with urllib.request.urlopen(FRED_CSV.format(series=s), timeout=30) as resp:
                body: bytes = resp.read()
                return body
        csv = pd.read_csv(io.BytesIO(_cached(cache, f"fred_{s}.csv", download_series)))
        csv.columns = ["date", "value"]
        csv["value"] = pd.to_numeric(csv["value"], errors="coerce")  # FRED writes "." for no value
        macro.append(csv.dropna().assign(series=s))
    macro_df = pd.concat(macro, ignore_index=True)
    for derived, base in YOY_OF.items():
        macro_df = pd.concat([macro_df, yoy(macro_df[macro_df["series"] == base][["date", "value"]]).assign(series=derived)], ignore_index=True)
    macro_df["date"] = pd.to_datetime(macro_df["date"]).dt.date
    price_df = pd.concat(prices, ignore_index=True)
    price_df = price_df[np.isfinite(price_df["adj_close"])]
    readme = f"# Pack fetched by `madbench data fetch`\n\nTickers: {', '.join(tickers)}; {start} .. {end}. Sources: Yahoo Finance via yfinance, FRED CSV downloads.\n"
    return write_pack(out, {"prices": price_df, "macro": macro_df[["date", "series", "value"]], "universe": pd.DataFrame(universe)}, readme)
