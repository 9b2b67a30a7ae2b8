"""The sections of an analysis, each rendering itself: its markdown (`madbench stats`), its CSV tables (`stats --out`),
its part of the JSON record (`stats --json`, the Python API) and its HTML (`madbench report`).

A new statistic is one ``Section`` subclass and one entry in ``SECTIONS``: `stats` prints it in the registry's order,
writes its tables and records its fields; the report shows its HTML among the statistics (``eval/report/page.py``
places the sections its page lays out itself, and shows any other section's HTML after the quality section).
Sections never name a metric: they render the metrics the analysis holds.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pandas as pd
from markupsafe import escape

from madbench.data.markdown import markdown_table
from madbench.eval.stats.analysis_data import AnalysisData
from madbench.eval.stats.dynamics_table import DYNAMICS_LEGEND


def md_table(df: pd.DataFrame) -> str:
    """A markdown table, or "(none)" for no rows."""
    return markdown_table(df) if len(df) else "(none)"


def html_table(df: pd.DataFrame | None, digits: int = 3) -> str:
    """An HTML table of ``df`` (class ``data``; NaN as n/a), or "" for none or no rows."""
    if df is None or not len(df):
        return ""
    return str(df.to_html(index=False, float_format=lambda v: f"{v:.{digits}f}", na_rep="n/a", border=0, classes="data"))


#: The class of a paragraph that warns.
_NOTE = ' class="note"'


def _e(text: object) -> str:
    """``text`` escaped for HTML as the report's template escapes it."""
    return str(escape(text))


class Section:
    """One part of an analysis's output. Each method renders what this section shows of ``a``; a section that shows
    nothing in a form returns an empty value there."""

    #: The section's name: the report places a section by it (``page.PLACED``).
    key: ClassVar[str]

    def markdown(self, a: AnalysisData, paper_table: bool = False) -> list[str]:
        """Lines of `stats`'s markdown (heading, blank lines and table included), or [] when not shown."""
        return []

    def tables(self, a: AnalysisData) -> dict[str, pd.DataFrame | None]:
        """CSV tables by file stem; None: a table this analysis must not leave standing from an earlier one."""
        return {}

    def record(self, a: AnalysisData) -> dict[str, Any]:
        """Fields of `stats --json`'s record."""
        return {}

    def html(self, a: AnalysisData) -> str:
        """The section's HTML in the report, or "" when the report does not show it."""
        return ""


class Batches(Section):
    """A study of several batches: one row per batch."""
    key = "batches"

    def markdown(self, a: AnalysisData, paper_table: bool = False) -> list[str]:
        if not a.study:
            return []
        return ["## Batches (one study: one family of tests, a config of two batches named batch/config)", "",
                md_table(pd.DataFrame(a.study)), ""]

    def tables(self, a: AnalysisData) -> dict[str, pd.DataFrame | None]:
        return {"batches": pd.DataFrame(a.study)} if a.study else {}

    def record(self, a: AnalysisData) -> dict[str, Any]:
        return {"batches": a.study} if a.study else {}


class Sequential(Section):
    """A sequential batch's decision, adjusted for its looks (the report draws it with its figure: page.py)."""
    key = "sequential"

    def markdown(self, a: AnalysisData, paper_table: bool = False) -> list[str]:
        if a.sequential is None:
            return []
        return ["## Sequential design: the decision, adjusted for the looks", "",
                *[f"- {line}" for line in a.sequential["lines"]], "",
                "The tables below are naive for this pair: they test the pairs that ran as if no look had been taken.", ""]

    def record(self, a: AnalysisData) -> dict[str, Any]:
        return {"sequential": a.sequential} if a.sequential is not None else {}


class Sweep(Section):
    """A sweep's decisions per arm, adjusted for the arms and the looks (the report draws it with its figure)."""
    key = "sweep"

    def markdown(self, a: AnalysisData, paper_table: bool = False) -> list[str]:
        if a.sweep is None:
            return []
        return ["## Sweep: every arm against the control, adjusted for the arms and the looks", "",
                *[f"- {line}" for line in a.sweep["lines"]], "",
                "The tables below are naive for the sweep: one test per pair, as if no other arm and no look had been "
                "taken.", ""]

    def record(self, a: AnalysisData) -> dict[str, Any]:
        return {"sweep": a.sweep} if a.sweep is not None else {}


