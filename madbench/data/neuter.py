"""Entity neutering of blind texts: a general rule, not a list of today's names.

A blind memo's company texts (filing and earnings-call facts) still name products, segments, people, places, deals
and events after ``madbench.data.blind`` has replaced the companies and dated the calendar relative to ``t``. Any
of them can give the company or the quarter away ("Azure", "iPhone 12", "the war in Ukraine"), and no list of them
can be complete, so the rule is general:

- every token with a capital letter (capitalised, camel-cased, all caps: "Azure", "iPhone", "AWS", "COVID-19") is
  masked unless the shipped generic vocabulary (``configs/blind_vocabulary.yaml``) allows it: a word at the head of
  a sentence whose lower-case form is a generic word, or a generic term as written (GAAP, CEO, Federal Reserve);
- every lower-case word of the evidence's texts is masked unless it is generic: a function word of the vocabulary's
  hand-written ``standard`` list, or one of its ``derived`` words, those many companies write alike in every year of
  the evidence (``madbench.data.generic_words``). A firm's own words ("metaverse", "hyperscale"), an era's
  ("tariffs", "generative", "reopening") and any word the vocabulary has never seen become [TERM_n], piece by piece
  in a compound ("[TERM_4]-based"); madbench's own notes and headers are masked of names only;
- a run of such tokens (joined by spaces, "of", "&", "de") is one name ("Bank of America", "Tim Cook"), with a bare
  version number after it ("Office 365", "iOS 16");
- the nouns of era-defining events (pandemic, war, lockdown, outage, ...) are masked even in lower case, and a
  name run next to one is that event ("COVID-19 pandemic");
- month names left by the date rules become ``[MONTH]``, a month-day date without a year ``[DATE]``;
- absolute amounts (currency amounts, large counts) become their order of magnitude, "$[10–100 billion]"
  (``madbench.data.amounts``); percentages and ratios stay.

Each masked name becomes ``[CLASS_n]``: PERSON, PRODUCT, SEGMENT, COMPANY, PLACE, EVENT where the words around it
tell the class (a title before a person, "segment" after a segment, "acquisition of" before a company, "Basin"
closing a place), ENTITY otherwise; a lower-case word outside the vocabulary is a TERM. The same name gets the
same mask throughout a memo (a person's surname alone too); numbers are drawn per memo from a shuffle seeded by the
memo, so [PRODUCT_7] of one memo says nothing about [PRODUCT_7] of another.
"""

from __future__ import annotations

import functools
import hashlib
import random
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from madbench.data.amounts import bucket_amounts
from madbench.data.paths import CONFIGS_DIR
from madbench.data.templates import load_yaml_model

VOCABULARY_FILE = CONFIGS_DIR / "blind_vocabulary.yaml"
MASK_CLASSES = ("PERSON", "PRODUCT", "SEGMENT", "COMPANY", "PLACE", "EVENT", "ENTITY", "TERM")
MONTH_MASK, DATE_MASK = "[MONTH]", "[DATE]"
#: Masks as they appear in a blind text (a second pass leaves them alone).
MASK = re.compile(r"\[(?:(?:" + "|".join(MASK_CLASSES) + r")_\d+|MONTH|DATE)\]")
#: Tokens ``madbench.data.blind`` writes itself: pseudonyms and relative dates (t−20d, M−1, Q0, Q4, Y−1, FY+1, H2).
PROTECTED = re.compile(r"ASSET_[A-Z]+|t(?:[+\u2212]\d+d)?|[MQY](?:0|[+\u2212]\d+)|FY(?:0|[+\u2212]\d+)|Q[1-4]|H[12]")

