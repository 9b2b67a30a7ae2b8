"""Blind memos without fiscal calendars, exact percentages or names fused to what followed them
(madbench.data.percents, madbench.data.blind.calendar_positions and unfuse, and their residue kinds)."""

from __future__ import annotations

import pandas as pd
import pytest

from madbench.data.blind import (
    MINUS,
    Anchor,
    BlindOptions,
    Company,
    Redactor,
    blind_memo,
    calendar_positions,
    issuer_quarters,
    pack_companies,
    unfuse,
)
from madbench.data.market.calendar import Quarter
from madbench.data.memo import CALENDAR_YEAR, FISCAL_CALENDARS, EvidenceItem, Memo, Section, build_memo
from madbench.data.neuter import Masker
from madbench.data.percents import bucket_percents, residue_percents
from madbench.data.residue import memo_residue
from madbench.data.scenario import load_scenarios
from tests.conftest import SHARED_MARKET, SHARED_PAPER, requires_shared

# -- percentages ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ("revenue increased 32%", "revenue increased [25\u201350%]"),
    ("gross margin of 71.5%, from 43.3%", "gross margin of [50\u2013100%], from [25\u201350%]"),
    ("cloud services growth of 45%", "cloud services growth of [25\u201350%]"),
    ("sales fell -12% and rose +3.1%", f"sales fell {MINUS}[10\u201325%] and rose +[2.5\u20135%]"),  # signs stay outside
    ("declined 12%", "declined [10\u201325%]"),  # the words that say a decline stay
    ("10% and 9.99%", "[10\u201325%] and [5\u201310%]"),  # an edge opens the bin above it
    ("0% and 0.3%", "[0%] and [0.25\u20130.5%]"),
    ("guidance of 3-5% and 40% to 60%", "guidance of [2.5\u20135%] and [25\u2013100%]"),  # a range spans its ends' bins
    ("between 41.5% and 42.5%", "between [25\u201350%] and [25\u201350%]"),
    ("up 12 percent, 2.5 percentage points and 230 basis points",
     "up [10\u201325] percent, [2.5\u20135] percentage points and [100\u2013250] basis points"),
    ("a 1,250% jump", "a [1000\u20132500%] jump"),
    ("year-over-year-12%", "year-over-year-[10\u201325%]"),  # a hyphen after a word is not a minus
])
def test_text_percentages_become_bins_that_keep_sign_and_meaning(text, expected):
    assert bucket_percents(text) == expected
    assert bucket_percents(expected) == expected  # idempotent: a bin is not read as a figure again
    assert list(residue_percents(expected)) == []


def test_figures_that_are_not_percentages_are_left_alone():
    text = "EPS of $[1\u201310], a 2.5x multiple, Q\u22121 and t\u221220d, COVID-19, mid-teens % growth"
    assert bucket_percents(text) == text


# -- fiscal quarters --------------------------------------------------------------------------------------------

ANCHOR = Anchor(pd.Timestamp("2022-03-31"), Quarter(2022, 2))  # Q−1 is 2022Q1, ending at t


@pytest.mark.parametrize("ticker, text, expected", [
    # MSFT's year ends in June: its fiscal Q2 of FY2022 ended December 2021, calendar 2021Q4
    ("MSFT", "Q2 FY0 revenue", f"Q{MINUS}2 revenue"),
    ("MSFT", "results of fiscal Q3 FY0 (quarter ended t\u221290d)", f"results of Q{MINUS}1 (quarter ended t\u221290d)"),
    ("MSFT", "guidance for Q4 FY0", "guidance for Q0"),
    # NVDA's fiscal 2023 began in February 2022: its first quarter ended in April, calendar 2022Q2
    ("NVDA", "in the first quarter of FY+1 and H2 FY+1", "in Q0 and Q+2\u2013Q+3"),
    # a calendar year's fiscal quarter is its calendar quarter
    ("JPM", "fiscal Q4 FY\u22121 and Q1 FY0", f"Q{MINUS}2 and Q{MINUS}1"),
    # a year named by its start (HD's fiscal 2021 ended January 2022) is counted by the year it ends in
    ("HD", "FY\u22121 sales", "FY0 sales"),
    ("MSFT", "FY+1 sales", "FY+1 sales"),
])
def test_fiscal_quarters_are_labelled_by_the_calendar_quarter_they_end_in(ticker, text, expected):
    fiscal = FISCAL_CALENDARS.get(ticker, CALENDAR_YEAR)
    assert calendar_positions(text, fiscal, ANCHOR) == expected


def test_an_off_calendar_issuer_and_a_calendar_one_read_alike_after_the_date_rules():
    """Microsoft's Q3 FY2022 and JPMorgan's Q1 2022 ended the same day: both are Q−1, with no fiscal number left."""
    companies = [Company("MSFT", "Microsoft"), Company("JPM", "JPMorgan Chase")]
    redact = Redactor({"MSFT": "ASSET_A", "JPM": "ASSET_B"}, companies, ANCHOR)
    msft = calendar_positions(redact("Microsoft reported Q3 FY2022 revenue"), FISCAL_CALENDARS["MSFT"], ANCHOR)
    jpm = calendar_positions(redact("JPM reported Q1 2022 revenue"), CALENDAR_YEAR, ANCHOR)
    assert msft.replace("ASSET_A", "X") == jpm.replace("ASSET_B", "X") == f"X reported Q{MINUS}1 revenue"


