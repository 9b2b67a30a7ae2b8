"""Absolute amounts in blind texts: the decade an amount falls in, not the amount.

"$394.3 billion" of revenue is one company's fiscal year, "41.9 million shares" repurchased one company's quarter,
"12,000 employees" one company's headcount: an exact absolute figure is looked up as surely as a name. A blind text
keeps its relative figures (percentages, ratios, growth rates, margins, basis points, multiples) and shows each
absolute one as its order of magnitude, in words a reader parses at once:

- currency amounts (``$``, ``US$``, ``C$``, ``€``, ``£``, ``¥``, ``₹``, a currency code before the figure, or a
  currency word after it): "$394.3 billion" -> "$[100–1000 billion]", "$0.23 per share" -> "$[0.1–1] per share",
  "EUR 500 million" -> "EUR [100–1000 million]", a range "$12.9-13.1 billion" -> "$[10–100 billion]";
- large counts: a figure with a scale word ("41.9 million shares" -> "[10–100 million] shares") or written with
  thousands separators ("12,000 employees" -> "[10–100 thousand] employees").

The decade of x > 0 is [10^e, 10^(e+1)) with e = floor(log10 x), named with the largest scale word (thousand,
million, billion, trillion) not above it. Zero stays "[0]". A bucket is not read as an amount again, so the pass is
idempotent; ``residue_amounts`` finds what it would still change (``madbench.data.residue``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from decimal import Decimal, InvalidOperation

_SCALES = {"thousand": 3, "million": 6, "billion": 9, "trillion": 12, "k": 3, "K": 3, "m": 6, "M": 6, "mm": 6,
           "MM": 6, "mn": 6, "b": 9, "B": 9, "bn": 9, "t": 12, "T": 12, "tn": 12}
_NAMES = ((12, "trillion"), (9, "billion"), (6, "million"), (3, "thousand"))
# a figure: 1,234,567.89 or 1234.5 (a comma not followed by three digits ends it: "$5, and")
_NUM = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
# a scale word after a space, or an abbreviation written onto the figure ("$2.5B", "$3bn"; not the M of "$5 M&A")
_SCALE = r"(?:\s?(?:thousand|million|billion|trillion)\b|(?:bn|mn|tn|MM|mm|[KkMmBbTt])(?![A-Za-z0-9&]))"
_SYMBOL = r"(?:US|HK|NT|[ACRS])?[$\u20ac\u00a3\u00a5\u20b9]"
_CODE = r"\b(?:USD|EUR|GBP|JPY|CNY|RMB|INR|CAD|AUD|CHF)"
_WORD = r"(?:dollars|euros|pounds|yen|USD|EUR|GBP|JPY|CNY|RMB)\b"
_TO = r"\s?(?:-|\u2013|\u2014|to)\s?"
#: No figure right after another figure, a bucket's bracket or dash, or a minus (a relative date, t−20d).
_FREE = r"(?<![\d.,\[\u2013\u2212\w-])"

_CURRENCY = re.compile(
    rf"(?P<cur>{_SYMBOL}|{_CODE}\s?)\s?(?P<a>{_NUM})(?P<sa>{_SCALE})?"
    rf"(?:(?P<to>{_TO})(?:{_SYMBOL}|{_CODE}\s?)?\s?(?P<b>{_NUM})(?P<sb>{_SCALE})?)?(?!\s?%|\d)")
_CURRENCY_AFTER = re.compile(rf"{_FREE}(?P<a>{_NUM})(?P<sa>{_SCALE})?\s?(?P<word>{_WORD})")
_COUNT = re.compile(
    rf"{_FREE}(?P<a>{_NUM})(?P<sa>\s?(?:thousand|million|billion|trillion)\b)"
    rf"(?:(?P<to>{_TO})(?P<b>{_NUM})(?P<sb>\s?(?:thousand|million|billion|trillion)\b)?)?"
    rf"|{_FREE}(?P<g>\d{{1,3}}(?:,\d{{3}})+(?:\.\d+)?)(?![\d%]|\s?%|\s?percent)")


def _value(number: str, scale: str | None) -> Decimal:
    try:
        value = Decimal(number.replace(",", ""))
    except InvalidOperation:  # the patterns admit only digits, commas and one point
        raise ValueError(f"not a figure: {number!r}") from None
    return value.scaleb(_SCALES[scale.strip()]) if scale else value


def _figure(e: int) -> str:
    """10^e written out: 1000, 1, 0.01."""
    return str(10 ** e) if e >= 0 else f"{Decimal(1).scaleb(e):f}"


def _range(lo: Decimal, hi: Decimal) -> str:
    """The decades from lo's to hi's, [10^e0–10^e1] with e0 = floor(log10 lo) and e1 = floor(log10 hi) + 1 (exact:
    ``Decimal.adjusted``, no float rounding at 1000), in the scale word of the lower end: "[100–1000 billion]"."""
    if hi <= 0:
        return "[0]"
    e0 = (lo if lo > 0 else hi).adjusted()
    e1 = hi.adjusted() + 1
    exp, name = next(((x, n) for x, n in _NAMES if e0 >= x), (0, ""))
    return f"[{_figure(e0 - exp)}\u2013{_figure(e1 - exp)}{' ' + name if name else ''}]"


def _pair(m: re.Match[str]) -> tuple[Decimal, Decimal]:
    """The figure a match names, or its range (a scale written once applies to both ends: "$12.9-13.1 billion")."""
    sb = m.groupdict().get("sb")
    sa = m.group("sa") or (sb if m.groupdict().get("b") else None)
    lo = _value(m.group("a"), sa)
    hi = _value(m.group("b"), sb or m.group("sa")) if m.groupdict().get("b") else lo
    return min(lo, hi), max(lo, hi)


def _currency(m: re.Match[str]) -> str:
    lo, hi = _pair(m)
    return m.group("cur") + _range(lo, hi)


def _currency_after(m: re.Match[str]) -> str:
    lo, hi = _pair(m)
    return f"{_range(lo, hi)} {m.group('word')}"


def _count(m: re.Match[str]) -> str:
    if m.group("g"):
        v = _value(m.group("g"), None)
        return _range(v, v)
    lo, hi = _pair(m)
    return _range(lo, hi)


def bucket_amounts(text: str) -> str:
    """``text`` with every currency amount and large count as its order of magnitude (see the module)."""
    text = _CURRENCY.sub(_currency, text)
    text = _CURRENCY_AFTER.sub(_currency_after, text)
    return _COUNT.sub(_count, text)


def residue_amounts(text: str) -> Iterator[str]:
    """The exact amounts ``bucket_amounts`` would still change in ``text`` (each as written)."""
    for pattern in (_CURRENCY, _CURRENCY_AFTER, _COUNT):
        for m in pattern.finditer(text):
            yield m.group(0).strip()