# \w, not [A-Za-z0-9_]: an accented name ("Zürich", "Société Générale") is one token, not a mask and a tail ("ürich")
_TOKEN = re.compile(r"\[[A-Z]+(?:_\d+)?\]|\w+(?:[&'\u2019.\-/\u2212+]\w+)*\.?")
#: Hyphens NFKC leaves apart from "-" (a non-breaking hyphen would split "H\u2011100" into a name and its version).
_HYPHENS = str.maketrans({"\u2010": "-", "\u2011": "-"})
#: A drug's nonproprietary name by its WHO INN stem (monoclonal antibodies -mab, kinase inhibitors -tinib/-ciclib,
#: peptides -tide, ...): written in lower case, it names its maker as surely as a brand does ("tirzepatide").
_INN = re.compile(r"\b(?=[a-z]{8,}\b)[a-z]{3,}(?:mab|cept|tinib|ciclib|parib|lisib|zomib|tide|glipron|gliflozin|gliptin|vir|sartan|"
                  r"siran|rsen|leucel|statin|prazole|oxetine|afil)s?\b")
_PARTS = re.compile(r"([-/.])")
_PLAIN = re.compile(r"\d+(?:\.\d+)?(?:st|nd|rd|th|s|x|k|m|bn)?")
_POSSESSIVE = re.compile(r"['\u2019]s$")
_SENTENCE_END = re.compile(r"(?:^|[.!?:;]\s*|[\(\"\u201c]\s*|\s[-\u2013\u2014]\s*)$")
_VARIANT = re.compile(r"\b(?!new\b|the\b|a\b|each\b|other\b|later\b|latest\b)([a-z]{3,}(?:-\d+)?)( variants?\b)")
_VERSION = re.compile(r"\d{1,4}[A-Za-z]?")
_CONNECTORS = frozenset({"of", "&", "de", "du", "la"})
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")
_MONTH_WORD = re.compile(r"(?:" + "|".join(MONTHS) + r"|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)\.?")
_MONTH_DAY = re.compile(r"\b(?:" + "|".join(MONTHS) + r"|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)\.? "
                        r"\d{1,2}(?:st|nd|rd|th)?\b(?!,? ?[\d%])"
                        r"|\b\d{1,2}(?:st|nd|rd|th)? (?:" + "|".join(MONTHS) + r")\b")

# The class cues: generic words around a name, not names.
EVENT_NOUNS = frozenset({
    "pandemic", "pandemics", "epidemic", "coronavirus", "covid", "lockdown", "lockdowns", "war", "wars", "invasion",
    "hurricane", "hurricanes", "wildfire", "wildfires", "earthquake", "outage", "outages", "shutdown", "crisis",
    "storm", "storms", "variant", "cyberattack", "blackout", "recall"})
#: Event nouns masked in lower case too ("the pandemic" dates a quarter as well as a name does).
LOWER_EVENT_NOUNS = frozenset({
    "pandemic", "pandemics", "epidemic", "coronavirus", "covid", "lockdown", "lockdowns", "war", "wars", "invasion",
    "hurricane", "hurricanes", "wildfire", "wildfires", "earthquake", "outage", "outages", "shutdown", "crisis",
    "cyberattack", "blackout"})
_EVENT_TAILS = frozenset({"Act", "Acts", "Accord", "Agreement", "Summit", "Games", "Olympics", "Cup"})
_PERSON_BEFORE = frozenset({"mr", "mr.", "ms", "ms.", "mrs", "mrs.", "dr", "dr.", "ceo", "cfo", "coo", "cto", "chairman",
                            "chairwoman", "president", "founder", "officer", "director", "executive", "chair", "head"})
_PERSON_AFTER = frozenset({"said", "says", "noted", "stated", "commented", "highlighted", "emphasized", "emphasised",
                           "told", "explained", "added", "who", "ceo", "cfo", "coo", "joined", "retired", "resigned",
                           "succeeds", "succeeded", "stepped"})
_COMPANY_TAILS = frozenset({"Inc", "Inc.", "Corp", "Corp.", "Corporation", "Company", "Co", "Co.", "Ltd", "Ltd.", "LLC",
                            "plc", "PLC", "AG", "SA", "NV", "Holdings", "Group", "Bank", "Partners", "Capital",
                            "Communications", "Technologies", "Technology", "Systems", "Pharmaceuticals", "Therapeutics",
                            "Labs", "Laboratories", "Airlines", "Energy", "Resources", "Financial", "Motors", "Brands",
                            "Industries", "Networks", "Solutions", "Entertainment", "Media", "Biosciences", "Bancorp"})
