"""A results directory read as a whole: the one reader the report, the statistics and ``open_results`` use."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

import pandas as pd
import pyarrow as pa

from madbench.data.errors import InputError
from madbench.debate.events import AnyEvent
from madbench.debate.trace import stored_trace
from madbench.results.checks import check_results_dir, check_unlinked_files
from madbench.results.layout import TABLES, BatchDirs, ScoreDirs
from madbench.results.records import Manifest, RunResult, read_manifest, read_result
from madbench.results.rowlog import logs, snapshot
from madbench.results.table_schemas import SPECS, concat, read_table
from madbench.results.traces import read_history


class ResultsDir:
    """A batch's results directory (``madbench run``): its manifest, tables, score parts, results and traces.
    Each table is read once, as its declared schema (``madbench.results.table_schemas``), into a pandas DataFrame."""

    def __init__(self, root: str | Path):
        self.dirs = BatchDirs(root)
        self.root = self.dirs.root
        if not self.root.is_dir():
            raise InputError(root, "not a directory" if self.root.exists() else "not found",
                             "give a batch results directory (written by `madbench run`)")
        check_results_dir(self.root)
        check_unlinked_files(self.root)  # a reader takes no file from elsewhere as the batch's

    @cached_property
    def manifest(self) -> Manifest | None:
        """The batch's manifest; None where there is none (a directory of tables copied without it)."""
        return read_manifest(self.root) if self.dirs.manifest.exists() else None

    @property
    def unfinished(self) -> bool:
        """Whether the batch's last invocation has not finished: its manifest still says ``running`` (a driver at
        work, or one killed). Its compacted tables are then an earlier invocation's, or none."""
        if self.manifest is not None and self.manifest.state == "running":
            return True
        # Row logs not yet folded: a driver killed after its manifest's last snapshot, before its final compaction
        # (or a finished batch run again, stopped before its first): the tables lack the logs' runs.
        return bool(logs(self.dirs))

    def table(self, name: str) -> pd.DataFrame:
        """``runs``, ``rounds`` or ``calls``: the compacted table; an InputError when the batch has not written it.
        Of an ``unfinished`` batch, the parts of its committed runs: the snapshot as it stands, the same runs for
        every reader, whether the invocation has compacted its tables yet or not: the row logs and the table merged
        (``rowlog.snapshot``), never a file per run."""
        if name not in TABLES:
            raise ValueError(f"no table {name!r} in a results directory (one of {', '.join(TABLES)})")
        if self.unfinished:
            return snapshot(self.dirs, name, set(self.committed_ids())).to_pandas()
        path = self.dirs.table(name)
        if not path.exists():
            raise InputError(path, "not found", "run the batch first (`madbench run BATCH.yaml`): it writes the tables")
        return read_table(path, name).to_pandas()

    @cached_property
    def runs(self) -> pd.DataFrame:
        return self.table("runs")

    @cached_property
    def rounds(self) -> pd.DataFrame:
        return self.table("rounds")

    @cached_property
    def calls(self) -> pd.DataFrame:
        return self.table("calls")

    @cached_property
    def scores(self) -> pd.DataFrame:
        """Every ``scores/<label>/<run>.parquet`` part, with its ``label``; the declared empty frame when there is none."""
        return read_scores(self.dirs.scores)

    def result(self, run_id: str) -> RunResult | None:
        """The run's committed result, or None when it has none yet."""
        path = self.dirs.result_path(run_id)
        return read_result(path, run_id) if path.exists() else None

    def committed_ids(self) -> list[str]:
        """The runs a commit point (``runs/<id>.json``, written last) vouches for: the only runs a reader reports."""
        return self.dirs.committed_ids()

    def uncommitted(self, name: str) -> list[str]:
        """The run ids in table ``name`` that no commit point vouches for (rows of runs whose result is gone)."""
        committed = set(self.committed_ids())
        return sorted({str(r) for r in getattr(self, name)["run_id"]} - committed)

    def results(self) -> list[RunResult]:
        """Every committed result, each read (a damaged one is an InputError naming it, with what to do)."""
        return [read_result(p, p.stem) for p in self.dirs.result_files()]

    def trace(self, run_id: str) -> list[AnyEvent] | None:
        """The run's whole trace (every attempt), typed; None when it has none."""
        path = self.dirs.trace_path(run_id)
        return read_history(path) if stored_trace(path) is not None else None


def read_scores(scores_dir: str | Path, label: str | None = None) -> pd.DataFrame:
    """The score parts of ``label`` (of every label when None) under ``scores_dir``, as one frame."""
    dirs = ScoreDirs(scores_dir)
    parts = []
    for name in [label] if label is not None else dirs.labels():
        for path in sorted(dirs.label(name).glob("*.parquet")):
            part = read_table(path, "scores")
            parts.append(part.set_column(part.schema.get_field_index("label"), "label",
                                         pa.array([name] * part.num_rows, pa.large_string())))
    return concat(parts, SPECS["scores"].name).to_pandas()
