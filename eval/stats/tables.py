"""Comparison tables in the paper's format.

Configurations are columns (lettered A, B, …) and metrics are rows. Each cell is
the mean (SEM) with a superscript listing the columns it differs from in a
paired test: p < 0.15 plain, p < 0.01 bold; a comparison not tested (no spread, or equal up to rounding:
``madbench.eval.stats.degenerate``) marks nothing. With a correction, the p-values of each metric's family of tests
(every pair, or the batch's declared pairs) are adjusted first (Holm, or
Benjamini–Hochberg, through statsmodels' ``multipletests``).
"""

from __future__ import annotations

import html
import string
from dataclasses import dataclass, field

import numpy as np

from madbench.eval.stats.paired import PairedComparison

CORRECTIONS = {"none": None, "holm": "holm", "bh": "fdr_bh"}
WEAK, STRONG = 0.15, 0.01


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
        scope = f" ({self.scope})" if self.scope else ""
        note = f"Superscripts: columns that differ in a paired test{scope}, p < {WEAK} (bold: p < {STRONG})"
        note += "" if self.correction == "none" else f", {self.correction}-corrected within each metric"
        return "\n".join(lines) + f"\n\n{note}. Cells: mean (SEM) [n]."

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


def adjust(pvalues: list[float], correction: str) -> list[float]:
    """Adjusted p-values; NaN tests (undefined) stay NaN and do not count towards the family size."""
    from statsmodels.stats.multitest import multipletests
    method = CORRECTIONS[correction]
    if method is None:
        return list(pvalues)
    p = np.asarray(pvalues, float)
    ok = ~np.isnan(p)
    out = p.copy()
    if ok.any():
        out[ok] = multipletests(p[ok], method=method)[1]
    return out.tolist()


def comparison_table(summaries: list[dict], pairs: list[PairedComparison], configs: list[str], metrics: list[str],
                     correction: str = "none", scope: str = "") -> ComparisonTable:
    if correction not in CORRECTIONS:
        raise ValueError(f"unknown correction {correction!r}; choose from {', '.join(CORRECTIONS)}")
    cells = {(s["metric"], s["config"]): Cell(s["mean"], s["sem"], s["n"]) for s in summaries}
    letters = {c: _letter(i) for i, c in enumerate(configs)}
    for m in metrics:
        family = [p for p in pairs if p.metric == m]
        for comp, p in zip(family, adjust([c.p for c in family], correction), strict=True):
            if np.isnan(p) or p >= WEAK:
                continue
            cells[(m, comp.a)].differs.append((letters[comp.b], p < STRONG))
            cells[(m, comp.b)].differs.append((letters[comp.a], p < STRONG))
    for cell in cells.values():
        cell.differs.sort()
    return ComparisonTable(configs, metrics, cells, correction, scope)
