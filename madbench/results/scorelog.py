"""Re-scoring's rows as `madbench rescore` writes them: a row log per writer, folded into one table per label.

Under ``scores/<label>/`` (``ScoreDirs``):

    rows-<writer>.jsonl   the writer's row log (``madbench.results.rowlog``, the batch tables' own format): one line per
                          run graded, with its score rows, or, for a run that could not be graded, with its failure
                          record (the line's ``failure``) and no rows
    scores.parquet        the label's table: every graded run's rows, in run id order (written only with rows)
    failed.jsonl          the runs not graded (yet): one failure record a line, saying why (``jq`` or ``less`` reads it)
    scorer.json           the scorer and rubric the label is graded with (``madbench.scoring.rescore.write_scorer``)

A graded run is never graded again, and its rows never replaced by a later failure; a run's failures are ranked by
their ``attempts`` (the pass that fails it again, or grades it, writes one more). A line is written whole and synced
before the driver goes on, so a kill (kill -9 included) loses at most the run being written: torn, its line is not
read, and the next pass grades it. ``compact`` folds the logs (and an older directory's files) into ``scores.parquet``
and ``failed.jsonl``, atomically, then removes what it folded: a label costs a few files, never one per run, and
whether a run is graded is known from the table's ``run_id`` column and the logs, without a file per run.

A directory of results format 6 or older holds a Parquet part per run (``<run>.parquet``) and a failure record per run
(``failed/<run>.json``): read beneath the table and the logs, and folded in and removed by the label's first compaction
(the next `madbench rescore` of that label).
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from madbench.data.atomic import atomic_write_text
from madbench.data.errors import InputError
from madbench.results.layout import ORIGINAL, ScoreDirs
from madbench.results.rowlog import Entry, RowLog, _entries, fold, logs_in, merge, over_parts
from madbench.results.table_schemas import concat, read_table, to_table, write_table

SCORES = "scores"
#: The tables a score log's lines hold.
LOG_TABLES = (SCORES,)
#: What to do about a damaged score log.
REGRADE = ("delete the log and run the same `madbench rescore` again: it grades again the runs whose lines it held "
           "(their answers come from the cache)")


def logs(dirs: ScoreDirs, label: str) -> list[Path]:
    """The label's row logs, in name order."""
    return logs_in(dirs.label(label))


def legacy_parts(dirs: ScoreDirs, label: str) -> list[Path]:
    """Results format 6 and older: the label's Parquet part per run (``<run>.parquet``)."""
    folder = dirs.label(label)
    return [p for p in sorted(folder.glob("*.parquet")) if p != dirs.table(label)] if folder.is_dir() else []


@dataclass
class Scan:
    """What a label's logs say, read a line at a time (no line's rows kept): the runs graded, and each other run's
    failure record with the most attempts (its ``attempts`` in it)."""

    graded: set[str] = field(default_factory=set)
    failed: dict[str, dict[str, Any]] = field(default_factory=dict)


def scan(dirs: ScoreDirs, label: str) -> Scan:
    out = Scan()
    for path in logs(dirs, label):
        for _, e, _ in _entries(path, 0, LOG_TABLES, REGRADE):
            if e.failure is None:
                out.graded.add(e.run_id)
            elif e.run_id not in out.failed or e.attempts >= out.failed[e.run_id]["attempts"]:
                out.failed[e.run_id] = e.failure | {"attempts": e.attempts}
    return out


def _table_ids(dirs: ScoreDirs, label: str) -> set[str]:
    path = dirs.table(label)
    if not path.exists():
        return set()
    return {str(r) for r in pq.read_table(path, columns=["run_id"]).column("run_id").to_pylist()}


def base_table(dirs: ScoreDirs, label: str) -> pa.Table:
    """The label's rows before its logs: the compacted table, with an older directory's per-run parts (a graded
    run's rows, never rewritten: the table holds the same rows once they are folded) in place of their runs'."""
    path = dirs.table(label)
    return over_parts(read_table(path, SCORES) if path.exists() else concat([], SCORES), legacy_parts(dirs, label), SCORES)


def _record(path: Path, text: str, n: int | None = None) -> dict[str, Any]:
    where = path if n is None else f"{path}, line {n}"
    try:
        record = json.loads(text)
    except ValueError as exc:
        raise InputError(where, f"not a failure record ({exc})", REGRADE.replace("the log", "it")) from None
    if not isinstance(record, dict) or not isinstance(record.get("run_id"), str):
        raise InputError(where, "not a failure record (no run_id)", REGRADE.replace("the log", "it"))
    attempts = record.get("attempts", 1)
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
        raise InputError(where, f"not a failure record (attempts {attempts!r}: not a count of 1 or more)",
                         REGRADE.replace("the log", "it"))
    return record


def base_failures(dirs: ScoreDirs, label: str) -> dict[str, dict[str, Any]]:
    """The failure records before the logs: ``failed.jsonl``'s, and an older directory's ``failed/<run>.json`` (whose
    records have no ``attempts``: one)."""
    out = {}
    for path in dirs.failures(label):
        record = _record(path, path.read_text())
        out[record["run_id"]] = {"attempts": 1} | record
    path = dirs.failed_log(label)
    if path.exists():
        for n, line in enumerate(path.read_text().splitlines(), 1):
            record = _record(path, line, n)
            out[record["run_id"]] = record
    return out


