"""Comparison tables in the paper's format.

Configurations are columns (lettered A, B, …) and metrics are rows. Each cell is the mean (SEM) over scenarios
[n scenarios], with a superscript listing the columns it differs from in a paired test on scenario means. By
default the superscript marks the *adjusted* p (``family``: every pair × metric of the analysis one family, Holm
unless asked otherwise) of the primary test, quarter-clustered where the runs carry quarters (``paired``):
p_adj < 0.05 plain, p_adj < 0.01 bold, and the note says how p was computed. The paper's own convention, the raw
p of the ordinary (unclustered) paired t < 0.15 plain and < 0.01 bold, is kept only for reproducing its tables
(``style="paper_convention"``), and labelled as such wherever printed.
A comparison not tested (no spread, or equal up to rounding: ``madbench.eval.stats.degenerate``) marks nothing.
"""

from __future__ import annotations

import html
import string
from dataclasses import dataclass, field

import numpy as np

from madbench.eval.stats.family import ALPHA, CORRECTIONS, adjust, check_correction  # noqa: F401  (adjust: re-exported)
from madbench.eval.stats.paired import PairedComparison, clustering_line

#: style → (p column marked, plain threshold, bold threshold)
STYLES = {"adjusted": ("p_adj", ALPHA, 0.01), "paper_convention": ("p_unclustered", 0.15, 0.01)}
#: The styles that reproduce another paper's convention: their note says so, and that it is no significance claim.
REPRODUCTIONS = {"paper_convention"}


@dataclass
class Cell:
    mean: float
    sem: float
    n: int
    differs: list[tuple[str, bool]] = field(default_factory=list)  # (column letter, strong)


@dataclass
class ComparisonTable:
    configs: list[str]
    metrics: list[str]
    cells: dict[tuple[str, str], Cell]
    correction: str
    #: Which pairs were tested when not every pair ("the declared pairs only"), for the note under the table.
    scope: str = ""
    style: str = "adjusted"
    #: How the tests' p was computed (``paired.clustering_line``), said under the table.
    clustering: str = ""

    def note(self) -> str:
        scope = f" ({self.scope})" if self.scope else ""
        if self.style in REPRODUCTIONS:
            return (f"Paper-table reproduction: superscripts follow the paper's convention, uncorrected and unclustered paired p < 0.15 "
                    f"(bold: p < 0.01){scope}; not a significance claim. Cells: mean (SEM) [n scenarios].")
        family = "no correction" if self.correction == "none" else f"{self.correction}-adjusted over every pair × metric"
        clustering = f" {self.clustering}." if self.clustering else ""
        return (f"Superscripts: columns that differ in a paired test on scenario means{scope}, adjusted p < {ALPHA} "
                f"(bold: < 0.01; {family}).{clustering} Cells: mean (SEM) [n scenarios].")

    @property
    def letters(self) -> dict[str, str]:
        return {c: _letter(i) for i, c in enumerate(self.configs)}

    def markdown(self, digits: int = 3) -> str:
        letters = self.letters
        head = "| metric | " + " | ".join(f"{letters[c]}: {c}" for c in self.configs) + " |"
        lines = [head, "|---" * (len(self.configs) + 1) + "|"]
        for m in self.metrics:
            cells = []
            for c in self.configs:
                cell = self.cells[(m, c)]
                sup = ",".join(f"**{l}**" if strong else l for l, strong in cell.differs)
                cells.append(_fmt(cell, digits) + (f"<sup>{sup}</sup>" if sup else ""))
            lines.append(f"| {m} | " + " | ".join(cells) + " |")
        return "\n".join(lines) + f"\n\n{self.note()}"

    def html(self, digits: int = 3) -> str:
        letters = self.letters
        e = html.escape
        head = "".join(f"<th>{letters[c]}: {e(c)}</th>" for c in self.configs)
        body = []
        for m in self.metrics:
            tds = []
            for c in self.configs:
                cell = self.cells[(m, c)]
                sup = ",".join(f"<b>{l}</b>" if strong else l for l, strong in cell.differs)
                tds.append(f"<td>{e(_fmt(cell, digits))}{f'<sup>{sup}</sup>' if sup else ''}</td>")
            body.append(f"<tr><th>{e(m)}</th>{''.join(tds)}</tr>")
        return f"<table class='cmp'><thead><tr><th>metric</th>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _letter(i: int) -> str:
    return string.ascii_uppercase[i] if i < 26 else f"Z{i - 25}"


def _fmt(cell: Cell, digits: int) -> str:
    if cell.n == 0:
        return "n/a"
    sem = "" if np.isnan(cell.sem) else f" ({cell.sem:.{digits}f})"
    return f"{cell.mean:+.{digits}f}{sem} [{cell.n}]"


def comparison_table(summaries: list[dict], pairs: list[PairedComparison], configs: list[str], metrics: list[str],
                     correction: str = "holm", scope: str = "", style: str = "adjusted") -> ComparisonTable:
    """``pairs`` already carry their family-adjusted ``p_adj`` (``family.adjust_family`` with ``correction``)."""
    check_correction(correction)
    column, weak, strong = STYLES[style]
    cells = {(s["metric"], s["config"]): Cell(s["mean"], s["sem"], s["n"]) for s in summaries}
    letters = {c: _letter(i) for i, c in enumerate(configs)}
    for comp in pairs:
        p = getattr(comp, column)
        if comp.metric not in metrics or np.isnan(p) or p >= weak:
            continue
        cells[(comp.metric, comp.a)].differs.append((letters[comp.b], p < strong))
        cells[(comp.metric, comp.b)].differs.append((letters[comp.a], p < strong))
    for cell in cells.values():
        cell.differs.sort()
    return ComparisonTable(configs, metrics, cells, correction, scope, style, clustering_line(pairs))
