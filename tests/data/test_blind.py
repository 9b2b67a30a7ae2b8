"""Blind memos (madbench.data.blind): pseudonyms, redacted texts, relative dates, rebased prices.

``leaks`` is the one definition of "something a model could recall from" that these tests and the blind-run tests
(tests/runner/test_blind_runs.py) search for: a ticker of the universe as a word, a company's name in any case
(``pack_names``: every stock of the pack, its aliases, the well-known companies outside it), or a calendar date (an
ISO date, a year, a month name with a year, a quarter label).
"""

from __future__ import annotations

import re

import pandas as pd
import pytest

from madbench.data.blind import (
    ALIASES,
    MINUS,
    OTHER_COMPANIES,
    OTHER_COMPANY,
    UNIVERSE_ONLY_ALIASES,
    Anchor,
    BlindOptions,
    Company,
    Redactor,
    blind_memo,
    name_forms,
    pack_companies,
    pseudonym,
    pseudonyms,
)
from madbench.data.market.calendar import Quarter
from madbench.data.market.pack import load_pack
from madbench.data.memo import build_memo
from madbench.data.scenario import Scenario, load_scenarios
from tests.conftest import SHARED_MARKET, SHARED_PAPER, requires_shared

_MONTH = (r"(?:January|February|March|April|May|June|July|August|September|October|November|December"
          r"|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)")
DATE = re.compile(
    r"(?<![\d.])(?:19|20)\d\d(?!\d)"  # a year, an ISO date's year, a YYYY-MM month (not a decimal's digits)
    rf"|\b{_MONTH}\.? (?:\d{{1,2}},? )?(?:\d{{4}}|'\d\d)\b"  # April 2021, Apr. 28, 2021, Dec '21
    r"|\b\d{4} ?-?Q[1-4]\b|\bQ[1-4] ?(?:\d{4}|'\d\d)\b|\bFY ?'?\d\d\b")  # 2023Q2, 2023-Q2, Q2 2023, Q3'21, FY21


def leaks(text: str, tickers: list[str], names: list[str]) -> list[str]:
    """Every ticker (as a word: not inside ME&T, not an evidence field such as -DE), name (in any case: Nvidia is
    NVIDIA; as a word or the head of a compound such as AppleCare) and calendar date in ``text``."""
    found = DATE.findall(text)
    for t in tickers:
        found += re.findall(r"(?<![A-Za-z0-9_&-])" + re.escape(t) + r"(?![A-Za-z0-9_&])", text)
    for n in names:
        found += re.findall(r"(?<![A-Za-z0-9_])(?i:" + re.escape(n) + r")(?![a-z0-9_])", text)
    return found


def pack_names(companies: list[Company], universe: list[str]) -> list[str]:
    """Every name a text may give a company: each stock of the pack by its name's forms and its ``ALIASES`` (one of
    ``UNIVERSE_ONLY_ALIASES``, such as the Delta of the COVID-19 variant, only for a stock of ``universe``), and each
    of ``OTHER_COMPANIES``."""
    names = {f for n in OTHER_COMPANIES for f in name_forms(n)}
    for c in companies:
        aliases = [a for a in ALIASES.get(c.ticker, ()) if c.ticker in universe or a not in UNIVERSE_ONLY_ALIASES]
        names |= {f for n in (c.name, *aliases) for f in name_forms(n)}
    return sorted(names)


# -- a self-made pack with company names and evidence texts --------------------------------------------------

NAMES = {"AAA": "Acme Robotics", "BBB": "Borealis Energy", "CCC": "Cobalt Financial", "DDD": "Dynamo Health",
         "EEE": "Zenith Motors"}
UNIVERSE = ["AAA", "BBB", "CCC", "DDD"]  # EEE is in the pack, not in the scenarios