@dataclass
class Index:
    """Which runs a label has graded, and the attempts of each run it has not (that failed): what a pass plans from."""

    graded: set[str] = field(default_factory=set)
    failed: dict[str, int] = field(default_factory=dict)

    def attempt(self, run_id: str) -> int:
        """The number of the run's next attempt at this label."""
        return self.failed.get(run_id, 0) + 1


def index(dirs: ScoreDirs, label: str) -> Index:
    """The label's ``Index``, from the table's ``run_id`` column, the logs and the names of an older directory's files:
    no file opened per run (an older directory's failure records count one attempt each, by name)."""
    logged = scan(dirs, label)
    graded = _table_ids(dirs, label) | {p.stem for p in legacy_parts(dirs, label)} | logged.graded
    failed = {p.stem: 1 for p in dirs.failures(label)}
    path = dirs.failed_log(label)
    if path.exists():
        failed |= {r["run_id"]: int(r.get("attempts", 1)) for n, line in enumerate(path.read_text().splitlines(), 1)
                   for r in [_record(path, line, n)]}
    failed |= {run: int(r["attempts"]) for run, r in logged.failed.items()}
    return Index(graded, {run: n for run, n in failed.items() if run not in graded})


def read_label(dirs: ScoreDirs, label: str) -> pa.Table:
    """The label's rows as they stand: the logs read first (a log a compaction removes meanwhile is in the table read
    after it), then the table (with an older directory's parts), each logged run's rows in place of its rows there."""
    logged = fold(logs(dirs, label), dirs.label(label), LOG_TABLES, REGRADE)
    return merge(base_table(dirs, label), logged, SCORES)


def failures(dirs: ScoreDirs, label: str) -> dict[str, dict[str, Any]]:
    """The label's runs not graded, each with its last failure record (why it could not be graded), by run id."""
    logged = scan(dirs, label)
    graded = _table_ids(dirs, label) | {p.stem for p in legacy_parts(dirs, label)} | logged.graded
    records = base_failures(dirs, label) | logged.failed
    return {run: records[run] for run in sorted(records) if run not in graded}


def labels(scores_dir: str | Path) -> list[str]:
    """The labels under ``scores_dir`` that hold rows, ``original`` first (a label whose every run failed holds none)."""
    dirs = ScoreDirs(scores_dir)
    if not dirs.root.is_dir():
        return []
    found = []
    for folder in sorted(p for p in dirs.root.iterdir() if p.is_dir()):
        name = folder.name
        if dirs.table(name).exists() or legacy_parts(dirs, name) or scan(dirs, name).graded:
            found.append(name)
    return sorted(found, key=lambda name: name != ORIGINAL)


class LabelLog:
    """One writer's log of a label: each run graded (its rows, checked against the table's schema as they are
    appended) or its failure record, one line each, synced unless ``sync`` is False (``RowLog``)."""

    def __init__(self, scores_dir: str | Path, label: str, writer: str | None = None, sync: bool = True):
        self.dirs, self.label = ScoreDirs(scores_dir), label
        self._log = RowLog(self.dirs.label(label), writer, sync)

    @property
    def path(self) -> Path:
        return self._log.path

    def graded(self, run_id: str, attempts: int, rows: list[dict[str, Any]]) -> None:
        to_table(rows, SCORES, self.path)  # a row the table would refuse is refused now, not at the compaction
        self._log.append(Entry(run_id, attempts, {SCORES: rows}))

    def failed(self, run_id: str, attempts: int, record: dict[str, Any]) -> None:
        self._log.append(Entry(run_id, attempts, {SCORES: []}, failure=record))

    def close(self) -> None:
        self._log.close()


def compact(dirs: ScoreDirs, label: str) -> int:
    """Fold the label's logs and an older directory's per-run files into ``scores.parquet`` and ``failed.jsonl`` (each
    written atomically; failed.jsonl removed when no run is left failed), then remove what was folded. A crash at any
    point leaves files that fold again to the same table. Returns the table's rows; with nothing to fold, nothing is
    written."""
    folded = logs(dirs, label)
    parts, records = legacy_parts(dirs, label), dirs.failures(label)
    table_path = dirs.table(label)
    if not folded and not parts and not records:
        return int(pq.read_metadata(table_path).num_rows) if table_path.exists() else 0
    logged = scan(dirs, label)  # the failure records; the rows, a fold of the same logs
    table = merge(base_table(dirs, label), fold(folded, dirs.label(label), LOG_TABLES, REGRADE), SCORES)
    if table.num_rows:
        write_table(table_path, table)
    held = set(table.column("run_id").unique().to_pylist())
    failed = base_failures(dirs, label) | logged.failed
    lines = [json.dumps(failed[run], sort_keys=True) for run in sorted(failed) if run not in held]
    if lines:
        atomic_write_text(dirs.failed_log(label), "\n".join(lines) + "\n")
    else:
        dirs.failed_log(label).unlink(missing_ok=True)
    # Only now that the table and failed.jsonl hold them: a crash before this leaves files that fold again the same.
    for path in folded + parts + records:
        path.unlink(missing_ok=True)
    if records:
        with contextlib.suppress(OSError):
            records[0].parent.rmdir()  # an older directory's failed/, now empty
    return int(table.num_rows)