def test_an_issuers_bare_quarter_is_its_fiscal_quarter_placed_by_its_calendar():
    """AAPL's 10-Q of the quarter ended June 2022 says "in Q3 2022", its fiscal Q3: read as the calendar 2022Q3 it
    would land a quarter late; read as fiscal it is the quarter ending in June, as the filing's header places it."""
    redact = Redactor({"AAPL": "ASSET_A"}, [Company("AAPL", "Apple")], ANCHOR)
    aapl = calendar_positions(redact(issuer_quarters("Apple's net sales rose in Q3 2022")), FISCAL_CALENDARS["AAPL"], ANCHOR)
    jpm = calendar_positions(redact(issuer_quarters("net sales rose in Q2 2022")), CALENDAR_YEAR, ANCHOR)
    assert aapl == "ASSET_A's net sales rose in Q0" and jpm == "net sales rose in Q0"  # both ended June 2022
    as_calendar = calendar_positions(redact("Apple's net sales rose in Q3 2022"), FISCAL_CALENDARS["AAPL"], ANCHOR)
    assert as_calendar.endswith("in Q+1")  # what the calendar reading said: a quarter late
    assert issuer_quarters("fiscal Q3 2022 and Q4, 2021") == "fiscal Q3 2022 and fiscal Q4 2021"


# -- names fused to what followed them --------------------------------------------------------------------------

def test_a_number_after_a_pseudonym_is_masked_as_one_product_per_company_and_number():
    masker = Masker(seed="memo-f")
    out = unfuse("ASSET_A 365 grew; ASSET_A 365, ASSET_B 365 and another company 30 too; ASSET_A [10\u201325%]", masker)
    a, b, other = (masker.mask_of(n, "PRODUCT") for n in ("ASSET_A 365", "ASSET_B 365", "another company 30"))
    assert out == f"ASSET_A {a} grew; ASSET_A {a}, ASSET_B {b} and another company {other} too; ASSET_A [10\u201325%]"
    assert len({a, b, other}) == 3 and a.startswith("[PRODUCT_")


# -- the residue audit counts each ------------------------------------------------------------------------------

def _memo(text: str, note: str | None = None, period: str | None = None) -> Memo:
    item = EvidenceItem(id="ASSET_A-F1", label="Filing fact 1", value=text, unit="text", as_of="t\u221258d",
                        source="filings:10-Q t\u221258d", note=note, period=period)
    return Memo("blind-x", "Q0", pd.Timestamp("2022-03-31"), ["ASSET_A"], [Section("FILING", [item], ticker="ASSET_A")],
                blind=True)


def test_the_residue_counts_fiscal_labels_exact_percentages_and_fused_names():
    left = memo_residue(_memo("ASSET_A 365 grew 32% in Q2 FY+1 and the fourth quarter of FY0; margin 71.5 percent.",
                              note="results of fiscal Q3 FY0", period="fiscal Q3 FY0"))
    assert left.counts["fiscal_label"] == 4 and left.counts["percent"] == 2 and left.counts["fused_name"] == 1
    assert "ASSET_A 365" in left.examples["fused_name"] and "32%" in left.examples["percent"]
    clean = memo_residue(_memo(f"ASSET_A [PRODUCT_4] grew [25\u201350%] in Q{MINUS}1 and Q0; margin [50\u2013100] percent, "
                               "[0%] change.", period=f"Q{MINUS}1"))
    assert {k: clean.counts[k] for k in ("fiscal_label", "percent", "fused_name")} == {
        "fiscal_label": 0, "percent": 0, "fused_name": 0}


# -- the paper's memos ------------------------------------------------------------------------------------------

_PAPER_TEXTS = pytest.mark.skipif(not (SHARED_PAPER / "filings.parquet").exists(),
                                  reason="the paper's evidence tables (../shared/data/paper) are absent")


@requires_shared
@_PAPER_TEXTS
@pytest.mark.slow
def test_the_paper_memos_keep_no_fiscal_label_exact_percentage_or_fused_name():
    """The 35 paper scenarios, blind with the defaults (before these rules: 12,409 fiscal labels, 343 of them in
    the texts and notes of the 9 off-calendar issuers, 3,991 exact percentages and 44 fused names). About a minute."""
    from madbench.data.market.pack import load_pack
    pack = load_pack(SHARED_MARKET, [SHARED_PAPER])
    companies = pack_companies(pack.universe)
    totals = {"fiscal_label": 0, "percent": 0, "fused_name": 0}
    texts = 0
    for scenario in load_scenarios(SHARED_PAPER / "scenarios_35.yaml"):
        memo = blind_memo(build_memo(scenario, pack), scenario, companies, BlindOptions()).memo
        counts = memo_residue(memo).counts
        for kind in totals:
            totals[kind] += counts[kind]
        texts += sum(it.unit == "text" for it in memo.items)
    assert texts > 1000  # the texts are there, binned
    assert totals == {"fiscal_label": 0, "percent": 0, "fused_name": 0}
