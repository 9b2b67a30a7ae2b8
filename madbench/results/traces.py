"""Reading a stored trace as a results reader needs it: typed events, each attempt's format version checked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from madbench.data.errors import InputError
from madbench.debate.events import AnyEvent
from madbench.debate.trace import read_trace, stored_trace
from madbench.results.version import check_version


def check_attempts(records: list[dict[str, Any]], path: str | Path) -> None:
    """Every attempt (``run_start`` record) in a format this code reads, else an InputError naming the trace."""
    for rec in records:
        if rec.get("event") == "run_start":
            check_version(rec.get("format_version"), path, f"attempt {rec.get('attempt')} of run {rec.get('run_id')}")


def read_history(path: str | Path) -> list[AnyEvent]:
    """Every whole event of the trace at ``path`` (every attempt), typed."""
    readout = read_trace(path)
    check_attempts(readout.events, path)
    return readout.typed()


def read_committed_history(path: str | Path) -> list[AnyEvent]:
    """The whole trace of a committed run, typed: the runner syncs a trace before it commits the run, so a missing
    file, a torn or unreadable line or a broken hash chain is damage, an InputError naming the trace; reading on from
    the events before the damage would rebuild, compare or export a shortened run as if it were the run."""
    path = Path(path)
    fix = "restore the trace from a copy of the results (a committed run's trace was whole when it committed)"
    if stored_trace(path) is None:
        raise InputError(path, "the trace of a committed run is missing", fix)
    readout = read_trace(path)
    if readout.problems:
        raise InputError(path, "the trace of a committed run is damaged: "
                         + readout.problems[0].removeprefix(f"{path}: "), fix)
    check_attempts(readout.events, path)
    return readout.typed()