_COMPANY_BEFORE = frozenset({"acquisition of", "acquire", "acquired", "acquiring", "merger with", "stake in", "purchase of",
                             "partnership with", "agreement with", "deal with", "spin-off of", "spinoff of", "sale of",
                             "divestiture of", "investment in", "acquisitions of", "competitors like", "rivals like"})
_PLACE_TAILS = frozenset({"Basin", "Field", "Fields", "Shale", "Plant", "Refinery", "Mine", "Campus", "Gulf", "Bay",
                          "County", "River", "Province", "Island", "Islands", "Sea", "Airport", "Terminal", "Port",
                          "Valley", "Region", "Hub", "Park", "Peninsula", "Coast", "City", "State", "Canal", "Strait"})
_PLACE_AFTER = frozenset({"field", "fields", "basin", "plant", "plants", "refinery", "mine", "facility", "facilities",
                          "site", "acreage", "shale", "region", "terminal", "operations", "assets", "hub", "fab"})
_PLACE_BEFORE = frozenset({"in", "across", "near", "throughout", "into", "from", "within"})
_SEGMENT_AFTER = frozenset({"segment", "segments", "division", "divisions", "business", "businesses", "unit", "units"})
_PRODUCT_AFTER = frozenset({
    "platform", "platforms", "chip", "chips", "product", "products", "device", "devices", "app", "apps", "model",
    "models", "brand", "brands", "drug", "drugs", "vaccine", "vaccines", "therapy", "treatment", "franchise", "service",
    "subscription", "subscriptions", "software", "console", "consoles", "phone", "phones", "processor", "processors",
    "gpu", "gpus", "cpu", "cpus", "launch", "launches", "family", "lineup", "line", "aircraft", "engine", "engines",
    "vehicle", "vehicles", "truck", "trucks", "game", "games", "card", "cards", "network", "revenue", "sales", "growth",
    "adoption", "demand", "users", "shipments", "units", "program", "programs", "portfolio", "offering", "offerings",
    "architecture", "accelerator", "accelerators", "system", "systems", "store", "stores", "plan", "plans", "trial",
    "trials", "pipeline", "suite", "tool", "tools", "feature", "features", "version", "release", "series"})
_PRODUCT_BEFORE = frozenset({"launch of", "launched", "introduced", "introduction of", "rollout of", "approval of",
                             "approved", "release of", "released", "sales of", "demand for"})


#: Generic words that close a name ("Capital One Financial", "Permian Basin", "Inflation Reduction Act"): kept alone
#: where the vocabulary allows them, masked with the name they close.
_NAME_TAILS = _COMPANY_TAILS | _PLACE_TAILS | _EVENT_TAILS


class SpreadRule(BaseModel):
    """How the ``derived`` words of the vocabulary were drawn (``madbench.data.generic_words``), and from what."""

    model_config = ConfigDict(extra="forbid")
    #: A word is generic only if this many distinct companies write it in lower case, ...
    min_firms: int
    #: ... in at least this many documents, ...
    min_documents: int
    #: ... and its rate varies across years by at most this coefficient of variation (sampling noise removed),
    max_variation: float
    #: measured over the cells (source, year) of at least this many documents.
    min_cell_documents: int
    #: The evidence the words were counted in: its folders, documents, companies, and documents per cell.
    sources: list[str]
    documents: int
    firms: int
    cells: dict[str, int]


class VocabularyFile(BaseModel):
    """``configs/blind_vocabulary.yaml``."""

    model_config = ConfigDict(extra="forbid")
    rule: SpreadRule
    #: Generic terms kept as written anywhere (acronyms of accounting and markets, institutions).
    capitalised: list[str]
    #: Written by hand: English function and discourse words (the, however, additionally), generic in any text.
    standard: list[str]
    #: Drawn from the evidence by ``rule`` (``python -m madbench.data.generic_words``); never edited by hand.
    derived: list[str]


