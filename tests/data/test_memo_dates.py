"""When memo evidence became public: calls and fundamentals dated by results filings, or by a stated lag."""

import re
from datetime import date

import pandas as pd
import pytest

from madbench.data.errors import InputError
from madbench.data.market.calendar import Quarter, TradingCalendar
from madbench.data.market.check import check_pack
from madbench.data.market.pack import load_pack
from madbench.data.memo import RESULTS_LAG_DAYS, RESULTS_LAG_DAYS_YEAR_END, build_memo, news_available
from madbench.data.scenario import Scenario, load_scenarios
from tests.conftest import SHARED_MARKET, SHARED_PAPER, requires_shared


def scen(q="2022Q2", tickers=("AAA", "BBB")):
    return Scenario(id="s", invest_quarter=q, tickers=list(tickers), constraints={"allow_cash": True})


def calls(ticker, quarters, sentiment=None):
    return pd.DataFrame({"ticker": ticker, "quarter": quarters, "summary": [f"{ticker} call of {q}." for q in quarters],
                         "sentiment": sentiment if sentiment is not None else [0.1] * len(quarters)})


def dates(rows):
    return pd.DataFrame(rows, columns=["ticker", "date"])


def by_id(memo):
    return {it.id: it for it in memo.items}


def test_call_filed_after_the_as_of_date_is_left_out(make_pack):
    def edit(t):
        t["earnings_calls"] = calls("AAA", ["2021Q4", "2022Q1"])
        t["earnings_dates"] = dates([("AAA", "2022-01-25"), ("AAA", "2022-04-20")])

    pack = load_pack(make_pack(edit=edit))
    memo = build_memo(scen("2022Q2"), pack)  # as of 2022-03-31: the 2022Q1 call comes on 2022-04-20
    items = by_id(memo)
    assert items["AAA-EC1"].value == "AAA call of 2021Q4." and "2022Q1." not in memo.text
    assert (items["AAA-EC1"].as_of, items["AAA-EC1"].period) == ("2022-01-25", "fiscal 2021Q4")
    assert "dated 2022-01-25 by its 8-K results filing" in items["AAA-EC1"].note
    assert "Earnings call (fiscal 2021Q4, quarter ended 2021-12-31; call dated 2022-01-25 by its 8-K results filing):" in memo.text
    later = by_id(build_memo(scen("2022Q3"), pack))  # as of 2022-06-30
    assert later["AAA-EC1"].value == "AAA call of 2022Q1." and later["AAA-EC1"].as_of == "2022-04-20"


def test_call_without_a_known_date_is_lagged_and_the_memo_says_so(make_pack):
    def edit(t):
        t["earnings_calls"] = pd.concat([calls("AAA", ["2021Q4"]), calls("BBB", ["2021Q3", "2021Q4", "2022Q1"])])
        t["earnings_dates"] = dates([("AAA", "2022-01-25")])  # nothing for BBB

    pack = load_pack(make_pack(edit=edit))
    memo = build_memo(scen("2022Q2"), pack)  # as of 2022-03-31
    ec = by_id(memo)["BBB-EC1"]
    # a fiscal year's last quarter: 90 days after 2021-12-31 is 2022-03-31, just public; 2022Q1's call is not
    assert RESULTS_LAG_DAYS_YEAR_END == 90 and RESULTS_LAG_DAYS == 60
    assert ec.value == "BBB call of 2021Q4." and ec.as_of == "2022-03-31"
    assert ec.note == ("call date unknown (no results filings for BBB in the pack), "
                       "assumed 90 days after the quarter ended: 2022-03-31")
    assert ("Earnings call (fiscal 2021Q4, quarter ended 2021-12-31; call date unknown (no results filings for BBB "
            "in the pack), assumed 90 days after the quarter ended: 2022-03-31):") in memo.text
    assert "BBB call of 2022Q1" not in memo.text
    # the call's sentiment stands in for news, dated and noted the same way
    assert by_id(memo)["BBB-SENT"].as_of == "2022-03-31" and "assumed 90 days" in by_id(memo)["BBB-SENT"].note
    # fiscal Q1-Q3: 60 days; on 2021-12-31 the 2021Q3 call (public 2021-11-29) is the latest
    early = by_id(build_memo(scen("2022Q1"), pack))
    assert early["BBB-EC1"].value == "BBB call of 2021Q3." and early["BBB-EC1"].as_of == "2021-11-29"
    # without any earnings_dates table every call is lagged, and the reason says so
    bare = by_id(build_memo(scen("2022Q2"), load_pack(make_pack(edit=lambda t: t.update(earnings_calls=calls("AAA", ["2021Q4"]))))))
    assert "no earnings_dates table in the pack" in bare["AAA-EC1"].note and bare["AAA-EC1"].as_of == "2022-03-31"