def _texts(tables):
    tables["universe"]["name"] = tables["universe"]["ticker"].map(NAMES).fillna(tables["universe"]["name"])
    tables["filings"] = pd.DataFrame([{
        "ticker": t, "form": "10-Q", "filing_date": "2021-05-03", "fiscal_period": "2021-Q1", "period_type": "quarterly",
        "operating_state": f"{NAMES[t]} grew revenue 12% in Q1 2021 against Zenith Motors; {t} shares rose.",
        "material_events": f"On April 28, 2021, {NAMES[t]}'s board raised the dividend (paid 2021-04-15).",
        "forward_outlook": "Management expects fiscal 2021 growth to continue into Q3'21 and through March 2022.",
    } for t in UNIVERSE])
    tables["earnings_calls"] = pd.DataFrame([{
        "ticker": t, "quarter": "2021Q1", "summary": f"{NAMES[t]} ({t}) reported Q1 FY2021 revenue of $1.2 billion.",
        "management_outlook": "The company guides for FY21 margins above 2020 levels.", "mean_sentiment": 0.2 + 0.1 * i,
        "sentiment_volatility": 0.5} for i, t in enumerate(UNIVERSE)])


def blind_world(make_pack):
    """A pack of five named stocks with filings and earnings calls, and a scenario of four of them."""
    pack = load_pack(make_pack(tickers=(*UNIVERSE, "EEE"), edit=_texts))
    scenario = Scenario(id="syn-2021Q3", invest_quarter="2021Q3", tickers=UNIVERSE, constraints={"max_weight": 0.6, "min_holdings": 2})
    return pack, scenario


# -- pseudonyms ---------------------------------------------------------------------------------------------

def test_pseudonyms_are_stable_per_universe_shuffled_and_bijective():
    a = pseudonyms(["MSFT", "AAPL", "NVDA", "AMD"])
    assert a == pseudonyms(["AMD", "NVDA", "AAPL", "MSFT"])  # the universe decides, not its order
    assert sorted(a.values()) == ["ASSET_A", "ASSET_B", "ASSET_C", "ASSET_D"]
    universes = [[f"T{i}{j}" for j in range(5)] for i in range(20)]
    alphabetical = sum(sorted(u, key=pseudonyms(u).get) == sorted(u) for u in universes)
    assert alphabetical <= 2  # 1 in 120 by chance: the letters do not follow the tickers' order
    assert [pseudonym(i) for i in (0, 25, 26, 27, 701, 702)] == ["ASSET_A", "ASSET_Z", "ASSET_AA", "ASSET_AB", "ASSET_ZZ", "ASSET_AAA"]
    assert len(set(pseudonyms([f"X{i}" for i in range(60)]).values())) == 60


# -- texts ----------------------------------------------------------------------------------------------------

def redactor():
    companies = [Company("AAPL", "Apple"), Company("T", "AT&T"), Company("META", "Meta Platforms (FB before 2022-06)"),
                 Company("NVDA", "NVIDIA"), Company("DAL", "Delta Air Lines"), Company("JPM", "JPMorgan Chase"),
                 Company("GE", "GE Aerospace (General Electric)")]
    return Redactor({"AAPL": "ASSET_A", "T": "ASSET_B", "META": "ASSET_C"}, companies,
                    Anchor(pd.Timestamp("2021-12-31"), Quarter(2022, 1)), OTHER_COMPANIES)


@pytest.mark.parametrize("text, expected", [
    ("Apple's iPhone, AppleCare and AAPL", "ASSET_A's iPhone, ASSET_ACare and ASSET_A"),
    ("TV and T", "TV and ASSET_B"),
    ("AT&T and T-Mobile; ME&T margins", f"ASSET_B and {OTHER_COMPANY}; ME&T margins"),  # ME&T is not AT&T's ticker
    ("AT&T's T-series and T", "ASSET_B's ASSET_B-series and ASSET_B"),
    ("Facebook, Meta Platforms and FB", "ASSET_C, ASSET_C and ASSET_C"),
    ("FACEBOOK, meta platforms and META's metadata", "ASSET_C, ASSET_C and ASSET_C's metadata"),  # names in any case
    ("NVIDIA competes; Delta Air Lines flies; the Delta variant", f"{OTHER_COMPANY} competes; {OTHER_COMPANY} flies; the Delta variant"),
    # another stock of the pack by any case of its name and by its aliases; a company outside the pack by name
    ("competition from Intel's discrete GPU expansion and Nvidia's ARM CPU offerings",
     f"competition from {OTHER_COMPANY}'s discrete GPU expansion and {OTHER_COMPANY}'s ARM CPU offerings"),
    ("nvidia, Chase, J.P. Morgan and General Electric", f"{OTHER_COMPANY}, {OTHER_COMPANY}, {OTHER_COMPANY} and {OTHER_COMPANY}"),
    ("intellectual property, a gem and ge", "intellectual property, a gem and ge"),  # words, and GE only as written
    ("On April 28, 2021 and 2021-12-31 and 2022-01-03", f"On t{MINUS}247d and t and t+3d"),
    ("in Q4 FY2021, Q2 fiscal 2022 and FY23", "in Q4 FY0, Q2 FY+1 and FY+2"),
    # the calls' fiscal quarters keep their number here (``calendar_positions`` places them); the filings table's
    # "fiscal period 2022-Q1" and a bare "2021-Q3" are calendar quarters
    ("fiscal 2021Q4; fiscal Q2 2022; fiscal period 2022-Q1; 2021-Q3", f"fiscal Q4 FY0; fiscal Q2 FY+1; period Q0; Q{MINUS}2"),
    ("Q3 2021, Q4'21, 2021Q2 and 2022Q1", f"Q{MINUS}2, Q{MINUS}1, Q{MINUS}3 and Q0"),
    ("March 2021, 2021-11 and Sept. 2020", f"M{MINUS}9, M{MINUS}1 and M{MINUS}15"),
    ("between 2019 and 2030; 2021.", f"between Y{MINUS}2 and Y+9; Y0."),
    # numbers, not years (an amount shows its order of magnitude)
    ("a score of 0.2019, $2,023 and 12020 units", "a score of 0.2019, $[1\u201310 thousand] and 12020 units"),
])
def test_texts_lose_names_tickers_and_calendar_dates(text, expected):
    r = redactor()
    assert r(text) == expected
    assert r(expected) == expected  # idempotent: a blind text passes through unchanged


