"""The append-only JSONL trace of one run.

Each line is one immutable event, written and fsynced as the run goes, and
chained to the previous line by hash so an edited or reordered trace is
detectable. A crash can leave at most a torn last line: ``read_trace``
reports it and, when asked, cuts the file back to the last whole event so the
run can resume from there.

A trace is never read or written through a symbolic link: one planted under
``traces/`` would otherwise have its target (anywhere on disk) truncated by a
repair or appended to by a writer. Opening such a path raises
``TraceSymlinkError`` naming it. Known API keys are scrubbed from every line
before it is written (``madbench.gateway.secrets``).

A committed run's trace is stored compressed (zstd, ``<trace>.zst`` beside its plain path: ``compress_trace``):
``read_trace`` reads either form at the plain path's name, and a writer that continues a compressed trace (a failed
run tried again) turns it back into the plain file first. Where both exist (a crash between the two steps), the
plain one is the trace.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from madbench.data.atomic import atomic_write_bytes
from madbench.data.errors import InputError
from madbench.debate.events import AnyEvent, Event, parse_event
from madbench.gateway.secrets import redact_known

GENESIS = "0" * 64


class TraceSymlinkError(InputError):
    """A trace path is a symbolic link: madbench refuses to read, repair or append through it. Bad input (something
    other than madbench planted it), so its message is a plain one-line ``InputError`` naming the path."""

    def __init__(self, path: Path):
        try:
            target = f" (to {os.readlink(path)})"
        except OSError:
            target = ""
        super().__init__(path, f"the trace is a symbolic link{target}; madbench never reads or writes a trace through one",
                         "remove the link and run the same command again (the file it points to is left alone)")
        self.path = path

    def __reduce__(self):
        return type(self), (self.path,)


def _open(path: Path, flags: int) -> int:
    """``os.open`` that never follows a symbolic link at ``path`` itself (O_NOFOLLOW: no check-then-open race)."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o666)
    except OSError:
        if path.is_symlink():
            raise TraceSymlinkError(path) from None
        raise


#: A compressed trace's name: the plain trace's with this suffix; zstd at this level (a rule-based run's trace of
#: 118 KB is 14 KB, in 2 ms).
COMPRESSED_SUFFIX, ZSTD_LEVEL = ".zst", 9


def compressed_path(path: str | Path) -> Path:
    path = Path(path)
    return path.with_name(path.name + COMPRESSED_SUFFIX)


def stored_trace(path: str | Path) -> Path | None:
    """Where the trace whose plain path is ``path`` is stored: the plain file, else its compressed form, else None.
    A symbolic link at either is returned (and refused when read)."""
    for p in (Path(path), compressed_path(path)):
        if p.exists() or p.is_symlink():
            return p
    return None


def _read_stored(path: Path) -> bytes:
    """The bytes of the trace at plain path ``path`` in whichever form it is stored (b"" for none)."""
    found = stored_trace(path)
    if found is None:
        return b""
    if found.is_symlink():
        raise TraceSymlinkError(found)
    with os.fdopen(_open(found, os.O_RDONLY), "rb") as fh:
        data = fh.read()
    if found == path:
        return data
    try:
        return pa.CompressedInputStream(pa.BufferReader(data), "zstd").read()
    except (OSError, pa.ArrowInvalid) as exc:
        raise InputError(found, f"not a whole zstd-compressed trace ({str(exc).splitlines()[0][:120]})",
                         "restore it from a copy of the results (a committed run's trace was whole when compressed)") from None


def trace_bytes(path: str | Path) -> bytes | None:
    """The trace at plain path ``path`` as its plain lines, whichever form it is stored in; None when there is none."""
    return None if stored_trace(path) is None else _read_stored(Path(path))


def compress_trace(path: str | Path) -> Path:
    """Store the plain trace at ``path`` compressed (written whole, then the plain file removed); the compressed path."""
    path = Path(path)
    target = compressed_path(path)
    if not path.exists() and not path.is_symlink():
        return target  # compressed already
    with os.fdopen(_open(path, os.O_RDONLY), "rb") as fh:
        data = fh.read()
    atomic_write_bytes(target, pa.Codec("zstd", ZSTD_LEVEL).compress(data, asbytes=True))
    path.unlink()
    return target