def test_fundamentals_of_a_quarter_not_yet_public_are_left_out(make_pack):
    """A snapshot row holds the fundamentals of the quarter it closes (public weeks later) and the
    earnings surprise of the latest results already out."""
    def edit(t):
        t["asset_features"] = pd.DataFrame({
            "ticker": ["AAA", "AAA", "BBB", "BBB"], "quarter": ["2021Q4", "2022Q1"] * 2,
            "as_of": ["2021-12-31", "2022-03-31"] * 2, "gross_margin": [0.40, 0.50, 0.30, 0.35],
            "earnings_surprise_pct": [0.05, 0.10, 0.01, 0.02],
        })
        t["earnings_dates"] = dates([("AAA", "2021-10-26"), ("AAA", "2022-01-25"), ("AAA", "2022-04-20")])

    memo = build_memo(scen("2022Q2"), load_pack(make_pack(edit=edit)))  # as of 2022-03-31
    items = by_id(memo)
    gm = items["AAA-GM"]
    assert gm.value == pytest.approx(40.0) and (gm.as_of, gm.period) == ("2022-01-25", "fiscal 2021Q4")
    assert "50.0 percent" not in memo.text  # the quarter ended 2022-03-31 reports on 2022-04-20
    esurp = items["AAA-ESURP"]  # from the 2022-03-31 row: the surprise of the results filed 2022-01-25
    assert esurp.value == pytest.approx(10.0) and (esurp.as_of, esurp.period) == ("2022-01-25", "fiscal 2021Q4")
    # BBB has no filing dates: its 2021Q4 figures count from the lag (90 days: 2022-03-31), and say so
    assert items["BBB-GM"].value == pytest.approx(30.0) and items["BBB-GM"].as_of == "2022-03-31"
    assert "assumed 90 days after the quarter ended" in items["BBB-GM"].note and "assumed 90 days" in memo.text
    assert items["BBB-ESURP"].as_of == "2022-03-31" and "release date not in the pack" in items["BBB-ESURP"].note


def test_fiscal_quarter_labels_and_the_packs_date_caveats(make_pack):
    """Calls are labelled by the issuer's fiscal quarter (NVDA's fiscal 2022Q4 ended 2022-01-30);
    TSLA's Item 2.02 rows are delivery reports; GOOG's results are filed under GOOGL; a filing a
    few days after the quarter (AAPL's 2019-style warning) is not the results release."""
    def edit(t):
        t["earnings_calls"] = pd.concat([
            calls("NVDA", ["2022Q3", "2022Q4", "2023Q1"]), calls("AAPL", ["2022Q1", "2022Q2"]),
            calls("TSLA", ["2021Q4"]), calls("GOOG", ["2021Q4", "2022Q1"]),
        ])
        t["earnings_dates"] = dates([
            ("NVDA", "2021-11-17"), ("NVDA", "2022-02-16"), ("NVDA", "2022-05-25"),
            ("AAPL", "2022-01-03"), ("AAPL", "2022-01-27"), ("AAPL", "2022-04-28"),
            ("TSLA", "2022-01-03"), ("TSLA", "2022-04-04"),
            ("GOOGL", "2022-02-01"), ("GOOGL", "2022-04-26"),
        ])

    pack = load_pack(make_pack(edit=edit, tickers=("NVDA", "AAPL", "TSLA", "GOOG")))
    memo = build_memo(scen("2022Q2", ("NVDA", "AAPL", "TSLA", "GOOG")), pack)  # as of 2022-03-31
    items = by_id(memo)
    assert items["NVDA-EC1"].value == "NVDA call of 2022Q4." and items["NVDA-EC1"].as_of == "2022-02-16"
    assert "Earnings call (fiscal 2022Q4, quarter ended about 2022-01-31; call dated 2022-02-16" in memo.text
    assert items["AAPL-EC1"].value == "AAPL call of 2022Q1." and items["AAPL-EC1"].as_of == "2022-01-27"
    assert items["TSLA-EC1"].as_of == "2022-03-31" and "delivery reports" in items["TSLA-EC1"].note
    assert items["GOOG-EC1"].value == "GOOG call of 2021Q4." and items["GOOG-EC1"].as_of == "2022-02-01"


