"""Shared fixtures: small packs the tests make themselves, and the shared data when present."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from madbench.data.market.write import write_pack

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
SHARED_MARKET = SHARED / "market"
SHARED_PAPER = SHARED / "paper"

requires_shared = pytest.mark.skipif(
    not (SHARED_MARKET / "prices.parquet").exists(),
    reason="real-data test: ../shared/data/market is absent on this machine (it ships beside the checkout in CI)",
)


def synthetic_tables(n_days: int = 700, tickers=("AAA", "BBB", "CCC"), start="2020-01-01", seed: int = 1) -> dict[str, pd.DataFrame]:
    """Random-walk prices for ``tickers`` plus SPY on business days, and a few macro series."""
    rng = np.random.default_rng(seed)
    dates = pd.bdate_range(start, periods=n_days)
    rows = []
    market = rng.normal(0.0004, 0.01, n_days)
    for j, t in enumerate(("SPY",) + tuple(tickers)):
        beta = 1.0 if t == "SPY" else 0.5 + 0.4 * j
        r = beta * market + (0 if t == "SPY" else rng.normal(0, 0.012, n_days))
        px = 100.0 * (1 + j) * np.cumprod(1 + r)
        vol = rng.integers(1_000_000, 5_000_000, n_days).astype(float)
        rows.append(pd.DataFrame({"date": dates.date, "ticker": t, "adj_close": px, "close": px * 1.01, "volume": vol}))
    prices = pd.concat(rows, ignore_index=True)
    macro_rows = []
    days = pd.date_range(dates[0] - pd.Timedelta(days=400), dates[-1], freq="D")
    for s, base in (("DFF", 1.0), ("DTB3", 1.2), ("DGS2", 1.5), ("DGS10", 2.0), ("DGS30", 2.4), ("T10Y2Y", 0.5),
                    ("T10YIE", 2.1), ("BAMLH0A0HYM2", 4.0), ("DTWEXBGS", 110.0), ("DCOILWTICO", 70.0), ("VIXCLS", 18.0)):
        v = base + np.cumsum(rng.normal(0, 0.01, len(days)))
        macro_rows.append(pd.DataFrame({"date": days.date, "series": s, "value": v}))
    months = pd.date_range(dates[0] - pd.Timedelta(days=400), dates[-1], freq="MS")
    for s, base in (("CPIAUCSL_YOY", 2.0), ("CPILFESL_YOY", 2.2), ("INDPRO", 100.0), ("UNRATE", 4.0)):
        macro_rows.append(pd.DataFrame({"date": months.date, "series": s, "value": base + np.arange(len(months)) * 0.1}))
    macro = pd.concat(macro_rows, ignore_index=True)
    universe = pd.DataFrame({
        "ticker": ["SPY", *tickers],
        "name": ["S&P 500 ETF", *[f"{t} Inc" for t in tickers]],
        "sector": ["ETF", *["Tech", "Energy", "Financials", "Health", "Utilities"][: len(tickers)]],
        "asset_class": ["etf", *["stock"] * len(tickers)],
    })
    return {"prices": prices, "macro": macro, "universe": universe}


@pytest.fixture
def make_pack(tmp_path):
    """Write a synthetic pack (optionally edited) and return its directory."""
    counter = {"n": 0}

    def _make(edit=None, **kw) -> Path:
        tables = synthetic_tables(**kw)
        if edit:
            edit(tables)
        counter["n"] += 1
        return write_pack(tmp_path / f"pack{counter['n']}", tables)

    return _make


@pytest.fixture(scope="session")
def ray_local():
    """A real local Ray cluster (4 logical CPUs so that 4 workers run side by side on 2 cores)."""
    import os

    import ray
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    if not ray.is_initialized():
        ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False, configure_logging=False,
                 runtime_env={"env_vars": {"PYTHONPATH": str(Path(__file__).resolve().parents[1])}})
    yield ray
    ray.shutdown()
