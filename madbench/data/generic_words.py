"""The generic lower-case words of blind texts, drawn from the evidence by spread.

A blind text keeps a lower-case word only if it is generic (``madbench.data.neuter``); every other word, one never
seen before included, is masked as a term. Which words are generic is read off the evidence rather than listed by
hand: a word says little about one company if many companies write it, and little about one period if its rate is
alike in every year. The documents are the evidence's filings and earnings calls (company f, source s, year y: the
year of the period a document reports); the cells are the (source, year) pairs of at least ``min_cell_documents``
documents (a smaller cell, such as one year's few calls written in another style, measures no rate). For a word w:

- firms(w), documents(w): the distinct companies, and the documents, that write w in lower case;
- O(w, c): the documents of cell c that hold w; E(w, c) = p(w, s) D(c), the count expected at w's rate in the
  cell's source, p(w, s) = (sum of O(w, c) over the source's cells) / (their documents), D(c) the cell's documents
  (sources apart: the years hold filings and calls in different mixes);
- X2(w) = sum_c (O - E)^2 / E, and variation(w) = sqrt(max(0, (X2(w) - df) / sum_c E)), df = cells - sources: the
  coefficient of variation of w's rate across the cells with the Poisson noise taken out (for a count of mean
  E (1 + d), d of variance CV^2, E[(O - E)^2 / E] = 1 + E CV^2; the method of moments). 0 for a word used alike
  every year; about 1 and more for one that rose or fell with an era ("tariffs" in 2025, "pandemic" in 2021,
  "generative" from 2023).

w is generic when firms(w) >= min_firms, documents(w) >= min_documents (a rarer word is too rare to measure) and
variation(w) <= max_variation, and it is neither an event noun nor a month (blind texts mask those in any case).
The hand-written ``standard`` list (English function, discourse and number words) is kept whatever its variation:
a summary's style moving from year to year ("also", "such") is no fact a reader could look up, and a text without
those words is unreadable.

``python -m madbench.data.generic_words --pack DIR --evidence DIR`` draws ``derived`` and ``rule`` of
``configs/blind_vocabulary.yaml`` again (``--check``: only says whether the file is what the rule draws). New
evidence is blinded with the vocabulary as shipped: a word it brings is masked until the vocabulary is drawn again.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml
from pydantic import BaseModel, ConfigDict

from madbench.data.atomic import atomic_write_text
from madbench.data.errors import InputError
from madbench.data.market.pack import load_pack
from madbench.data.market.table_specs import CALL_SECTIONS, FILING_SECTIONS
from madbench.data.neuter import (
    EVENT_NOUNS,
    LOWER_EVENT_NOUNS,
    MONTHS,
    VOCABULARY_FILE,
    SpreadRule,
    VocabularyFile,
    lower_words,
)
from madbench.data.templates import load_yaml_model

MIN_FIRMS = 6
MIN_DOCUMENTS = 10
MAX_VARIATION = 0.5
MIN_CELL = 100
_YEAR = re.compile(r"(?:19|20)\d\d")


@dataclass(frozen=True)
class Document:
    firm: str
    source: str
    year: int
    text: str


def _year(*values: object) -> int | None:
    for v in values:
        m = _YEAR.search(str(v)) if v is not None and not (isinstance(v, float) and pd.isna(v)) else None
        if m:
            return int(m.group(0))
    return None


def evidence_documents(tables: dict[str, pd.DataFrame]) -> list[Document]:
    """Every filing and earnings call of a pack's evidence tables (``Pack.evidence``), its text the sections a memo
    shows, its year that of the period it reports (a filing's fiscal period, else its filing date; a call's quarter)."""
    docs = []
    for source, columns, dated in (("filings", FILING_SECTIONS, ("fiscal_period", "filing_date")),
                                   ("earnings_calls", CALL_SECTIONS, ("quarter",))):
        frame = tables.get(source)
        if frame is None:
            continue
        for row in frame.to_dict("records"):
            year = _year(*(row.get(c) for c in dated))
            text = " ".join(str(row[c]) for c in columns if isinstance(row.get(c), str))
            if year is not None and text:
                docs.append(Document(str(row["ticker"]), source, year, text))
    return docs


def spread_table(docs: Sequence[Document], min_cell: int = MIN_CELL) -> pd.DataFrame:
    """Per lower-case word: firms, documents, and the variation of its rate across the cells (source, year) of at
    least ``min_cell`` documents, the cells of its highest and lowest ratio O/E beside it (formula: module docstring)."""
    sizes = {c: n for c, n in Counter((d.source, d.year) for d in docs).items() if n >= min_cell}
    per_source: Counter[str] = Counter()
    for (source, _), n in sizes.items():
        per_source[source] += n
    df = len(sizes) - len(per_source)
    firms: dict[str, set[str]] = defaultdict(set)
    documents: Counter[str] = Counter()
    seen: dict[str, Counter[tuple[str, int]]] = defaultdict(Counter)
    for d in docs:
        cell = (d.source, d.year)
        for w in set(lower_words(d.text)):
            firms[w].add(d.firm)
            documents[w] += 1
            if cell in sizes:
                seen[w][cell] += 1
    rows = []
    for w in firms:
        counts = seen[w]
        rate = {s: sum(n for (s2, _), n in counts.items() if s2 == s) / per_source[s] for s in per_source}
        expected = {c: rate[c[0]] * n for c, n in sizes.items()}
        total = sum(expected.values())
        chi2 = sum((counts.get(c, 0) - e) ** 2 / e for c, e in expected.items() if e > 0)
        ratios = sorted((counts.get(c, 0) / e, c) for c, e in expected.items() if e > 0)
        rows.append({"word": w, "firms": len(firms[w]), "documents": documents[w],
                     "variation": math.sqrt(max(0.0, (chi2 - df) / total)) if total else float("nan"),
                     "highest": f"{ratios[-1][1][0]} {ratios[-1][1][1]}" if ratios else "",
                     "lowest": f"{ratios[0][1][0]} {ratios[0][1][1]}" if ratios else ""})
    return pd.DataFrame(rows, columns=["word", "firms", "documents", "variation", "highest", "lowest"])


#: Never generic, whatever their spread: blind texts mask them (neuter's event nouns, month names).
EXCLUDED = frozenset(EVENT_NOUNS | LOWER_EVENT_NOUNS | {m.lower() for m in MONTHS})


def derive(table: pd.DataFrame, min_firms: int = MIN_FIRMS, min_documents: int = MIN_DOCUMENTS,
           max_variation: float = MAX_VARIATION) -> list[str]:
    """The generic words of a ``spread_table``, sorted: written by ``min_firms`` companies in ``min_documents``
    documents, with a variation across years of at most ``max_variation`` (a word too rare to measure, NaN, is not)."""
    keep = table[(table["firms"] >= min_firms) & (table["documents"] >= min_documents)
                 & (table["variation"] <= max_variation)]
    return sorted(w for w in keep["word"] if w not in EXCLUDED)


def _render(spec: VocabularyFile, header: str) -> str:
    body = yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False, allow_unicode=True, width=120)
    return header + body


def _header(path: Path) -> str:
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        lines.append(line)
    return "\n".join(lines) + "\n" if lines else ""


class HandLists(BaseModel):
    """The hand-written parts of a vocabulary file (its ``rule`` and ``derived`` are drawn again, whatever they hold)."""

    model_config = ConfigDict(extra="ignore")
    capitalised: list[str]
    standard: list[str]


def rebuild(path: Path, docs: Sequence[Document], sources: Iterable[str], rule: dict[str, float] | None = None) -> str:
    """The vocabulary file at ``path`` with ``derived`` and ``rule`` drawn again from ``docs`` (its comments,
    ``capitalised`` and ``standard`` kept), as text. ``rule``: thresholds other than the defaults."""
    hand = load_yaml_model(path, HandLists)
    rule = {"min_firms": MIN_FIRMS, "min_documents": MIN_DOCUMENTS, "max_variation": MAX_VARIATION,
            "min_cell_documents": MIN_CELL, **(rule or {})}
    cells = Counter((d.source, d.year) for d in docs)
    spread = SpreadRule(**rule, sources=list(sources), documents=len(docs), firms=len({d.firm for d in docs}),
                        cells={f"{s} {y}": n for (s, y), n in sorted(cells.items())})
    table = spread_table(docs, spread.min_cell_documents)
    words = derive(table, spread.min_firms, spread.min_documents, spread.max_variation)
    spec = VocabularyFile(rule=spread, capitalised=hand.capitalised, standard=hand.standard,
                          derived=[w for w in words if w not in set(hand.standard)])
    return _render(spec, _header(path))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m madbench.data.generic_words", description=__doc__.split("\n\n")[0])
    p.add_argument("--pack", required=True, help="the market pack (its own filings and calls, if any, count too)")
    p.add_argument("--evidence", action="append", default=[], help="an evidence folder (repeatable), e.g. shared/data/paper")
    p.add_argument("--out", default=str(VOCABULARY_FILE), help="the vocabulary file to rewrite")
    p.add_argument("--min-firms", type=int, default=MIN_FIRMS)
    p.add_argument("--min-documents", type=int, default=MIN_DOCUMENTS)
    p.add_argument("--max-variation", type=float, default=MAX_VARIATION)
    p.add_argument("--min-cell-documents", type=int, default=MIN_CELL)
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 when the file is not what the rule gives")
    args = p.parse_args(argv)
    try:
        return _run(args)
    except InputError as exc:
        print(f"{p.prog}: error: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    pack = load_pack(args.pack, args.evidence)
    docs = evidence_documents(pack.evidence)
    if not docs:
        print(f"{args.pack}: no filings or earnings calls in the pack or its evidence folders; pass --evidence DIR",
              file=sys.stderr)
        return 2
    sources = [Path(s).name for s in (args.pack, *args.evidence)]
    out = Path(args.out)
    text = rebuild(out, docs, sources, {"min_firms": args.min_firms, "min_documents": args.min_documents,
                                        "max_variation": args.max_variation, "min_cell_documents": args.min_cell_documents})
    if args.check:
        same = out.read_text(encoding="utf-8") == text
        print(f"{out}: {'up to date' if same else 'differs from what the rule draws from this evidence'}")
        return 0 if same else 1
    atomic_write_text(out, text)
    derived = load_yaml_model(out, VocabularyFile).derived
    print(f"{out}: {len(derived)} derived words from {len(docs)} documents of {len({d.firm for d in docs})} companies")
    return 0


if __name__ == "__main__":
    sys.exit(main())
