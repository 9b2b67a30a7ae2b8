"""Percentages in blind texts: the bin a figure falls in, not the figure.

"Gross margin of 71.5%", "cloud services growth of 45%", "revenue increased 32%": an exact relative figure of a
filing or a call is looked up as surely as an absolute one (``madbench.data.amounts``), and a model that read the
filing may recall whose it is. A blind memo's evidence texts show each percentage, percentage-point and basis-point
figure as the bin it falls in, as amounts show their decade:

- bins follow the 1–2.5–5 series, each decade split at 2.5 and 5: ..., [0.5–1], [1–2.5], [2.5–5], [5–10],
  [10–25], [25–50], [50–100], [100–250], ...; a figure on an edge opens the bin above it (10% is [10–25%]), zero is
  [0]; the series is scale-free, so basis points bin alike ("230 basis points" -> "[100–250] basis points");
- a sign stays outside the bin (``-12%`` -> ``−[10–25%]``, ``+3.1%`` -> ``+[2.5–5%]``), and so do the words around
  it ("declined 12%" -> "declined [10–25%]"): a decline stays a decline;
- a range spans the bins of its ends ("3-5%" -> "[2.5–5%]": an upper end on an edge closes the bin below it;
  "40% to 60%" -> "[25–100%]");
- "%" stays in the bracket (``[25–50%]``); a unit in words follows it (``[10–25] percent``).

Only the evidence's own words are binned (filing and earnings-call facts): madbench's features ("60-day return:
-13.0 percent"), its macro bands ("2.5 percent or more") and the thresholds of its prompts ("holdings above 10%")
keep their figures. A bin is not read as a figure again, so the pass is idempotent; ``residue_percents`` finds what
it would still change (``madbench.data.residue``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from decimal import Decimal, InvalidOperation

MINUS = "\u2212"
#: The steps of each decade: a bin is [s·10^e, next step) (the last step's next is 10·10^e).
STEPS = (Decimal(1), Decimal("2.5"), Decimal(5))
_NUM = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
_UNIT = r"(?:\s?%|\s?-?(?:percent|per cent|pct)\b|\s?-?(?:percentage points?|basis points?)\b|\s?(?:bps|bp)\b)"
_TO = r"\s?(?:-|\u2013|\u2014|to)\s?"
#: No figure right after a word, another figure or a bin's bracket or dash (a bin is not read again).
_FREE = r"(?<![\w.,\[\u2013])"
_PERCENT = re.compile(
    rf"{_FREE}(?P<sign>[+\u2212]|-(?!\s))?(?P<a>{_NUM})(?:(?P<ua>{_UNIT})?(?P<to>{_TO})[+\-\u2212]?(?P<b>{_NUM}))?"
    rf"(?P<u>{_UNIT})(?![\w%])")


def _value(number: str) -> Decimal:
    try:
        return Decimal(number.replace(",", ""))
    except InvalidOperation:  # the pattern admits only digits, commas and one point
        raise ValueError(f"not a figure: {number!r}") from None


def _edges(x: Decimal) -> tuple[Decimal, Decimal]:
    """The bin [lo, hi) of x > 0 in the 1–2.5–5 series (exact: ``Decimal.adjusted``, no float rounding at an edge)."""
    e = x.adjusted()
    mantissa = x.scaleb(-e)
    i = max(k for k, s in enumerate(STEPS) if mantissa >= s)
    hi = STEPS[i + 1] if i + 1 < len(STEPS) else Decimal(10)
    return STEPS[i].scaleb(e), hi.scaleb(e)


def _figure(x: Decimal) -> str:
    return f"{x.normalize():f}"


def percent_bin(lo: Decimal, hi: Decimal | None = None) -> str:
    """The bin of a figure, or of the range lo..hi, as "[lo–hi]" (no unit): "[10–25]"."""
    hi = lo if hi is None else hi
    lo, hi = min(lo, hi), max(lo, hi)
    if hi == 0:
        return "[0]"
    low = _edges(lo)[0] if lo > 0 else Decimal(0)
    bottom, top = _edges(hi)
    high = hi if hi > lo and hi == bottom else top  # an upper end on an edge closes the bin below it
    return f"[{_figure(low)}\u2013{_figure(high)}]"


def _binned(m: re.Match[str]) -> str:
    a = _value(m.group("a"))
    b = _value(m.group("b")) if m.group("b") else None
    bin_ = percent_bin(a, b)
    sign = {"-": MINUS, MINUS: MINUS, "+": "+"}.get(m.group("sign") or "", "")
    unit = m.group("u").strip().lstrip("-")
    return f"{sign}{bin_[:-1]}%]" if unit == "%" else f"{sign}{bin_} {unit}"


def bucket_percents(text: str) -> str:
    """``text`` with every percentage, percentage-point and basis-point figure as its bin (see the module)."""
    return _PERCENT.sub(_binned, text)


def residue_percents(text: str) -> Iterator[str]:
    """The exact figures ``bucket_percents`` would still change in ``text`` (each as written)."""
    for m in _PERCENT.finditer(text):
        yield m.group(0).strip()
