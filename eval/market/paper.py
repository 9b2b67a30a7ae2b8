"""`madbench data import-paper`: a pack that covers the paper's 35 scenarios.

The offline market pack lacks five of the paper's tickers (AMT, DAL, GOOG,
OXY, SLB). This builds a pack from the market pack plus, for those tickers
only, the paper's daily closes. Those closes are not dividend-adjusted and
start 2021-10-01, so the pack stores them in ``close`` (``adj_close`` empty):
memos and backtests then measure those tickers on plain closes, say so in
their price basis, and long-window features read n/a where history is short.
The paper's evidence tables are copied in, renamed to the pack schema.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from eval.errors import InputError
from eval.market.pack import read_table
from eval.market.tables import EVIDENCE_TABLES, MACRO, PRICES, UNIVERSE
from eval.market.write import write_pack


def build_paper_pack(market: str | Path, paper: str | Path, out: str | Path) -> tuple[Path, list[str]]:
    market, paper = Path(market), Path(paper)
    for d in (market, paper):
        if not d.is_dir():
            raise InputError(d, "directory not found", "pass the market pack with --market and the paper data with --paper")
    prices = read_table(market / PRICES.filename, PRICES)
    universe = read_table(market / UNIVERSE.filename, UNIVERSE)
    macro = read_table(market / MACRO.filename, MACRO)
    paper_px_path = paper / "prices.parquet"
    paper_px = read_table(paper_px_path, PRICES)
    if "close" not in paper_px.columns:
        raise InputError(paper_px_path, "the paper's prices have no 'close' column", "use the paper data from shared/data/paper")
    have = set(prices["ticker"].astype(str))
    extra = sorted(set(paper_px["ticker"].astype(str)) - have)
    add = paper_px[paper_px["ticker"].isin(extra)].copy()
    add["date"] = pd.to_datetime(add["date"]).dt.date
    add = add.assign(adj_close=float("nan"), volume=float("nan"))[["date", "ticker", "adj_close", "close", "volume"]]
    merged_prices = pd.concat([prices, add], ignore_index=True)
    new_rows = pd.DataFrame({
        "ticker": extra,
        "name": extra,
        "sector": "unclassified",
        "asset_class": "stock",
    })
    merged_universe = pd.concat([universe, new_rows], ignore_index=True)
    tables = {"prices": merged_prices, "macro": macro, "universe": merged_universe}
    for spec in EVIDENCE_TABLES:
        path = paper / spec.filename
        if path.exists():
            tables[spec.name] = read_table(path, spec)
    readme = (
        "# Pack built by `madbench data import-paper`\n\n"
        f"Market pack: `{market}`; paper data: `{paper}`.\n\n"
        f"Tickers added from the paper's closes (not dividend-adjusted, from 2021-10-01, sector unclassified): {', '.join(extra)}.\n"
    )
    return write_pack(out, tables, readme), extra
