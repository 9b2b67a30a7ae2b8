"""A batch's table rows as its writers append them, and the tables merged from them.

Each writer (a runner actor; the driver, for the runs it commits from another node or rebuilds from their traces)
appends one line per committed run to a log of its own, ``parts/rows-<writer>.jsonl``: the run's rows of every table
and the attempts its trace held. A line goes out in one ``write`` and is synced before the writer reports the run,
so a crash can tear only the last line of a log, which then holds no run (that run, committed without rows, has
them rebuilt from its trace when the batch resumes). A run's rows are those of its line with the most attempts: a
failed run retried and committed again replaces its rows.

Compaction (``merge``) folds the logs into the tables, one Parquet file each, and removes the logs it folded: a
batch's rows cost one file per table and one log per writer, never a file per run. A directory written before this
format (results format 4 and older) holds a Parquet part per run and table under ``parts/<table>/``; those are the
base of its first compaction and removed once the tables hold them.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from madbench.data.errors import InputError
from madbench.results.layout import TABLES, BatchDirs
from madbench.results.table_schemas import SPECS, concat, read_table, to_table

#: A row log's file name: ``rows-<writer>.jsonl`` under ``parts/``.
LOG_PREFIX, LOG_SUFFIX = "rows-", ".jsonl"


@dataclass
class Entry:
    """One committed run's rows of every table, as one line of a row log holds them."""

    run_id: str
    attempts: int
    tables: dict[str, list[dict[str, Any]]]


def _plain(value: Any) -> Any:
    """A numpy scalar (a pandas or numpy computation's result) as the Python value JSON writes."""
    item = getattr(value, "item", None)
    if callable(item):
        return item()
    raise TypeError(f"a table row holds {type(value).__name__} {value!r}, which JSON cannot write")


def _sparse(row: dict[str, Any], table: str, where: Path) -> dict[str, Any]:
    """``row`` as a log line holds it: its declared columns without a value left out (``_dense`` puts them back), so
    a log costs what the run's values do, not its table's width. A row lacking a declared column is refused here,
    as ``to_table`` would refuse it."""
    declared = SPECS[table].schema.names
    missing = [n for n in declared if n not in row]
    if missing:
        raise InputError(where, f"a {table} row lacks the declared column(s) {', '.join(missing)}",
                         "the code building the row must give every declared column (None where it has no value)")
    names = set(declared)
    return {k: v for k, v in row.items() if v is not None or k not in names}


def _dense(row: dict[str, Any], table: str) -> dict[str, Any]:
    """A logged row with every declared column (None where the line left it out)."""
    return dict.fromkeys(SPECS[table].schema.names) | row


def writer_name() -> str:
    """A name no other writer of any node has: host, process and a random part."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"


class RowLog:
    """This writer's row log in a batch directory, created at its first line."""

    def __init__(self, dirs: BatchDirs, writer: str | None = None):
        self.path = dirs.parts_dir / f"{LOG_PREFIX}{writer or writer_name()}{LOG_SUFFIX}"
        self._fd: int | None = None

    def append(self, entry: Entry) -> None:
        tables = {t: [_sparse(row, t, self.path) for row in rows] for t, rows in entry.tables.items()}
        line = json.dumps({"run_id": entry.run_id, "attempts": entry.attempts, "tables": tables},
                          default=_plain, separators=(",", ":")).encode() + b"\n"
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
                               | getattr(os, "O_CLOEXEC", 0), 0o666)
            dir_fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)  # the log's name survives a crash with its first line
            finally:
                os.close(dir_fd)
        written = os.write(self._fd, line)
        if written != len(line):  # a regular file takes a whole write or raises (ENOSPC): never seen, never ignored
            raise OSError(f"{self.path}: wrote {written} of {len(line)} bytes of run {entry.run_id}'s rows")
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def logs(dirs: BatchDirs) -> list[Path]:
    """Every row log of the batch, in name order."""
    return sorted(dirs.parts_dir.glob(f"{LOG_PREFIX}*{LOG_SUFFIX}")) if dirs.parts_dir.is_dir() else []


def _entries(path: Path, start: int = 0) -> Iterator[tuple[int, Entry, int]]:
    """(line number from ``start``, entry, offset after its line) of each whole line of the log at ``path`` from byte
    ``start``, read a line at a time. A last line without its newline is a write a crash tore (not read); any other
    line that is not an entry is damage. A log a compaction folded and removed meanwhile has no line."""
    try:
        fh = open(path, "rb")  # noqa: SIM115 (closed by the ``with`` below; a missing log is not an error)
    except FileNotFoundError:
        return  # folded into the tables and removed by a compaction meanwhile
    with fh:
        fh.seek(start)
        offset = start
        for n, raw in enumerate(fh, 1):
            if not raw.endswith(b"\n"):
                return
            offset += len(raw)
            try:
                d = json.loads(raw)
                entry = Entry(str(d["run_id"]), int(d["attempts"]),
                              {t: [_dense(row, t) for row in d["tables"][t]] for t in TABLES})
            except (ValueError, KeyError, TypeError) as exc:
                raise InputError(path, f"line {n} after byte {start} is not a run's rows ({type(exc).__name__}: {exc})",
                                 "delete the log and run the batch's `madbench run` command again: it rebuilds the "
                                 "rows of every committed run from its trace") from None
            yield n, entry, offset


