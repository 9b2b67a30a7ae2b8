"""The residue of a blind memo: what is left in it that could still identify the company or date the quarter.

The deterministic half of ``madbench leakage audit`` (offline, no model): per blind memo, the count and a few
examples of

- ``name``: tokens with a capital letter that the blind rules left (not a pseudonym, a mask, a relative date, or
  a generic term of ``configs/blind_vocabulary.yaml``) in the evidence's own words: the texts, their notes and the
  section headers (labels and units are madbench's own, the same for every memo);
- ``year``: numbers that read as calendar years (1950-2049 standing alone, not an amount, a decimal or a percent),
  anywhere in the memo's text;
- ``month``: month names (and so month-day dates), anywhere in the memo's text;
- ``exact_level``: macro values shown exactly as published (``blind.macro: exact``), each a date on its own;
- ``term``: lower-case words of the texts outside the generic vocabulary ("bitcoin", "metaverse", a word new
  evidence brings): the company's own vocabulary or an era's;
- ``amount``: exact absolute amounts in the evidence's words (currency amounts, counts with a scale word or
  thousands separators: "$394.3 billion", "41.9 million shares"), where an order of magnitude should stand;
- ``fiscal_label``: fiscal quarters named by their number ("Q2 FY+1", "fiscal Q4", "the fourth quarter of FY0",
  "H1 FY+1") in the texts, notes, headers and periods, where a calendar position should stand (``Q−1``). Every
  one counts, on a calendar year or not: the audit cannot tell an issuer's fiscal year from the memo, and one of an
  off-calendar year says where that year ends;
- ``percent``: exact percentages, percentage points and basis points in the evidence's texts ("71.5%", "45
  percent", "230 basis points"), where a bin should stand (``[50–100%]``: ``madbench.data.percents``);
- ``fused_name``: a pseudonym right before a number ("ASSET_A 365", what followed "Microsoft"), anywhere in the
  evidence's words.

Target: zero of each. The rules that mask are in ``madbench.data.neuter``; this pass reads their output with the
same vocabulary but its own patterns, so a gap in one shows in the other.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from pydantic import BaseModel

from madbench.data.amounts import residue_amounts
from madbench.data.blind import MACRO_STEPS
from madbench.data.memo import Memo
from madbench.data.neuter import MASK, PROTECTED, is_lower_word, load_vocabulary

RESIDUE_KINDS = ("name", "year", "month", "exact_level", "term", "amount", "fiscal_label", "percent", "fused_name")
EXAMPLES = 5
_YEAR = re.compile(r"(?<![\d.,$\u20ac\u00a3\u2212+-])(?:19[5-9]\d|20[0-4]\d)(?![\d%]|[.,]\d|-[A-Z])")
_MONTH = re.compile(r"\b(?:January|February|March|April|May|June|July|August|September|October|November|December|"
                    r"Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept?|Oct|Nov|Dec)\b\.?")
_WORD = re.compile(r"\[[A-Z]+(?:_\d+)?\]|[A-Za-z0-9_]+(?:[&'\u2019.\-/\u2212+][A-Za-z0-9_]+)*")
# any script's letters: an accented word ("zürich") is one word, not a "z" and a "rich"
_ANY_WORD = re.compile(r"\[[A-Z]+(?:_\d+)?\]|\w+(?:[&'\u2019.\-/\u2212+]\w+)*")
_FY = r"FY(?:0|[+\u2212]\d+)"
_FISCAL_LABEL = re.compile(rf"\bQ[1-4][ -](?:of )?{_FY}\b|\bfiscal (?:period )?Q[1-4]\b|\bH[12] (?:of )?{_FY}\b"
                           rf"|\b(?:first|second|third|fourth)[ -](?:fiscal )?quarter,? (?:of )?(?:the )?{_FY}\b"
                           r"|\bfiscal (?:first|second|third|fourth)[ -]quarter\b", re.IGNORECASE)
# a figure not inside a bin ("[10–25%]", "[0%]") and not the tail of a word or of another figure
_PERCENT = re.compile(r"(?<![\w.,\[\u2013])\d[\d,]*(?:\.\d+)?\s?-?"
                      r"(?:%|percent\b|per cent\b|pct\b|percentage points?\b|basis points?\b|bps\b)", re.IGNORECASE)
_FUSED = re.compile(r"\bASSET_[A-Z]+\s+\d[\w.]*")
_HEAD = re.compile(r"(?:^|[.!?:;]\s*|[\(\"\u201c]\s*|\s[-\u2013\u2014]\s*)$")


class MemoResidue(BaseModel):
    """One blind memo's residue: counts per kind and up to ``EXAMPLES`` examples of each."""

    memo: str
    counts: dict[str, int]
    examples: dict[str, list[str]]

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def _strings(memo: Memo) -> Iterator[str]:
    for sec in memo.sections:
        if sec.header:
            yield sec.header
        for it in sec.items:
            yield from (s for s in (it.value, it.note) if isinstance(s, str))


def _names(text: str) -> Iterator[str]:
    vocabulary = load_vocabulary()
    for m in _WORD.finditer(text):
        word = re.sub(r"['\u2019]s$", "", m.group(0))
        if not any(c.isupper() for c in word) or MASK.fullmatch(word) or PROTECTED.fullmatch(word) or _MONTH.fullmatch(word):
            continue
        if not vocabulary.allows(word, _HEAD.search(text[:m.start()]) is not None):
            yield word


def _texts(memo: Memo) -> Iterator[str]:
    """The evidence's own words: the filing and call facts (their notes and headers are madbench's)."""
    for it in memo.items:
        if it.unit == "text" and isinstance(it.value, str):
            yield it.value


def _terms(text: str) -> Iterator[str]:
    vocabulary = load_vocabulary()
    for m in _ANY_WORD.finditer(text):
        word = re.sub(r"['\u2019]s$", "", m.group(0))
        if MASK.fullmatch(word) or PROTECTED.fullmatch(word):
            continue
        yield from (p for p in re.split(r"[-/.]", word) if is_lower_word(p) and not vocabulary.generic(p))


def _exact_levels(memo: Memo) -> Iterator[str]:
    for sec in memo.sections:
        if sec.ticker is not None:
            continue
        for it in sec.items:
            step = MACRO_STEPS.get(it.id.removeprefix("L1-"))
            if step is not None and isinstance(it.value, float) and abs(it.value / step - round(it.value / step)) > 1e-9:
                yield f"{it.id}={it.value:g}"


def memo_residue(memo: Memo) -> MemoResidue:
    """The residue of one blind memo (``memo.blind``; a named memo is refused: it is all residue)."""
    if not memo.blind:
        raise ValueError(f"{memo.scenario_id}: not a blind memo; the residue audit reads blind memos")
    text = memo.text
    found = {
        "name": [n for s in _strings(memo) for n in _names(s)],
        "year": _YEAR.findall(text),
        "month": _MONTH.findall(text),
        "exact_level": list(_exact_levels(memo)),
        "term": [t for s in _texts(memo) for t in _terms(s)],
        "amount": [a for s in _strings(memo) for a in residue_amounts(s)],
        "fiscal_label": [f for s in (*_strings(memo), *(it.period for it in memo.items if it.period))
                         for f in _FISCAL_LABEL.findall(s)],
        "percent": [p for s in _texts(memo) for p in _PERCENT.findall(s)],
        "fused_name": [f for s in _strings(memo) for f in _FUSED.findall(s)],
    }
    return MemoResidue(memo=memo.scenario_id, counts={k: len(v) for k, v in found.items()},
                       examples={k: list(dict.fromkeys(v))[:EXAMPLES] for k, v in found.items() if v})
