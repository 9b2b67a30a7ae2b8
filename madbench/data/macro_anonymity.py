"""How well a blind memo's macro block dates its quarter: its k-anonymity among the quarters of a data pack.

The macro block (the memo's macro section, as its text shows it: ``madbench.data.memo.macro_block``) is the same
for every scenario of a quarter, so it is the part of a blind memo that can date the quarter on its own. Its
k-anonymity (Sweeney 2002, the whole block as the quasi-identifier) is the number of quarters of a reference window
whose blind block is identical to it: k = 1 names the quarter, k = 4 leaves four to choose from. The reference
window is the market pack's 2018Q1-2025Q4 (``REFERENCE``), clipped to the quarters the pack can memo.

A large k is necessary, not sufficient: the quarters that share a block may be consecutive (the default
``macro: regime`` blocks are), which still dates the memo to their span, and the rest of the memo (returns,
volatilities, texts) can date it too (`madbench leakage audit --model` measures that with a model).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from madbench.data.blind import BlindOptions, blind_macro
from madbench.data.market.calendar import Quarter
from madbench.data.market.pack import Pack
from madbench.data.memo import Memo, macro_block, macro_section

#: The quarters a block is compared with: those of the market pack's FRED series the paper's scenarios span.
REFERENCE = ("2018Q1", "2025Q4")


def k_anonymity(blocks: Mapping[str, str]) -> dict[str, int]:
    """k(q) = |{q' in Q : block(q') = block(q)}| for each quarter q of ``blocks`` (quarter -> block), q itself counted."""
    counts = Counter(blocks.values())
    return {q: counts[b] for q, b in blocks.items()}


def k_among(block: str, quarter: str, reference: Mapping[str, str]) -> int:
    """k of one memo's ``block`` (invest ``quarter``) among ``reference`` (quarter -> block): the reference quarters
    with the same block, its own quarter counted once whether or not the window holds it."""
    return 1 + sum(b == block for q, b in reference.items() if q != quarter)


def reference_quarters(pack: Pack, first: str = REFERENCE[0], last: str = REFERENCE[1]) -> list[Quarter]:
    """The quarters from ``first`` to ``last`` the pack can build a memo for (its prices reach their as-of dates)."""
    q, end, out = Quarter.parse(first), Quarter.parse(last), []
    while q.start <= end.start:
        if pack.calendar.first < q.start and q.start <= pack.calendar.dates[-1]:
            out.append(q)
        q = q.next()
    return out


def blind_macro_block(pack: Pack, quarter: Quarter, options: BlindOptions) -> str:
    """The macro block a blind memo for ``quarter`` shows (the same for every scenario of the quarter)."""
    section = macro_section(pack, quarter)
    as_of = pack.calendar.as_of(quarter)
    memo = Memo("macro", "Q0", as_of, [], [blind_macro(section, as_of, quarter, options)], blind=True)
    return macro_block(memo)


def reference_blocks(pack: Pack, options: BlindOptions, first: str = REFERENCE[0],
                     last: str = REFERENCE[1]) -> dict[str, str]:
    """Quarter -> its blind macro block, for every reference quarter the pack covers."""
    return {str(q): blind_macro_block(pack, q, options) for q in reference_quarters(pack, first, last)}