@dataclass(frozen=True)
class Vocabulary:
    #: Generic lower-case words (``standard`` and ``derived``): kept in lower case, and capitalised at a sentence's head.
    words: frozenset[str]
    capitalised: frozenset[str]

    def allows(self, token: str, initial: bool) -> bool:
        """Whether ``token`` (a word with a capital letter) stays: a generic term as written, or an ordinary word at
        the head of a sentence (only its first letter capital)."""
        if token in self.capitalised or token.rstrip(".") in self.capitalised or token + "." in self.capitalised:
            return True
        if initial and token[:1].isupper() and token[1:] == token[1:].lower() and token.lower() in self.words:
            return True
        parts = token.split("-")
        if len(parts) > 1:  # Non-GAAP, Year-over-year, mid-Q4: each part on its own
            return all(not _has_capital(p) or self.allows(p, initial and i == 0) for i, p in enumerate(parts) if p)
        return False

    def generic(self, part: str) -> bool:
        """Whether ``part`` (a lower-case piece of a word: "datacenter" of "datacenter-related") stays: a generic word,
        a single letter, or a number with an ordinal, plural or multiple ending (4th, 90s, 3x). Any other lower-case
        word, one never seen in the evidence included, is a term that may name a company or date a quarter."""
        return len(part) == 1 or _PLAIN.fullmatch(part) is not None or part in self.words


@functools.lru_cache(maxsize=4)
def load_vocabulary(path: str | Path | None = None) -> Vocabulary:
    spec = load_yaml_model(Path(path) if path else VOCABULARY_FILE, VocabularyFile)
    return Vocabulary(frozenset(w.lower() for w in (*spec.standard, *spec.derived)), frozenset(spec.capitalised))


def lower_parts(word: str) -> list[str]:
    """``word`` split at hyphens, slashes and points, separators kept ("pandemic-related" -> ["pandemic", "-",
    "related"]): the pieces the lower-case rule judges one by one."""
    return _PARTS.split(word)


def is_lower_word(part: str) -> bool:
    """A piece written in lower case with a letter in it (not a number, not a capitalised name)."""
    return not _has_capital(part) and any(c.isalpha() for c in part)


def lower_words(text: str) -> Iterator[str]:
    """The lower-case pieces of ``text`` as the masker reads them (NFKC, its tokens less possessives, split at
    - / .), masks and blind tokens (t, t\u221220d) left out."""
    text = unicodedata.normalize("NFKC", text).translate(_HYPHENS)
    for m in _TOKEN.finditer(text):
        word = _Token(m.group(0), 0, 0).word
        if word.startswith("[") or PROTECTED.fullmatch(word):
            continue
        yield from (p for p in lower_parts(word)[::2] if is_lower_word(p))


def _has_capital(token: str) -> bool:
    return any(c.isupper() for c in token)


def _is_month(token: str) -> bool:
    return _MONTH_WORD.fullmatch(token) is not None


@dataclass(frozen=True)
class MaskedTerm:
    """One name a memo's texts carried and the mask it became."""

    text: str
    mask: str
    mask_class: str


@dataclass
class _Token:
    text: str
    start: int
    end: int

    @property
    def word(self) -> str:
        return _POSSESSIVE.sub("", self.text.rstrip("."))


