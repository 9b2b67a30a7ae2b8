"""A batch's results directory as one object (``open_results``): the tables and manifest of ``madbench.results``, plus
what the runner and the statistics derive from them: its status, statistics and report.

Every file is read through ``madbench.results`` (each when first asked for), so that a notebook opening a large batch
pays only for what it looks at."""

from __future__ import annotations

from pathlib import Path

from madbench.eval.report.page import build_report
from madbench.eval.stats.analysis import Analysis, analyse
from madbench.eval.stats.frame import batch_order, batch_pairs, load_runs
from madbench.eval.stats.sequential_record import batch_summary, read_record
from madbench.eval.stats.sweep_record import read_record as read_sweep_record
from madbench.eval.stats.sweep_record import summary as sweep_summary
from madbench.results import ResultsDir
from madbench.runner.batch_status import BatchStatus, FailureGroup, batch_status, look_lines, require_manifest

__all__ = ["BatchStatus", "FailureGroup", "Results", "check_committed", "look_lines"]


def check_committed(results_dir: str | Path) -> None:
    """Every committed result of a batch directory reads: a corrupt one is named, with what to do, before any work."""
    ResultsDir(results_dir).results()


class Results(ResultsDir):
    """A batch results directory written by `madbench run` (or ``madbench.run``). ``runs``, ``rounds``, ``calls``
    and ``scores`` are pandas DataFrames and ``manifest`` the manifest model, each read when first used
    (``madbench.results.ResultsDir``); ``status()``, ``stats()`` and ``report()`` derive from them."""

    def __init__(self, path: str | Path):
        super().__init__(path)
        self.path = self.root
        require_manifest(path)
        _ = self.manifest  # read now: a manifest of another format version, or a damaged one, is refused before any table

    def __repr__(self) -> str:
        return f"Results({str(self.path)!r})"

    def status(self) -> BatchStatus:
        """The batch's progress and outcome, as `madbench status` reports it."""
        return batch_status(self.path)

    def stats(self, compare: list[str] | None = None, metrics: list[str] | None = None, correction: str = "holm",
              all_pairs: bool = False) -> Analysis:
        """What `madbench stats RESULTS_DIR` computes: summaries, paired tests (the batch's declared pairs unless
        ``all_pairs``), the comparison table, correlations and OLS. ``compare``: configs in column order (default: the
        batch's); ``correction``: holm (default), bh or none, over every pair × metric as one family. Its ``markdown()`` is the printed text, ``write_csvs(dir)`` the CSVs."""
        check_committed(self.path)
        runs = load_runs(self.path)  # the runs table as declared, checked for pairing as `madbench stats` reads it
        rounds = self.rounds if self.dirs.table("rounds").exists() else None
        compare = compare or batch_order(self.path, runs)
        declared = None if all_pairs else batch_pairs(self.path)
        analysis = analyse(runs, str(self.dirs.table("runs")), compare, metrics, correction, rounds, declared)
        record = read_record(self.path)
        if record is not None:  # the looks' adjusted inference leads; the plain paired tests below are naive
            analysis.sequential = batch_summary(record, self.runs)
        swept = read_sweep_record(self.path)
        if swept is not None:  # each arm's adjusted inference leads; the plain paired tests below are naive
            analysis.sweep = sweep_summary(swept, self.runs)
        return analysis

    def report(self, out: str | Path | None = None, compare: list[str] | None = None, correction: str = "holm",
               max_traces: int = 500) -> Path:
        """Write the self-contained report.html (`madbench report`; default RESULTS_DIR/report.html); its path."""
        check_committed(self.path)
        return build_report(self.path, out, compare, correction, max_traces)