def decompress_trace(path: str | Path) -> None:
    """Turn the compressed trace of plain path ``path`` back into the plain file, to append to (nothing when the plain
    file is there or no trace is)."""
    path = Path(path)
    if path.exists() or path.is_symlink() or stored_trace(path) is None:
        return
    atomic_write_bytes(path, _read_stored(path))
    compressed_path(path).unlink()


def _line(record: dict[str, Any]) -> bytes:
    return (json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_default) + "\n").encode()


def _default(obj):
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    raise TypeError(f"not JSON-serialisable in a trace: {type(obj).__name__}")


@dataclass
class TraceReadout:
    #: The raw records of every whole, chained line (what the hash chain covers).
    events: list[dict[str, Any]]
    problems: list[str] = field(default_factory=list)
    good_bytes: int = 0

    def typed(self) -> list[AnyEvent]:
        """The events as their pydantic models (``madbench.debate.events``); a line that matches no model raises."""
        return [parse_event(e) for e in self.events]


def read_trace(path: str | Path, repair: bool = False) -> TraceReadout:
    """All whole, chained events; a torn or corrupt tail is reported (and cut off with ``repair``)."""
    path = Path(path)
    if path.is_symlink():
        raise TraceSymlinkError(path)
    if repair:
        decompress_trace(path)  # a repair cuts the plain file
    data = _read_stored(path)
    events: list[dict[str, Any]] = []
    problems, offset, prev = [], 0, GENESIS
    for raw in data.splitlines(keepends=True):
        if not raw.endswith(b"\n"):
            problems.append(f"{path}: torn last line at byte {offset} ({len(raw)} bytes without a newline)")
            break
        try:
            rec = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            problems.append(f"{path}: unreadable event at byte {offset}: {exc}")
            break
        if not isinstance(rec, dict) or rec.get("prev") != prev or rec.get("seq") != len(events):
            problems.append(f"{path}: event at byte {offset} breaks the hash chain (edited, reordered or foreign)")
            break
        events.append(rec)
        prev = hashlib.sha256(raw).hexdigest()
        offset += len(raw)
    if repair and offset < len(data):
        with os.fdopen(_open(path, os.O_RDWR), "r+b") as fh:
            fh.truncate(offset)
            fh.flush()
            os.fsync(fh.fileno())
    return TraceReadout(events, problems, offset)


class TraceWriter:
    def __init__(self, path: str | Path, fsync_each: bool = False):
        """Each event is flushed to the operating system as it is written, so a killed process loses none of it; the
        file is fsynced on ``sync()`` and ``close()`` (before a run commits), or after every event with
        ``fsync_each`` (an fsync per event costs milliseconds, and only a machine that loses power needs it: there
        a torn tail is cut off on resume and its calls are served again from the response cache)."""
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        decompress_trace(self.path)  # a committed trace continued (a failed run tried again) is appended to plain
        existing = read_trace(self.path)
        if existing.problems:
            raise RuntimeError(f"trace needs repair before appending: {existing.problems[0]}")
        self.seq = len(existing.events)
        self.prev = hashlib.sha256(_line_of(self.path, existing)).hexdigest() if existing.events else GENESIS
        self._fh = os.fdopen(_open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "ab")
        self._fsync_each = fsync_each

    def write(self, event: Event) -> Event:
        """Append ``event`` (its seq, prev and t are set here), flushed, chained to the previous line."""
        event = event.model_copy(update={"seq": self.seq, "prev": self.prev, "t": round(time.time(), 6)})
        line = redact_known(_line(event.model_dump(mode="json")).decode(), named=False).encode()
        self._fh.write(line)
        self._fh.flush()
        if self._fsync_each:
            os.fsync(self._fh.fileno())
        self.seq += 1
        self.prev = hashlib.sha256(line).hexdigest()
        return event

    def sync(self) -> None:
        """Make every event written so far durable (before the run's result is committed)."""
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        if not self._fh.closed:
            self.sync()
            self._fh.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _line_of(path: Path, readout: TraceReadout) -> bytes:
    with os.fdopen(_open(path, os.O_RDONLY), "rb") as fh:
        data = fh.read(readout.good_bytes)
    return data.splitlines(keepends=True)[-1]