def test_name_forms_cover_the_packs_spellings():
    assert set(name_forms("Meta Platforms (FB before 2022-06)")) == {"Meta Platforms", "FB"}
    assert set(name_forms("GE Aerospace (General Electric)")) >= {"GE Aerospace", "General Electric"}
    assert set(name_forms("Johnson & Johnson")) >= {"Johnson & Johnson", "Johnson and Johnson"}
    assert "NIKE" in name_forms("Nike") and name_forms("Uber Technologies (IPO 2019-05-10)") == ["Uber Technologies"]
    assert name_forms("Alphabet (Class A)") == ["ALPHABET", "Alphabet"]


# -- the memo -------------------------------------------------------------------------------------------------

def test_blind_memo_keeps_the_numbers_and_drops_the_names(make_pack):
    pack, scenario = blind_world(make_pack)
    named = build_memo(scenario, pack)
    b = blind_memo(named, scenario, pack_companies(pack.universe), BlindOptions())
    memo, m = b.memo, b.mapping
    assert memo.tickers == sorted(m.values()) and set(m) == set(UNIVERSE)
    assert leaks(memo.text + memo.to_json(), UNIVERSE + ["EEE"], pack_names(pack_companies(pack.universe), UNIVERSE)) == []
    before, after = {it.id: it for it in named.items}, {it.id: it for it in memo.items}
    assert len(before) == len(after) and set(after) == {
        (i if i.startswith("L1-") else m[i.split("-")[0]] + i[len(i.split("-")[0]):]) for i in before}
    for t, p in m.items():
        assert after[f"{p}-PX"].value == pytest.approx(100.0)
        ratio = before[f"{t}-SMA200"].value / before[f"{t}-PX"].value
        assert after[f"{p}-SMA200"].value / 100.0 == pytest.approx(ratio)  # rebased, not changed
        for key in ("RET60", "VOL20", "BETA", "MOM200", "SENT"):
            assert after[f"{p}-{key}"].value == before[f"{t}-{key}"].value
        assert after[f"{p}-F1"].value.startswith(f"{p} grew revenue [10\u201325%] in Q{MINUS}2 against {OTHER_COMPANY}; {p} shares")
    assert sum(after[f"{p}-ADVOL"].value for p in m.values()) == pytest.approx(100.0)
    # the default macro: three bands, the rest withheld, no release date (its distance to t follows the weekday)
    assert after["L1-CPI"].value == ("4 percent or more" if before["L1-CPI"].value >= 4 else "below 4 percent")
    assert after["L1-FF"].value in ("below 2.5 percent", "2.5 percent or more") and after["L1-CURVE"].value.count("inverted")
    assert after["L1-10Y"].value is None and after["L1-10Y"].note.startswith("withheld") and after["L1-CPI"].as_of is None
    assert "[L1-CPI] CPI inflation, year on year: " in memo.text and "regime bands" in memo.text
    exact = blind_memo(named, scenario, pack_companies(pack.universe), BlindOptions(macro="exact")).memo
    assert {it.id: it for it in exact.items}["L1-10Y"].value == before["L1-10Y"].value  # only when asked
    assert "TICKER ASSET_A (sector: " in memo.text and "invest quarter Q0" in memo.text
    assert memo.text == blind_memo(named, scenario, pack_companies(pack.universe), BlindOptions()).memo.text  # deterministic
    assert b.to_real({p: 0.25 for p in m.values()}) == {t: 0.25 for t in UNIVERSE}  # in the scenario's order
    assert b.scenario.tickers == memo.tickers and b.scenario.invest_quarter == scenario.invest_quarter


