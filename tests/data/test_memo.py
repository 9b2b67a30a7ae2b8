"""Point-in-time memos on a synthetic pack and on the shared market pack."""

import json

import numpy as np
import pandas as pd
import pytest

from madbench.data.errors import InputError
from madbench.data.market.pack import load_pack
from madbench.data.memo import build_memo
from madbench.data.scenario import Scenario
from tests.conftest import SHARED_MARKET, SHARED_PAPER, requires_shared

MACRO_IDS = ["L1-FF", "L1-2Y", "L1-10Y", "L1-30Y", "L1-CURVE", "L1-REAL", "L1-CPI", "L1-CORE", "L1-INDPRO",
             "L1-UNEMP", "L1-HY", "L1-DXY", "L1-WTI", "L1-VIX"]
TICKER_KEYS = ["PX", "RET20", "RET60", "RET120", "RET252", "VOL20", "VOL60", "DVOL60", "DD60", "MDD1Y", "SHARPE",
               "BETA", "SMA20", "SMA50", "SMA200", "MOM200", "MOM12_1", "IDMOM", "TREND", "RS60", "ADVOL"]


def scen(q="2022Q2", tickers=("AAA", "BBB"), **c):
    return Scenario(id="s", invest_quarter=q, tickers=list(tickers), constraints={"allow_cash": True, **c})


def test_memo_is_deterministic_and_ids_unique(make_pack):
    pack = load_pack(make_pack())
    a, b = build_memo(scen(), pack), build_memo(scen(), load_pack(pack.root))
    assert a.text == b.text and a.to_json() == b.to_json()
    ids = [it.id for it in a.items]
    assert len(ids) == len(set(ids))
    assert set(MACRO_IDS) <= set(ids)
    assert {f"AAA-{k}" for k in TICKER_KEYS} <= set(ids)


def test_future_rows_change_nothing(make_pack):
    """A pack cut at the as-of date gives the same memo as the full pack."""
    full = load_pack(make_pack())
    as_of = full.calendar.as_of(scen().quarter)

    def cut(tables):
        for name in ("prices", "macro"):
            d = pd.to_datetime(tables[name]["date"])
            tables[name] = tables[name][d <= as_of]

    short = load_pack(make_pack(edit=cut))
    assert build_memo(scen(), short).text == build_memo(scen(), full).text


def test_as_of_is_last_trading_day_before_quarter(make_pack):
    pack = load_pack(make_pack())
    memo = build_memo(scen(), pack)
    assert memo.as_of == pd.Timestamp("2022-03-31")
    px = {it.id: it for it in memo.items}["AAA-PX"]
    p = pack.prices
    expected = p.loc[(p.ticker == 'AAA') & (p.date == pd.Timestamp('2022-03-31')), 'adj_close'].item()
    assert px.value == pytest.approx(expected)


def test_monthly_macro_respects_publication_lag(make_pack):
    """On 2022-03-31 the March CPI is unpublished; February's (released mid-March) is the latest.
    ``as_of`` is the publication date, ``period`` what the value describes."""
    memo = build_memo(scen(), load_pack(make_pack()))
    cpi = {it.id: it for it in memo.items}["L1-CPI"]
    assert (cpi.period, cpi.as_of) == ("2022-02", "2022-03-15")  # February's print: month end + 15 days
    ff = {it.id: it for it in memo.items}["L1-FF"]
    assert (ff.period, ff.as_of) == ("2022-03-30", "2022-03-31")  # daily series: one day's release lag
    assert "[L1-CPI] CPI inflation, year on year: " in memo.text and "value for 2022-02, published 2022-03-15)" in memo.text


def test_short_history_reads_na(make_pack):
    pack = load_pack(make_pack(n_days=130, start="2021-10-01"))
    items = {it.id: it for it in build_memo(scen(), pack).items}
    assert items["AAA-RET252"].value is None and items["AAA-RET252"].note == "n/a (insufficient history)"
    assert items["AAA-RET60"].value is not None
    assert "[AAA-RET252] 1-year return: n/a (insufficient history)" in build_memo(scen(), pack).text


def test_missing_ticker_and_uncovered_quarter_are_named(make_pack):
    pack = load_pack(make_pack())
    with pytest.raises(InputError, match="ZZZ"):
        build_memo(scen(tickers=("AAA", "ZZZ")), pack, where="f.yaml: scenarios[0]")
    with pytest.raises(InputError, match="invest_quarter"):
        build_memo(scen(q="2030Q1"), pack, where="f.yaml: scenarios[0]")


