"""Reading a stored trace as a results reader needs it: typed events, each attempt's format version checked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from madbench.debate.events import AnyEvent
from madbench.debate.trace import read_trace
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
