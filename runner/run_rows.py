"""A driver's view of chosen runs' rows of runs.parquet as they commit: what a sequential batch or a sweep looks at.

The rows are in the compacted runs.parquet (an earlier invocation's runs, read once) or in the writers' row logs
(this invocation's, read as they grow: ``madbench.results.rowlog.LogTail``), never in a file per run.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from madbench.results import BatchDirs, read_table
from madbench.results.rowlog import LogTail


class CommittedRows:
    """``columns`` of the runs in ``run_ids``, as the tables and the row logs hold them."""

    def __init__(self, root: str | Path, run_ids: Iterable[str], columns: list[str]):
        dirs = BatchDirs(root)
        self.ids, self.columns = set(run_ids), ["run_id", *columns]
        self.found: dict[str, dict[str, Any]] = {}
        if dirs.table("runs").exists():
            for row in read_table(dirs.table("runs"), "runs").select(self.columns).to_pylist():
                if row["run_id"] in self.ids:
                    self.found[row["run_id"]] = row
        self.tail = LogTail(dirs)

    def get(self, run_id: str) -> dict[str, Any] | None:
        """The run's row (its ``columns``), or None when no row of it is written yet."""
        for e in self.tail.new():
            if e.run_id in self.ids and e.tables["runs"]:
                self.found[e.run_id] = {c: e.tables["runs"][0].get(c) for c in self.columns}
        return self.found.get(run_id)