def test_evidence_tables_are_point_in_time(make_pack):
    def add_evidence(t):
        t["filings"] = pd.DataFrame({
            "ticker": ["AAA", "AAA"], "filing_date": ["2022-02-01", "2022-05-01"], "form": ["10-Q", "10-Q"],
            "operating_state": ["Sales rose 5%. Margins held.", "FUTURE FACT. Should not show."],
        })
        # The 2022Q1 call comes after its quarter ends on 2022-03-31, the as-of date: it is not public yet.
        t["earnings_calls"] = pd.DataFrame({"ticker": ["AAA", "AAA"], "quarter": ["2021Q4", "2022Q1"],
                                            "summary": ["Call one said this.", "Later call."], "sentiment": [0.2, 0.9]})
    memo = build_memo(scen(), load_pack(make_pack(edit=add_evidence)))
    items = {it.id: it for it in memo.items}
    assert items["AAA-F1"].value == "Sales rose 5%." and items["AAA-F2"].value == "Margins held."
    assert items["AAA-F1"].as_of == "2022-02-01"
    assert "AAA-F3" not in items and "FUTURE" not in memo.text
    assert items["AAA-EC1"].value == "Call one said this." and items["AAA-SENT"].value == pytest.approx(0.2)
    assert "AAA-EC2" not in items and "Later call" not in memo.text


# ---------------------------------------------------------------- real data

@requires_shared
def test_must_show_memo_on_market_pack():
    pack = load_pack(SHARED_MARKET)
    s = Scenario(id="m", invest_quarter="2022Q2", tickers=["AAPL", "XOM", "JPM"])
    memo = build_memo(s, pack)
    items = {it.id: it for it in memo.items}
    for mid in MACRO_IDS:
        assert items[mid].value is not None, mid
        assert f"[{mid}]" in memo.text
    for t in s.tickers:
        for k in TICKER_KEYS:
            assert items[f"{t}-{k}"].value is not None, f"{t}-{k}"
            assert f"[{t}-{k}]" in memo.text
    # independent computation straight from the Parquet file
    raw = pd.read_parquet(SHARED_MARKET / "prices.parquet")
    raw["date"] = pd.to_datetime(raw["date"])
    wide = raw.pivot(index="date", columns="ticker", values="adj_close").loc[:"2022-03-31"]
    aapl, spy = wide["AAPL"], wide["SPY"]
    ra, rs = aapl.pct_change(), spy.pct_change()
    assert items["AAPL-PX"].value == pytest.approx(aapl.iloc[-1], rel=1e-12)
    assert items["AAPL-RET60"].value == pytest.approx((aapl.iloc[-1] / aapl.iloc[-61] - 1) * 100, rel=1e-10)
    assert items["AAPL-VOL20"].value == pytest.approx(ra.iloc[-20:].std() * np.sqrt(252) * 100, rel=1e-10)
    assert items["AAPL-BETA"].value == pytest.approx(ra.iloc[-252:].cov(rs.iloc[-252:]) / rs.iloc[-252:].var(), rel=1e-10)
    assert items["AAPL-SMA200"].value == pytest.approx(aapl.iloc[-200:].mean(), rel=1e-12)
    vol = raw.pivot(index="date", columns="ticker", values="volume").loc[:"2022-03-31"]["XOM"]
    assert items["XOM-ADVOL"].value == pytest.approx((wide["XOM"] * vol).iloc[-20:].mean(), rel=1e-10)
    macro = pd.read_parquet(SHARED_MARKET / "macro.parquet")
    dgs10 = macro[(macro.series == "DGS10") & (pd.to_datetime(macro.date) <= "2022-03-30")].sort_values("date")
    assert items["L1-10Y"].value == pytest.approx(dgs10.value.iloc[-1])


@requires_shared
def test_future_rows_change_nothing_on_market_pack(tmp_path):
    from madbench.data.market.write import write_pack
    full = load_pack(SHARED_MARKET)
    s = Scenario(id="m", invest_quarter="2022Q2", tickers=["AAPL", "XOM", "JPM"])
    tables = {n: pd.read_parquet(SHARED_MARKET / f"{n}.parquet") for n in ("prices", "macro", "universe")}
    for n in ("prices", "macro"):
        tables[n] = tables[n][pd.to_datetime(tables[n]["date"]) <= "2022-03-31"]
    cut = load_pack(write_pack(tmp_path / "cut", tables))
    assert build_memo(s, cut).text == build_memo(s, full).text


@requires_shared
def test_paper_evidence_attaches_with_filing_facts():
    pack = load_pack(SHARED_MARKET, [SHARED_PAPER])
    memo = build_memo(Scenario(id="m", invest_quarter="2022Q2", tickers=["AAPL", "XOM", "JPM"]), pack)
    ids = memo.evidence_ids
    assert {"AAPL-F1", "AAPL-F2", "AAPL-EC1", "AAPL-SENT", "AAPL-ESURP"} <= ids
    filing = [it for it in memo.items if it.id.startswith("AAPL-F")]
    assert all(pd.Timestamp(it.as_of) <= pd.Timestamp("2022-03-31") for it in filing)
    assert json.loads(memo.to_json())[0].keys() >= {"id", "label", "value", "unit", "as_of", "source"}
