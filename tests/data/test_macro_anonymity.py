"""k-anonymity of a blind memo's macro block (madbench.data.macro_anonymity): how many quarters share it."""

from __future__ import annotations

from madbench.data.blind import BlindOptions, blind_memo, pack_companies
from madbench.data.macro_anonymity import k_among, k_anonymity, reference_blocks, reference_quarters
from madbench.data.market.calendar import Quarter
from madbench.data.market.pack import load_pack
from madbench.data.memo import build_memo, macro_block
from tests.conftest import SHARED_MARKET, requires_shared
from tests.data.test_blind import blind_world


def test_k_counts_the_quarters_with_the_same_block():
    blocks = {"2020Q1": "a", "2020Q2": "a", "2020Q3": "b", "2020Q4": "a"}
    assert k_anonymity(blocks) == {"2020Q1": 3, "2020Q2": 3, "2020Q3": 1, "2020Q4": 3}
    assert k_among("a", "2020Q2", blocks) == 3  # its own quarter counted once
    assert k_among("a", "2019Q4", blocks) == 4 and k_among("c", "2019Q4", blocks) == 1  # outside the window: itself too


def test_the_reference_block_is_the_block_a_blind_memo_shows(make_pack):
    pack, scenario = blind_world(make_pack)
    for macro in ("regime", "bucket", "exact"):
        options = BlindOptions(macro=macro)
        memo = blind_memo(build_memo(scenario, pack), scenario, pack_companies(pack.universe), options).memo
        blocks = reference_blocks(pack, options)
        assert scenario.invest_quarter in blocks and blocks[scenario.invest_quarter] == macro_block(memo)
        assert macro_block(memo) in memo.text
    first = reference_quarters(pack)[0]
    assert pack.calendar.first < first.start and pack.calendar.first >= first.previous().start  # clipped to the pack


@requires_shared
def test_the_default_blind_macro_block_is_shared_by_four_quarters_of_the_market_pack():
    """The referee's finding and its fix, on the real FRED series: bucketed levels with directions and release lags
    date each of 2018Q1-2025Q4 on their own; the regime bands leave every quarter at least three look-alikes."""
    pack = load_pack(SHARED_MARKET)
    assert [str(q) for q in reference_quarters(pack)][::31] == ["2018Q1", "2025Q4"]
    bucket = k_anonymity(reference_blocks(pack, BlindOptions(macro="bucket")))
    assert min(bucket.values()) == 1 and bucket["2022Q4"] == 1
    default = k_anonymity(reference_blocks(pack, BlindOptions()))
    assert len(default) == 32 and min(default.values()) >= 4, {q: k for q, k in default.items() if k < 4}
    # and the memo still tells regimes apart: not one block for all quarters
    assert len(set(reference_blocks(pack, BlindOptions()).values())) >= 4
    assert Quarter.parse("2022Q4") in reference_quarters(pack)
