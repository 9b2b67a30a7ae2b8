"""A batch's table rows as its writers append them, and the tables merged from them.

Each writer (a runner actor; the driver, for the runs it commits from another node or rebuilds from their traces)
appends one line per committed run to a log of its own, ``parts/rows-<writer>.jsonl``: the run's rows of every table
and the attempts its trace held. A line goes out in one ``write`` and is synced before the writer reports the run,
so a crash can tear only the last line of a log, which then holds no run (that run, committed without rows, has
them rebuilt from its trace when the batch resumes). A run's rows are those of its line with the most attempts: a
failed run retried and committed again replaces its rows.

Compaction (``merge``) folds the logs into the tables, one Parquet file each, and removes the logs it folded: a
batch's rows cost one file per table and one log per writer, never a file per run. A directory written before this
format (results format 5 and older) holds a Parquet part per run and table under ``parts/<table>/``; those are the
base of its first compaction and removed once the tables hold them.

The same log, in another folder and for another table, keeps `madbench rescore`'s score rows
(``madbench.results.scorelog``): a line may then carry a run's ``failure`` record instead of rows.
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
    #: Why the run has no rows (a re-scoring's failure record: ``madbench.results.scorelog``); None for a run's rows.
    failure: dict[str, Any] | None = None


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
    """This writer's row log in a batch directory (its ``parts/``, or ``folder``), created at its first line.
    ``sync``: each line synced before ``append`` returns (a writer whose lines are folded at once, and rebuilt from
    what they were built from if the machine goes down before, syncs only the table they are folded into)."""

    def __init__(self, dirs: BatchDirs | Path, writer: str | None = None, sync: bool = True):
        folder = dirs.parts_dir if isinstance(dirs, BatchDirs) else Path(dirs)
        self.path = folder / f"{LOG_PREFIX}{writer or writer_name()}{LOG_SUFFIX}"
        self.sync = sync
        self._fd: int | None = None

    def append(self, entry: Entry) -> None:
        tables = {t: [_sparse(row, t, self.path) for row in rows] for t, rows in entry.tables.items()}
        body: dict[str, Any] = {"run_id": entry.run_id, "attempts": entry.attempts, "tables": tables}
        if entry.failure is not None:
            body["failure"] = entry.failure
        line = json.dumps(body, default=_plain, separators=(",", ":")).encode() + b"\n"
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
        if self.sync:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def logs(dirs: BatchDirs) -> list[Path]:
    """Every row log of the batch, in name order."""
    return logs_in(dirs.parts_dir)


def logs_in(folder: Path) -> list[Path]:
    """Every row log in ``folder``, in name order."""
    return sorted(folder.glob(f"{LOG_PREFIX}*{LOG_SUFFIX}")) if folder.is_dir() else []


#: What to do about a damaged log of a batch's table rows.
REBUILD_ROWS = ("delete the log and run the batch's `madbench run` command again: it rebuilds the rows of every "
                "committed run from its trace")


def _entries(path: Path, start: int = 0, tables: tuple[str, ...] = TABLES,
             fix: str = REBUILD_ROWS) -> Iterator[tuple[int, Entry, int]]:
    """(line number from ``start``, entry, offset after its line) of each whole line of the log at ``path`` from byte
    ``start``, read a line at a time: each run's rows of ``tables``. A last line without its newline is a write a crash
    tore (not read); any other line that is not an entry is damage (an InputError saying ``fix``). A log a compaction
    folded and removed meanwhile has no line."""
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
                failure = d.get("failure")
                if failure is not None and not isinstance(failure, dict):
                    raise TypeError(f"its failure is {type(failure).__name__}, not a record")
                entry = Entry(str(d["run_id"]), int(d["attempts"]),
                              {t: [_dense(row, t) for row in d["tables"][t]] for t in tables}, failure)
            except (ValueError, KeyError, TypeError) as exc:
                raise InputError(path, f"line {n} after byte {start} is not a run's rows ({type(exc).__name__}: {exc})",
                                 fix) from None
            yield n, entry, offset


def read_log(path: Path, start: int = 0, tables: tuple[str, ...] = TABLES,
             fix: str = REBUILD_ROWS) -> tuple[list[Entry], int]:
    """The entries of the whole lines of the log at ``path`` from byte ``start`` (``_entries``: each run's rows of
    ``tables``; ``fix``, what a damaged line's error says to do), and the offset after the last of them."""
    entries, end = [], start
    for _, entry, after in _entries(path, start, tables, fix):
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
    """The rows the tables held before the logs: the compacted table's, with an older directory's per-run parts in
    place of their runs' rows. Both: a compaction killed while it removed the parts it had folded leaves the table
    holding the removed ones' rows and the parts left holding theirs."""
    path = dirs.table(table)
    return over_parts(read_table(path, table) if path.exists() else concat([], table), legacy_parts(dirs, table), table)


def over_parts(held: pa.Table, parts: list[Path], table: str) -> pa.Table:
    """``held``'s rows of the runs no per-run Parquet part in ``parts`` holds, then the parts' rows."""
    if not parts:
        return held
    loose = concat([read_table(p, table) for p in parts], table)
    held = held.filter(pc.invert(pc.is_in(held.column("run_id"), loose.column("run_id").unique())))
    return concat([held, loose], table)


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
    #: The logs folded (which an error reads again to name the line at fault).
    paths: list[Path] = field(default_factory=list)


def _chosen(paths: list[Path], tables: tuple[str, ...], fix: str) -> dict[int, set[int]]:
    """Log index → the numbers of its lines that hold a run's rows: each run's line with the most attempts (of two
    with as many, the later: the same trace's rows); a line holding a ``failure`` record holds no rows, and is
    passed over."""
    chosen: dict[str, tuple[int, int, int]] = {}  # run id → (attempts, log, line number)
    for i, path in enumerate(paths):
        for n, entry, _ in _entries(path, 0, tables, fix):
            held = chosen.get(entry.run_id)
            if entry.failure is None and (held is None or entry.attempts >= held[0]):
                chosen[entry.run_id] = (entry.attempts, i, n)
    wanted: dict[int, set[int]] = {}
    for _, i, n in chosen.values():
        wanted.setdefault(i, set()).add(n)
    return wanted


def _chosen_entries(paths: list[Path], wanted: dict[int, set[int]], tables: tuple[str, ...],
                    fix: str) -> Iterator[tuple[Path, int, Entry]]:
    """(log, line number, entry) of each line ``_chosen`` chose, in log order."""
    for i, path in enumerate(paths):
        lines = wanted.get(i, set())
        for n, entry, _ in _entries(path, 0, tables, fix) if lines else ():
            if n in lines:
                yield path, n, entry


def fold(paths: list[Path], where: str | Path, tables: tuple[str, ...] = TABLES, fix: str = REBUILD_ROWS) -> Logged:
    """The rows of ``tables`` of ``paths``' lines, each run's from its line with the most attempts (``_chosen``),
    read in two passes so that memory holds a small index of every run and the Arrow tables, never every line's rows
    as Python objects: the first pass finds each run's line, the second converts those lines ``FOLD_CHUNK`` runs at a
    time. A run whose line is gone by the second pass (its log folded and removed by a compaction meanwhile) is not
    among ``run_ids``: the tables hold its rows by then."""
    wanted = _chosen(paths, tables, fix)
    parts: dict[str, list[pa.Table]] = {t: [] for t in tables}
    read: list[str] = []
    batch: list[tuple[Path, int, Entry]] = []

    def convert() -> None:
        for t in tables:
            rows = [row for _, _, e in batch for row in e.tables[t]]
            if not rows:
                continue
            try:
                parts[t].append(to_table(rows, t, where))
            except InputError:
                for path, n, e in batch:  # the line at fault named (this error's cost only)
                    try:
                        to_table(e.tables[t], t, path)
                    except InputError as exc:
                        raise InputError(path, f"line {n}: {exc.problem}", exc.fix) from None
                raise
        read.extend(e.run_id for _, _, e in batch)
        batch.clear()

    for line in _chosen_entries(paths, wanted, tables, fix):
        batch.append(line)
        if len(batch) >= FOLD_CHUNK:
            convert()
    convert()
    # An open column (a metric's ``x_…``) is typed by its values chunk by chunk: all None in one, numbers in another,
    # integers in one and fractions in another (a double, as one chunk of both gives).
    folded = {}
    for t, p in parts.items():
        try:
            folded[t] = pa.concat_tables(p, promote_options="permissive") if p else concat([], t)
        except (pa.ArrowTypeError, pa.ArrowInvalid):
            raise _mixed(paths, t, _open_types(p)) from None
    return Logged(pa.array(sorted(read), pa.large_string()), folded, paths)


def _kind(value: Any) -> str | None:
    """The kind of an open column's value as Arrow types it: what one column cannot hold two of."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return "text" if isinstance(value, str) else type(value).__name__


def _open_types(tables: list[pa.Table]) -> dict[str, set[pa.DataType]]:
    """Each column's types other than null across ``tables``."""
    types: dict[str, set[pa.DataType]] = {}
    for t in tables:
        for f in t.schema:
            if not pa.types.is_null(f.type):
                types.setdefault(f.name, set()).add(f.type)
    return types


def _arrow_kind(kind: pa.DataType) -> str:
    if pa.types.is_boolean(kind):
        return "a boolean"
    if pa.types.is_integer(kind) or pa.types.is_floating(kind):
        return "a number"
    return "text" if pa.types.is_string(kind) or pa.types.is_large_string(kind) else str(kind)


def _mixed(paths: list[Path], table: str, types: dict[str, set[pa.DataType]], held: Path | None = None,
           held_types: dict[str, set[pa.DataType]] | None = None) -> InputError:
    """The error of an open column that cannot hold the logs' values (a number in one run, text in another, or text
    where the compacted table ``held`` holds numbers): the column and the lines that disagree, found by reading the
    chosen lines again (this error's cost only)."""
    mixed = {name for name, kinds in types.items() if len({_arrow_kind(k) for k in kinds}) > 1}
    seen: dict[str, tuple[str, Path | None, int, str]] = {}  # column → (kind, log, line, run id) of its first value
    for name, kinds in (held_types or {}).items():  # what the compacted table holds comes first
        if name in mixed and kinds:
            seen[name] = (_arrow_kind(next(iter(kinds))), None, 0, "")
    fix = ("a column holds one kind of value in every run: make the code that gives {name} give it one kind (None "
           "where a run has none), delete the results of the runs it gave the other and run the batch's `madbench "
           "run` again")
    only = (table,)  # the lines read again for this table alone
    for path, n, entry in _chosen_entries(paths, _chosen(paths, only, REBUILD_ROWS), only, REBUILD_ROWS):
        for row in entry.tables[table]:
            for name in mixed:
                kind = _kind(row.get(name))
                first = seen.setdefault(name, (kind, path, n, entry.run_id)) if kind else None
                if first and first[0] != kind:
                    other = (f"the compacted table {held} holds {first[0]}" if first[1] is None else
                             f"{first[0]} in run {first[3]} ({first[1].name} line {first[2]})")
                    return InputError(path, f"line {n}: {table} column {name} holds {kind} in run {entry.run_id} and "
                                            f"{other}", fix.format(name=name))
    return InputError(held or (paths[0].parent if paths else None),
                      f"the {table} rows hold column(s) of two kinds ({', '.join(sorted(mixed)) or 'unknown'})",
                      fix.format(name="them"))


def merge(base: pa.Table, logged: Logged, table: str, held: Path | None = None) -> pa.Table:
    """``base``'s rows of the runs not logged, then the logged rows, in run id order (a run's rows in the order its
    trace gave them: the order a part per run gave). ``held``: the file ``base`` was read from, which an error names."""
    if table == "calls":
        base = base.filter(pc.invert(is_ledger(base)))
    if len(logged.run_ids):
        base = base.filter(pc.invert(pc.is_in(base.column("run_id"), logged.run_ids)))
    try:
        merged = concat([base, logged.tables[table]], table)
    except (pa.ArrowTypeError, pa.ArrowInvalid):
        held_types = _open_types([base])
        types = {name: held_types.get(name, set()) | kinds
                 for name, kinds in _open_types([logged.tables[table]]).items()}
        raise _mixed(logged.paths, table, types, held, held_types) from None
    if not merged.num_rows:
        return merged
    return merged.take(pc.array_sort_indices(merged.column("run_id")))  # stable: a run's rows keep their order


def snapshot(dirs: BatchDirs, table: str, committed: set[str]) -> pa.Table:
    """``table`` as its committed runs stand, before compaction: the logs read first (a log a compaction removes
    meanwhile is in the table read after it), then the tables, filtered to ``committed``; no ledger rows."""
    logged = fold(logs(dirs), dirs.parts_dir)
    merged = merge(base_table(dirs, table), logged, table, dirs.table(table))
    return merged.filter(pc.is_in(merged.column("run_id"), pa.array(sorted(committed), pa.large_string())))