@dataclass
class Masker:
    """Masks the names of one memo's texts; the same name gets the same mask in every text it masks."""

    seed: str
    vocabulary: Vocabulary = field(default_factory=load_vocabulary)
    terms: dict[str, MaskedTerm] = field(default_factory=dict)  # name (case-folded) -> its mask
    _numbers: dict[str, list[int]] = field(default_factory=dict)

    def _number(self, cls: str) -> int:
        """The next number of ``cls`` in this memo: 1..99 in an order shuffled by the memo's seed (then 100, 101, ...)."""
        pool = self._numbers.get(cls)
        if pool is None:
            rng = random.Random(int(hashlib.sha256(f"{self.seed}|{cls}".encode()).hexdigest()[:16], 16))
            pool = list(range(1, 100))
            rng.shuffle(pool)
            self._numbers[cls] = pool
        used = sum(1 for t in self.terms.values() if t.mask_class == cls)
        return pool[used] if used < len(pool) else used + 1

    def mask_of(self, name: str, cls: str) -> str:
        key = name.casefold()
        if key not in self.terms:
            self.terms[key] = MaskedTerm(name, f"[{cls}_{self._number(cls)}]", cls)
        return self.terms[key].mask

    @property
    def masked(self) -> list[MaskedTerm]:
        return list(self.terms.values())

    def __call__(self, text: str, terms: bool = True) -> str:
        """``text`` with its names masked; with ``terms``, every lower-case word outside the vocabulary too (the
        evidence's own words; madbench's notes and headers are masked of names only). Absolute amounts become their
        order of magnitude (``madbench.data.amounts``)."""
        # compatibility forms read as their plain letters by a model ("Ｎｖｉｄｉａ", "iPhone\u00a015"): fold them first
        text = unicodedata.normalize("NFKC", text).translate(_HYPHENS)
        text = bucket_amounts(_MONTH_DAY.sub(DATE_MASK, text))
        text = _INN.sub(lambda m: m.group(0) if m.group(0) in self.vocabulary.words
                        else self.mask_of(m.group(0).removesuffix("s"), "PRODUCT"), text)
        # a named variant in lower case ("the omicron variant") is an event as surely as a capitalised one
        text = _VARIANT.sub(lambda m: self.mask_of(m.group(1), "EVENT") + m.group(2), text)
        tokens = [_Token(m.group(0), m.start(), m.end()) for m in _TOKEN.finditer(text)]
        out: list[str] = []
        last = 0
        i = 0
        while i < len(tokens):
            tok = tokens[i]
            run_end = self._run(text, tokens, i)
            if run_end is None:
                replaced = MONTH_MASK if _is_month(tok.word) else self._lower(tok, terms)
                if replaced is not None:
                    out += [text[last:tok.start], replaced + tok.text[len(tok.word):]]
                    last = tok.end
                i += 1
                continue
            j, absorb_event = run_end
            run = tokens[i:j]
            name = text[run[0].start:run[-1].start] + run[-1].word
            if absorb_event:
                name_end = tokens[j].start + len(tokens[j].word)
                cls = "EVENT"
                j += 1
            else:
                name_end = run[-1].start + len(run[-1].word)
                cls = self._class(text, tokens, i, j, name)
            out += [text[last:run[0].start], self._mask_name(name, cls)]
            last = name_end
            i = j
        out.append(text[last:])
        return "".join(out)

    def _mask_name(self, name: str, cls: str) -> str:
        key = name.casefold()
        if key in self.terms:
            return self.terms[key].mask
        mask = self.mask_of(name, cls)
        if cls == "PERSON" and " " in name:  # the surname alone later is the same person
            surname = name.split()[-1]
            self.terms.setdefault(surname.casefold(), MaskedTerm(surname, mask, cls))
        return mask

    def _initial_word(self, text: str, tok: _Token) -> bool:
        """An ordinary word, capitalised because it heads a sentence."""
        word = tok.word
        return (word[:1].isupper() and word[1:] == word[1:].lower() and word not in self.vocabulary.capitalised
                and _SENTENCE_END.search(text[:tok.start]) is not None)

    def _candidate(self, text: str, tok: _Token) -> bool:
        word = tok.word
        if not _has_capital(word) or MASK.fullmatch(tok.text) or PROTECTED.fullmatch(word) or _is_month(word):
            return False
        initial = _SENTENCE_END.search(text[:tok.start]) is not None
        return not self.vocabulary.allows(word, initial)

    def _run(self, text: str, tokens: list[_Token], i: int) -> tuple[int, bool] | None:
        """(end of the name run starting at token ``i``, whether an event noun right after it joins it), or None. A
        name masked before is masked again even where the vocabulary would keep it (a surname at a sentence's head)."""
        word = tokens[i].word
        known = self._candidate(text, tokens[i]) or (_has_capital(word) and word.casefold() in self.terms)
        # an ordinary word heading a sentence is the head of a name when one follows it ("Office 365", "Port Arthur"):
        # kept alone, it would tell the name's first word
        heads = (self._initial_word(text, tokens[i]) and i + 1 < len(tokens)
                 and text[tokens[i].end:tokens[i + 1].start] == " " and self._candidate(text, tokens[i + 1]))
        if not (known or heads):
            return None
        j = i + 1
        while j < len(tokens):
            gap = text[tokens[j - 1].end:tokens[j].start]
            if tokens[j - 1].text.endswith((".", "'s", "\u2019s")) or gap not in (" ", "-"):
                break
            if self._candidate(text, tokens[j]) or tokens[j].word in _NAME_TAILS:
                j += 1
            elif (tokens[j].text in _CONNECTORS and j + 1 < len(tokens) and text[tokens[j].end:tokens[j + 1].start] == " "
                  and self._candidate(text, tokens[j + 1])):
                j += 2
            # a version ending a sentence ("iOS 16.") joins its name as well
            elif _VERSION.fullmatch(tokens[j].word) and not re.match(r"\s*[%$\d]", text[tokens[j].end:tokens[j].end + 2]):
                j += 1
                break
            else:
                break
        absorb = (j < len(tokens) and text[tokens[j - 1].end:tokens[j].start] in (" ", "-")
                  and tokens[j].word.lower() in EVENT_NOUNS and not _has_capital(tokens[j].word[1:]))
        return j, absorb

    def _lower(self, tok: _Token, terms: bool) -> str | None:
        """A token outside any name with lower-case pieces to mask, masked piece by piece, the rest of a compound
        kept ("[EVENT_3]-related", "[TERM_7]-based"): an event noun ("the pandemic") as an event, and with ``terms``
        a piece outside the vocabulary ("bitcoin", "metaverse") as a term. None when nothing changes."""
        word = tok.word
        if word.startswith("[") or PROTECTED.fullmatch(word):
            return None
        parts = lower_parts(word)
        changed = False
        for i in range(0, len(parts), 2):
            p = parts[i]
            if not is_lower_word(p):
                continue
            if p in LOWER_EVENT_NOUNS:
                parts[i], changed = self.mask_of(p, "EVENT"), True
            elif terms and not self.vocabulary.generic(p):
                parts[i], changed = self.mask_of(p, "TERM"), True
        return "".join(parts) if changed else None

    def _class(self, text: str, tokens: list[_Token], i: int, j: int, name: str) -> str:
        words = name.split()
        before = " ".join(t.text.lower() for t in tokens[max(0, i - 2):i])
        prev = tokens[i - 1].text.lower() if i else ""
        after = tokens[j].text.lower() if j < len(tokens) else ""
        gap_after = text[tokens[j - 1].end:tokens[j].start] if j < len(tokens) else ""
        if any(w.lower().split("-")[0] in EVENT_NOUNS or w.upper().startswith(("COVID", "SARS")) for w in words) \
                or words[-1] in _EVENT_TAILS:
            return "EVENT"
        if prev in _PERSON_BEFORE or (after in _PERSON_AFTER and gap_after.strip(" ,") == "") \
                or (gap_after.startswith(",") and (after in _PERSON_BEFORE or after in {"chief", "the", "our"})):
            return "PERSON"
        if words[-1] in _COMPANY_TAILS or before in _COMPANY_BEFORE or prev in _COMPANY_BEFORE:
            return "COMPANY"
        if words[-1] in _PLACE_TAILS or after in _PLACE_AFTER:
            return "PLACE"
        if after in _SEGMENT_AFTER:
            return "SEGMENT"
        camel = any(re.search(r"[a-z][A-Z]|\d", w) for w in words)
        if camel or after in _PRODUCT_AFTER or before in _PRODUCT_BEFORE or prev in _PRODUCT_BEFORE:
            return "PRODUCT"
        if prev in _PLACE_BEFORE and len(words) <= 2:
            return "PLACE"
        return "ENTITY"


# ---------------------------------------------------------------- years in units and index bases

_BASE_YEAR = re.compile(r"\(\s*(?:19|20)\d\d(?:\s*[-/]\s*(?:19|20)?\d\d)?\s*=\s*100\s*\)")
_YEAR_DOLLARS = re.compile(r"\b(?:chained |constant )?(?:19|20)\d\d (?:chained )?dollars\b")


def yearless_units(text: str) -> str:
    """Index bases and real-dollar units without their year: "(2017=100)" -> "(base=100)", "2012 dollars" -> "constant
    dollars" (a base year tells the series' vintage, and with it the date)."""
    return _YEAR_DOLLARS.sub("constant dollars", _BASE_YEAR.sub("(base=100)", text))