def news(ticker, quarters, sentiment):
    return pd.DataFrame({"ticker": ticker, "quarter": quarters, "article_count": [40] * len(quarters),
                         "mean_sentiment": sentiment, "volatility": [0.5] * len(quarters)})


def test_news_is_available_the_trading_day_after_its_window_and_not_on_the_as_of_day(make_pack):
    """The backtest buys at the as-of close: news of a window ending that day is not yet tradable, so a memo holds
    only windows available (the next trading day) by its as-of date."""
    pack = load_pack(make_pack(edit=lambda t: t.update(news_sentiment=news("AAA", ["2021Q4", "2022Q1"], [0.1, 0.5]))))
    assert news_available(pack, Quarter(2021, 4)) == pd.Timestamp("2022-01-03")  # 2021-12-31 is a Friday
    memo = build_memo(scen("2022Q2"), pack)  # as of 2022-03-31, the last day of the 2022Q1 window
    sent = by_id(memo)["AAA-SENT"]
    assert (sent.value, sent.as_of, sent.period, sent.source) == (0.1, "2022-01-03", "2021Q4", "news_sentiment:2021Q4")
    assert "next trading day" in sent.note and "news of 2022Q1" not in memo.text
    assert all(it.as_of is None or pd.Timestamp(it.as_of) <= memo.as_of for it in memo.items)
    later = by_id(build_memo(scen("2022Q3"), pack))  # as of 2022-06-30: the 2022Q1 window was out on 2022-04-01
    assert (later["AAA-SENT"].value, later["AAA-SENT"].as_of) == (0.5, "2022-04-01")
    # news of the as-of day's window only, and no call: no sentiment at all rather than a same-day leak
    only = load_pack(make_pack(edit=lambda t: t.update(news_sentiment=news("AAA", ["2022Q1"], [0.5]))))
    assert "AAA-SENT" not in by_id(build_memo(scen("2022Q2"), only))


def test_the_next_trading_day_skips_holidays_and_runs_past_the_packs_end():
    cal = TradingCalendar(pd.DatetimeIndex(["2022-03-30", "2022-03-31", "2022-04-04"]))  # 04-01 missing: a holiday
    assert cal.next_after(pd.Timestamp("2022-03-31")) == pd.Timestamp("2022-04-04")
    assert cal.next_after(pd.Timestamp("2022-03-30")) == pd.Timestamp("2022-03-31")
    assert cal.next_after(pd.Timestamp("2022-04-04")) == pd.Timestamp("2022-04-05")  # past the end: the next weekday
    assert cal.next_after(pd.Timestamp("2022-04-08")) == pd.Timestamp("2022-04-11")


