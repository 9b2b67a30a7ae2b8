"""What one analysis of a runs table holds (``analysis.analyse`` fills it); its sections (``sections``) render it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from madbench.eval.stats.batch_columns import batch_frame, batch_rows
from madbench.eval.stats.correlate import computed, not_computed
from madbench.eval.stats.family import DEFAULT_CORRECTION, family_line
from madbench.eval.stats.paired import PairedComparison, clustering_line, repeated_columns
from madbench.eval.stats.regress import Regression
from madbench.eval.stats.tables import ComparisonTable


@dataclass
class AnalysisData:
    configs: list[str]
    metrics: list[str]
    summaries: list[dict[str, Any]]
    pairs: list[PairedComparison]
    table: ComparisonTable
    beats: list[dict[str, Any]]
    correlations: list[dict[str, Any]] = field(default_factory=list)
    ols_formula: str | None = None
    ols_table: pd.DataFrame | None = None
    ols_note: str | None = None
    #: The fitted regression (effects, clusters, warnings) when there is one.
    regression: Regression | None = None
    #: The same table with the paper's uncorrected p < 0.15 superscripts, for reproducing its tables only.
    paper_table: ComparisonTable | None = None
    correction: str = DEFAULT_CORRECTION
    #: Scenarios and finished runs analysed, and whether some scenario has replicates.
    n_scenarios: int = 0
    n_runs: int = 0
    replicated: bool = False
    #: Planning rows (``planning.plan_pairs``) when asked for.
    power: list[dict[str, Any]] = field(default_factory=list)
    #: Debate dynamics by config (``madbench.eval.stats.dynamics_table``); empty when the runs predate its columns.
    dynamics: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: Which comparisons ``pairs`` holds (``paired.choose_pairs``): the batch's declared pairs, or every pair.
    pairs_shown: str = ""

    #: A sequential batch's decision and its inference adjusted for the looks (``sequential_record.summary``).
    sequential: dict[str, Any] | None = None
    #: A sweep's decisions per arm, adjusted for the arms and the looks (``sweep_record.summary``).
    sweep: dict[str, Any] | None = None

    #: Tests in the family ``p_adj`` is adjusted over, when larger than this analysis's own (``adjust_across``).
    family_size: int | None = None

    #: Of a study of several batches (``study``): each config's batch, put as a column in every table and record
    #: (empty for one batch: no such column), and one row per batch.
    batches: dict[str, str] = field(default_factory=dict)
    study: list[dict[str, Any]] = field(default_factory=list)

    @property
    def family(self) -> str:
        scope = "this call, every part of --by" if self.family_size else "this analysis"
        if self.batches:
            scope = f"{scope.replace('this analysis', 'this study')}, all its {len(self.study)} batches"
        return family_line(self.family_size or sum(1 for p in self.pairs if p.p == p.p), self.correction, scope)

    @property
    def unit_line(self) -> str:
        if not self.replicated:
            return f"Unit of inference: the scenario ({self.n_scenarios} scenarios, one run each per config)."
        return (f"Unit of inference: the scenario ({self.n_scenarios} scenarios, {self.n_runs} finished runs): replicates are "
                "averaged within each scenario before every test; n counts scenarios. A linear mixed model with a random "
                "intercept per scenario (mixed_diff, mixed_p) stands beside each paired test.")

    def paired_frame(self) -> pd.DataFrame:
        """The paired table as printed: the note column only when some comparison has a note, the replicate
        columns only when some scenario has replicates."""
        frame = self._frame(pd.DataFrame([p.record() for p in self.pairs]))
        if "note" in frame and not frame["note"].astype(bool).any():
            frame = frame.drop(columns="note")
        if not self.replicated:
            frame = frame.drop(columns=[c for c in ("n_runs", "within_sd_a", "within_sd_b", "mixed_diff", "mixed_p") if c in frame])
        frame = frame.drop(columns=[c for c in repeated_columns(self.pairs) if c in frame])
        return frame

    @property
    def clustering(self) -> str:
        """How the paired tests' p was computed (``paired.clustering_line``)."""
        return clustering_line(self.pairs)

    @property
    def computed_correlations(self) -> list[dict[str, Any]]:
        return computed(self.correlations)

    @property
    def skipped_correlations(self) -> list[str]:
        """Why the other rows were not computed, one line per reason (``correlate.not_computed``)."""
        return not_computed(self.correlations)

    @property
    def skipped_heading(self) -> str:
        n, total = len(self.correlations) - len(self.computed_correlations), len(self.correlations)
        if n == total:
            return f"None of the {total} correlations could be computed"
        return f"Not computed: {n} of {total} correlations"

    def _rows(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``rows`` with their batch columns in a study of several batches; as they are for one batch."""
        return batch_rows(rows, self.batches) if self.batches else rows

    def _frame(self, frame: pd.DataFrame) -> pd.DataFrame:
        return batch_frame(frame, self.batches) if self.batches else frame

    def _batch_row(self, table: str) -> str:
        """A comparison table (configs its columns) with each config's batch in a row under the header."""
        if not self.batches:
            return table
        lines = table.split("\n")
        return "\n".join([*lines[:2], "| batch | " + " | ".join(self.batches[c] for c in self.configs) + " |", *lines[2:]])