class Comparison(Section):
    """The comparison table (configs its columns) and the per-config summaries behind it."""
    key = "comparison"

    def markdown(self, a: AnalysisData, paper_table: bool = False) -> list[str]:
        return ["## Comparison (paired on scenario means)", "", a.unit_line, "", a._batch_row(a.table.markdown()), ""]

    def tables(self, a: AnalysisData) -> dict[str, pd.DataFrame | None]:
        return {"summary": pd.DataFrame(a._rows(a.summaries))}

    def record(self, a: AnalysisData) -> dict[str, Any]:
        return {"unit": "scenario", "n_scenarios": a.n_scenarios, "n_runs": a.n_runs, "replicated": a.replicated,
                "summaries": a._rows(a.summaries)}

    def html(self, a: AnalysisData) -> str:
        return (f'<h2 id="comparison">Comparison</h2>\n<p>Columns are configurations. {_e(a.unit_line)}</p>\n'
                f"<p>{_e(a.table.note())}</p>\n{a.table.html()}")


class Replicates(Section):
    """The spread of replicates within a scenario, when some scenario has them."""
    key = "replicates"

    def markdown(self, a: AnalysisData, paper_table: bool = False) -> list[str]:
        if not a.replicated:
            return []
        spread = a._frame(pd.DataFrame(a.summaries)[["config", "metric", "n", "n_runs", "within_sd"]])
        return ["## Replicates (spread within scenario; not counted as scenarios)", "", md_table(spread), ""]


class Paired(Section):
    """Every paired test, its family and how its p was computed."""
    key = "paired"

    def markdown(self, a: AnalysisData, paper_table: bool = False) -> list[str]:
        return ["## Paired differences", "", f"Comparisons: {a.pairs_shown}.", "", f"{a.family}.", "",
                *([f"{a.clustering}.", ""] if a.clustering else []), md_table(a.paired_frame()), ""]

    def tables(self, a: AnalysisData) -> dict[str, pd.DataFrame | None]:
        return {"paired": pd.DataFrame(a._rows([p.record() for p in a.pairs]))}

    def record(self, a: AnalysisData) -> dict[str, Any]:
        return {"comparisons": a.pairs_shown, "correction": a.correction, "family": a.family, "clustering": a.clustering,
                "paired": a._rows([p.record() for p in a.pairs])}

    def html(self, a: AnalysisData) -> str:
        return (f"<details><summary>Paired tests: every pair and metric ({len(a.pairs)} tests)</summary>"
                f'<p>{_e(a.family)}.</p><div class="scroll">{html_table(a.paired_frame())}</div></details>')


class Beats(Section):
    """Sign tests of scenario-level wins over the equal-weight baseline."""
    key = "beats"

    def markdown(self, a: AnalysisData, paper_table: bool = False) -> list[str]:
        if not a.beats:
            return []
        share = a.beats[0]["share_h0"]
        return [f"## Beats 1/N (sign test on scenario-level wins, two-sided: against 1/2 and against {share:.3g})", "",
                md_table(a._frame(pd.DataFrame(a.beats))), ""]

    def tables(self, a: AnalysisData) -> dict[str, pd.DataFrame | None]:
        return {"beats_1n": pd.DataFrame(a._rows(a.beats))}

    def record(self, a: AnalysisData) -> dict[str, Any]:
        return {"beats_1n": a._rows(a.beats)}

    def html(self, a: AnalysisData) -> str:
        table = html_table(a._frame(pd.DataFrame(a.beats)))
        if not table:
            return ""
        return ("<h3>Beats 1/N (sign test on scenario-level wins, two-sided: against 1/2 and against a stated share)</h3>"
                + table)


class Dynamics(Section):
    """Debate dynamics by config (the report shows its table beside the dynamics figures)."""
    key = "dynamics"

    def markdown(self, a: AnalysisData, paper_table: bool = False) -> list[str]:
        if not len(a.dynamics):
            return []
        return [f"## Debate dynamics (means over runs; {DYNAMICS_LEGEND})", "", md_table(a._frame(a.dynamics)), ""]

    def tables(self, a: AnalysisData) -> dict[str, pd.DataFrame | None]:
        return {"dynamics": a._frame(a.dynamics)} if len(a.dynamics) else {}

    def html(self, a: AnalysisData) -> str:
        table = html_table(a._frame(a.dynamics))
        return f'<div class="scroll">{table}</div>' if table else ""