def test_earnings_dates_load_from_the_optional_folder(make_pack, tmp_path):
    root = make_pack(edit=lambda t: t.update(earnings_dates=dates([("AAA", "2022-01-25"), ("AAA", "2022-01-25"), ("AAA", "2021-10-26")])))
    (root / "optional").mkdir()
    (root / "earnings_dates.parquet").rename(root / "optional" / "earnings_dates.parquet")
    pack = load_pack(root)
    assert pack.has_results_dates
    assert [str(d)[:10] for d in pack.results_dates("AAA")] == ["2021-10-26", "2022-01-25"]
    assert pack.results_dates("BBB").size == 0
    assert check_pack(root).tables["earnings_dates"] == 3
    # an evidence directory holding only the dates attaches too
    ev = tmp_path / "ev" / "optional"
    ev.mkdir(parents=True)
    dates([("BBB", "2022-02-02")]).to_parquet(ev / "earnings_dates.parquet", index=False)
    both = load_pack(root, [ev.parent])
    assert [str(d)[:10] for d in both.results_dates("BBB")] == ["2022-02-02"]
    # two copies in one directory, or a row without a date, are errors
    dates([("AAA", "2022-01-25")]).to_parquet(root / "earnings_dates.parquet", index=False)
    with pytest.raises(InputError, match="also at"):
        load_pack(root)
    (root / "earnings_dates.parquet").unlink()
    dates([("AAA", None)]).to_parquet(root / "optional" / "earnings_dates.parquet", index=False)
    with pytest.raises(InputError, match="no 'date'"):
        load_pack(root)


# ---------------------------------------------------------------- real data

#: Calls the issue named: held after the as-of date of memos that used them.
LEAKED_CALLS = {("2022-03-31", "DAL"): "2022Q1", ("2022-03-31", "AMZN"): "2022Q1",
                ("2022-12-30", "CAT"): "2022Q4", ("2024-12-31", "AMD"): "2024Q4"}


@requires_shared
def test_paper_memos_hold_only_evidence_public_by_their_as_of_date():
    pack = load_pack(SHARED_MARKET, [SHARED_PAPER])
    seen = set()
    for s in load_scenarios(SHARED_PAPER / "scenarios_35.yaml"):
        memo = build_memo(s, pack)
        for it in memo.items:
            if it.as_of is None:  # only an n/a value has no date
                assert it.value is None, it.id
                continue
            assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", it.as_of), (s.id, it.id, it.as_of)
            assert pd.Timestamp(date.fromisoformat(it.as_of)) <= memo.as_of, (s.id, it.id, it.as_of)
        for (day, ticker), quarter in LEAKED_CALLS.items():
            if str(memo.as_of.date()) == day and ticker in s.tickers:
                seen.add((day, ticker))
                sources = {it.source for it in memo.items if it.id.startswith(f"{ticker}-")}
                assert f"earnings_calls:{quarter}" not in sources, (s.id, ticker)
                assert any(src.startswith("earnings_calls:") for src in sources), (s.id, ticker)  # an earlier call stands in
        for it in memo.items:
            if re.fullmatch(r"[A-Z.-]+-EC\d+", it.id):
                assert "by its 8-K results filing" in it.note or "assumed" in it.note, it.note
    assert seen == set(LEAKED_CALLS)


@requires_shared
@pytest.mark.skipif(not (SHARED_PAPER / "news_sentiment.parquet").exists(),
                    reason="real-data test: ../shared/data/paper/news_sentiment.parquet is absent on this machine")
def test_paper_memos_hold_no_news_available_after_their_as_of_date():
    """The paper's news covers 2025Q1-Q3; the 2025Q2 and 2025Q3 memos are dated the last day of a news window."""
    pack = load_pack(SHARED_MARKET, [SHARED_PAPER])
    on_as_of_day = 0
    for s in load_scenarios(SHARED_PAPER / "scenarios_35.yaml"):
        memo = build_memo(s, pack)
        for it in memo.items:
            if it.source.startswith("news_sentiment:"):
                window = Quarter.parse(it.source.split(":", 1)[1])
                available = news_available(pack, window)
                assert window.end < memo.as_of and available <= memo.as_of, (s.id, it.id, str(window))
                assert it.as_of == str(available.date()), (s.id, it.id)
        on_as_of_day += Quarter.of(memo.as_of).end == memo.as_of and memo.as_of >= pd.Timestamp("2025-03-31")
    assert on_as_of_day >= 2  # the case the dating exists for was exercised