def test_options_drop_sectors_and_texts_and_bucket_the_macro(make_pack):
    pack, scenario = blind_world(make_pack)
    named = build_memo(scenario, pack)
    memo = blind_memo(named, scenario, pack_companies(pack.universe),
                      BlindOptions(sectors="drop", macro="bucket", text="drop")).memo
    assert "(sector:" not in memo.text and not [it for it in memo.items if it.unit == "text"]
    items, before = {it.id: it for it in memo.items}, {it.id: it for it in named.items}
    assert items["L1-10Y"].value == round(before["L1-10Y"].value) and items["L1-VIX"].value % 5 == 0
    assert "bps" not in (items["L1-10Y"].note or "") and "rounded to the nearest 1" in items["L1-10Y"].note
    assert "texts are left out" in memo.text and "rounded to a coarse grid" in memo.text


def _shared_pack():
    if "pack" not in _PACK:
        _PACK["pack"] = load_pack(SHARED_MARKET, [SHARED_PAPER])
    return _PACK["pack"]


_PACK = {}
_PAPER_TEXTS = pytest.mark.skipif(not (SHARED_PAPER / "filings.parquet").exists(), reason="the paper's evidence tables are absent")


@requires_shared
@_PAPER_TEXTS
def test_no_name_ticker_or_date_survives_in_blind_memos_of_the_paper_scenarios():
    """All texts of the pack's evidence (filings, calls, news) for the paper's scenarios of every size."""
    pack = _shared_pack()
    companies = pack_companies(pack.universe)
    wanted = ["2022Q4_tech", "2025Q2", "2023Q1_rand9_2aba5c03", "2021Q4_rand12_2", "2024Q1_rand3_2"]
    scenarios = {s.id: s for s in load_scenarios(SHARED_PAPER / "scenarios_35.yaml")}
    for sid in wanted:
        scenario = scenarios[sid]
        memo = blind_memo(build_memo(scenario, pack), scenario, companies, BlindOptions()).memo
        assert leaks(memo.text + memo.to_json(), scenario.tickers, pack_names(companies, scenario.tickers)) == [], sid
        assert sum(it.unit == "text" for it in memo.items) > 20, sid  # the texts are there, redacted


@requires_shared
@_PAPER_TEXTS
def test_a_rival_named_in_another_case_or_outside_the_pack_is_redacted():
    """AMD, LLY and UNH in 2024Q1: AMD's filing names its rivals "Intel" (not in the pack) and "Nvidia" (the pack's
    NVIDIA, in another case); either would tell a model which company ASSET_A is."""
    pack = _shared_pack()
    scenario = {s.id: s for s in load_scenarios(SHARED_PAPER / "scenarios_35.yaml")}["2024Q1_rand3_2"]
    named = build_memo(scenario, pack)
    assert "competition from Intel's discrete GPU expansion and Nvidia's ARM CPU" in named.text
    b = blind_memo(named, scenario, pack_companies(pack.universe), BlindOptions())
    amd = b.mapping["AMD"]
    word = r"(?:\w+|\[TERM_\d+\])"  # a lower-case word, or its mask where it is not generic
    assert re.search(rf"{amd} faces {word} competition from {OTHER_COMPANY}'s {word} GPU {word} and "
                     rf"{OTHER_COMPANY}'s \[(?:PRODUCT|ENTITY)_\d+\] CPU", b.memo.text)  # ARM: a name the vocabulary lacks
    assert leaks(b.memo.text, scenario.tickers, ["Nvidia", "Intel", "Lilly", "UnitedHealth", "Advanced Micro Devices"]) == []