class Correlations(Section):
    """Reasoning quality against performance, and why the correlations not computed were not."""
    key = "correlations"

    def markdown(self, a: AnalysisData, paper_table: bool = False) -> list[str]:
        if not a.correlations:
            return []
        lines = ["## Reasoning quality against performance", ""]
        if a.computed_correlations:
            lines += [md_table(a._frame(pd.DataFrame(a.computed_correlations))), ""]
        if a.skipped_correlations:
            lines += [a.skipped_heading + " (every row and its reason: correlations.csv)", "",
                      *[f"- {line}" for line in a.skipped_correlations], ""]
        return lines

    def tables(self, a: AnalysisData) -> dict[str, pd.DataFrame | None]:
        return {"correlations": pd.DataFrame(a._rows(a.correlations))}

    def html(self, a: AnalysisData) -> str:
        table = html_table(a._frame(pd.DataFrame(a.computed_correlations)))
        shown = (f"<details><summary>Correlations ({len(a.computed_correlations)} of {len(a.correlations)} computed)"
                 f'</summary><div class="scroll">{table}</div></details>') if table else ""
        skipped = a.skipped_correlations
        why = (f'<div class="note"><p>{_e(a.skipped_heading)}: the data cannot carry them (at least 3 pairs, a predictor '
               "with at least 3 distinct values and a response that varies are needed).</p>\n<ul>"
               + "".join(f"<li>{_e(line)}</li>" for line in skipped) + "</ul></div>") if skipped else ""
        return f"{shown}\n{why}"


class Ols(Section):
    """The regression of sharpe on ρ̄ with fixed effects, or why it was not fitted."""
    key = "ols"

    def markdown(self, a: AnalysisData, paper_table: bool = False) -> list[str]:
        heading = f"## OLS `{a.ols_formula}`" if a.ols_formula else "## OLS"
        if a.ols_table is not None and a.regression is not None:
            return [heading, "", *[x for line in a.regression.lines() for x in (line, "")], md_table(a._frame(a.ols_table)), ""]
        if a.ols_note:
            return [heading, "", a.ols_note, ""]
        return []

    def tables(self, a: AnalysisData) -> dict[str, pd.DataFrame | None]:
        # a table from an earlier fit must not stand beside statistics that refuse one
        return {"ols": a._frame(a.ols_table) if a.ols_table is not None else None}

    def record(self, a: AnalysisData) -> dict[str, Any]:
        regression: dict[str, Any] = a.regression.record() if a.regression else {"formula": a.ols_formula, "note": a.ols_note}
        if "coefficients" in regression:
            regression["coefficients"] = a._rows(regression["coefficients"])
        return {"regression": regression}

    def html(self, a: AnalysisData) -> str:
        table = html_table(a._frame(a.ols_table) if a.ols_table is not None else None)
        if table:
            lines = a.regression.lines() if a.regression else []
            return (f"<h3>OLS <code>{_e(a.ols_formula or '')}</code></h3>"
                    + "".join(f"<p{_NOTE if line.startswith('WARNING') else ''}>{_e(line)}</p>" for line in lines)
                    + table)
        if a.ols_note:
            formula = f" <code>{_e(a.ols_formula)}</code>" if a.ols_formula else ""
            return f'<h3>OLS{formula}</h3><p class="note">{_e(a.ols_note)}</p>'
        return ""


class Power(Section):
    """Planning: the scenarios a paired design needs (``stats --power``)."""
    key = "power"

    def markdown(self, a: AnalysisData, paper_table: bool = False) -> list[str]:
        if not a.power:
            return []
        return ["## Planning (scenarios a paired design needs)", "", *[f"- {row['line']}" for row in a.power], ""]

    def tables(self, a: AnalysisData) -> dict[str, pd.DataFrame | None]:
        return {"power": pd.DataFrame(a._rows(a.power))} if a.power else {}

    def record(self, a: AnalysisData) -> dict[str, Any]:
        return {"power": a._rows(a.power)} if a.power else {}


class PaperTable(Section):
    """The comparison table with the paper's uncorrected p < 0.15 superscripts, for reproducing its tables only."""
    key = "paper_table"

    def markdown(self, a: AnalysisData, paper_table: bool = False) -> list[str]:
        if not paper_table or a.paper_table is None:
            return []
        return ["## Paper-table reproduction (the paper's convention, uncorrected p < 0.15)", "",
                a._batch_row(a.paper_table.markdown()), ""]

    def html(self, a: AnalysisData) -> str:
        if a.paper_table is None:
            return ""
        return ("<details><summary>Paper-table reproduction (the paper's uncorrected p &lt; 0.15 convention)</summary>"
                f"<p>{_e(a.paper_table.note())}</p>{a.paper_table.html()}</details>")


#: Every section, in the order `stats` prints them, writes their tables and records their fields.
SECTIONS: tuple[Section, ...] = (Batches(), Sequential(), Sweep(), Comparison(), Replicates(), Paired(), Beats(), Dynamics(),
                                 Correlations(), Ols(), Power(), PaperTable())