def read_log(path: Path, start: int = 0) -> tuple[list[Entry], int]:
    """The entries of the whole lines of the log at ``path`` from byte ``start`` (``_entries``), and the offset after
    the last of them."""
    entries, end = [], start
    for _, entry, after in _entries(path, start):
        entries.append(entry)
        end = after
    return entries, end


@dataclass
class LogTail:
    """The row logs of a batch read as they grow: each call gives the lines written since the last."""

    dirs: BatchDirs
    offsets: dict[Path, int] = field(default_factory=dict)

    def new(self) -> list[Entry]:
        out: list[Entry] = []
        for path in logs(self.dirs):
            entries, self.offsets[path] = read_log(path, self.offsets.get(path, 0))
            out += entries
        return out


def latest(entries: Iterable[Entry]) -> dict[str, Entry]:
    """Each run's entry with the most attempts (of two with as many, the later: the same trace's rows)."""
    out: dict[str, Entry] = {}
    for e in entries:
        if e.run_id not in out or e.attempts >= out[e.run_id].attempts:
            out[e.run_id] = e
    return out


def legacy_parts(dirs: BatchDirs, table: str) -> list[Path]:
    """A results directory of format 4 or older: its per-run Parquet parts of ``table``."""
    folder = dirs.parts(table)
    return sorted(folder.glob("*.parquet")) if folder.is_dir() else []


def base_table(dirs: BatchDirs, table: str) -> pa.Table:
    """The rows the tables held before the logs: an older directory's per-run parts, else the compacted table."""
    parts = legacy_parts(dirs, table)
    if parts:
        return concat([read_table(p, table) for p in parts], table)
    path = dirs.table(table)
    return read_table(path, table) if path.exists() else concat([], table)


def is_ledger(table: pa.Table) -> pa.Array:
    """calls.parquet's rows of the ledger's untraced calls (``call_id`` set), which compaction recomputes."""
    return pc.is_valid(table.column("call_id")) if "call_id" in table.column_names else pa.array([False] * table.num_rows)


#: Runs whose logged rows become Arrow columns at once while logs are folded: what bounds a fold's Python objects (a
#: run's rows as dicts take several times their Arrow size, and a 3-agent debate's line is about 23 KB of JSON).
FOLD_CHUNK = 1_000


@dataclass
class Logged:
    """What the row logs hold: each logged run's rows of its line with the most attempts, as tables."""

    run_ids: pa.Array
    tables: dict[str, pa.Table]


def fold(paths: list[Path], where: str | Path) -> Logged:
    """The rows of ``paths``' lines, each run's from its line with the most attempts (of two with as many, the later:
    the same trace's rows), read in two passes so that memory holds a small index of every run and the Arrow tables,
    never every line's rows as Python objects: the first pass finds each run's line, the second converts those lines
    ``FOLD_CHUNK`` runs at a time. A run whose line is gone by the second pass (its log folded and removed by a
    compaction meanwhile) is not among ``run_ids``: the tables hold its rows by then."""
    chosen: dict[str, tuple[int, int, int]] = {}  # run id → (attempts, log, line number)
    for i, path in enumerate(paths):
        for n, entry, _ in _entries(path):
            held = chosen.get(entry.run_id)
            if held is None or entry.attempts >= held[0]:
                chosen[entry.run_id] = (entry.attempts, i, n)
    wanted: dict[int, set[int]] = {}
    for _, i, n in chosen.values():
        wanted.setdefault(i, set()).add(n)
    del chosen
    parts: dict[str, list[pa.Table]] = {t: [] for t in TABLES}
    read: list[str] = []
    batch: list[Entry] = []

    def convert() -> None:
        for t in TABLES:
            rows = [row for e in batch for row in e.tables[t]]
            if rows:
                parts[t].append(to_table(rows, t, where))
        read.extend(e.run_id for e in batch)
        batch.clear()

    for i, path in enumerate(paths):
        lines = wanted.get(i, set())
        for n, entry, _ in _entries(path) if lines else ():
            if n in lines:
                batch.append(entry)
                if len(batch) >= FOLD_CHUNK:
                    convert()
    convert()
    # An open column (a metric's ``x_…``) is typed by its values chunk by chunk: all None in one, numbers in another.
    tables = {t: pa.concat_tables(p, promote_options="permissive") if p else concat([], t) for t, p in parts.items()}
    return Logged(pa.array(sorted(read), pa.large_string()), tables)


def merge(base: pa.Table, logged: Logged, table: str) -> pa.Table:
    """``base``'s rows of the runs not logged, then the logged rows, in run id order (a run's rows in the order its
    trace gave them: the order a part per run gave)."""
    if table == "calls":
        base = base.filter(pc.invert(is_ledger(base)))
    if len(logged.run_ids):
        base = base.filter(pc.invert(pc.is_in(base.column("run_id"), logged.run_ids)))
    merged = concat([base, logged.tables[table]], table)
    if not merged.num_rows:
        return merged
    return merged.take(pc.array_sort_indices(merged.column("run_id")))  # stable: a run's rows keep their order


def snapshot(dirs: BatchDirs, table: str, committed: set[str]) -> pa.Table:
    """``table`` as its committed runs stand, before compaction: the logs read first (a log a compaction removes
    meanwhile is in the table read after it), then the tables, filtered to ``committed``; no ledger rows."""
    logged = fold(logs(dirs), dirs.parts_dir)
    merged = merge(base_table(dirs, table), logged, table)
    return merged.filter(pc.is_in(merged.column("run_id"), pa.array(sorted(committed), pa.large_string())))
