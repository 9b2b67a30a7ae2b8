"""Runs on a node that cannot see the results directory: staged on that node, committed by the driver.

A batch's results live in one place, the driver's results directory (on the head for a `ray job submit` job).
A runner actor whose node sees that directory (the driver's node, or any node when it is on shared storage)
writes there as it goes: the trace appended and fsynced event by event, the result written last. A node that
does not see it (a cloud worker without shared storage) must not write to its own disk and call that
committed. Such an actor runs the debate in a staging directory on its node, with every guarantee of a run
(append-only trace fsynced as it happens, resume from the trace after a crash of the actor), and hands back
the trace, the result and the table parts, which the driver writes into the results directory: the trace,
then the result (the commit point), then the parts, each atomically.

What a worker's disk holds is only the trace of a run in flight. If the node is lost, the run starts again
on another node from the results directory's trace; its paid calls are served by the cluster's cache.

Which mode an actor is in is decided by what it sees: the results directory's lock file holding this
driver's holder line (``madbench.runner.lock.WriterGuard``).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from madbench.data.atomic import atomic_write_bytes
from madbench.debate.trace import compress_trace, compressed_path, stored_trace, trace_bytes
from madbench.gateway.errors import DriverGone
from madbench.results import RunResult
from madbench.results.rowlog import Entry
from madbench.runner.lock import WriterGuard
from madbench.runner.store import BatchLayout

#: Every this many seconds at most, a staged actor checks that its driver is still there.
OWNER_CHECK_S = 2.0
#: Seconds a question to the budget actor may go unanswered before the driver is taken for gone.
OWNER_PATIENCE_S = 60.0


def sees_results(root: str | Path, holder: str) -> bool:
    """Whether this process sees the driver's results directory: its lock, held, with the driver's holder line."""
    try:
        WriterGuard(root, holder)()
    except DriverGone:
        return False
    return True


def staging_root(root: str | Path) -> Path:
    """This node's staging directory for the results directory ``root`` (a path on the driver's machine)."""
    digest = hashlib.sha256(str(root).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / "madbench-staging" / digest


class OwnerGuard:
    """The ``WriterGuard`` of a node that cannot see the lock: the driver is alive while the batch's budget actor,
    which Ray ends with its driver, answers. Raises ``DriverGone`` otherwise; asked at most every few seconds.

    Never blocks the runner actor's event loop (it is asked from inside async runs): each check sends a question and
    reads the previous one's answer if it came; a question unanswered for ``OWNER_PATIENCE_S`` means the driver is
    gone, as a lost actor does."""

    def __init__(self, handle):
        self.handle = handle
        self.checked = float("-inf")
        self.asked: tuple[Any, float] | None = None  # (the ref of the question in flight, when it was sent)

    def __call__(self) -> None:
        import ray
        now = time.monotonic()
        if now - self.checked < OWNER_CHECK_S:
            return
        if self.asked is None:
            self.asked = (self.handle.state.remote(), now)
            return
        ref, since = self.asked
        if not ray.wait([ref], timeout=0)[0]:
            if now - since > OWNER_PATIENCE_S:
                raise DriverGone("the driver that started this work is gone (its budget actor no longer answers)")
            return
        try:
            ray.get(ref, timeout=0)  # ready: returns at once
        except ray.exceptions.RayActorError:
            raise DriverGone("the driver that started this work is gone (its budget actor no longer answers)") from None
        self.checked, self.asked = now, None


def prepare(staged: BatchLayout, run_id: str, head_trace: bytes | None) -> None:
    """Before a run: its staged trace continues the results directory's (``head_trace``), and no stale result or
    parts of it are left here. A staged trace that already extends the head's (an attempt this node began) is kept."""
    path = staged.trace_path(run_id)
    head = head_trace or b""
    local = path.read_bytes() if path.exists() else b""
    if not local.startswith(head):
        if head:
            atomic_write_bytes(path, head)
        else:
            path.unlink()
    staged.result_path(run_id).unlink(missing_ok=True)


def collect(staged: BatchLayout, run_id: str, entry: Entry) -> dict[str, Any]:
    """After a run: its trace and result as bytes (removed from this node: the driver now holds them), and its table
    rows (``entry``), which the driver logs."""
    paths = {"trace": staged.trace_path(run_id), "result": staged.result_path(run_id)}
    out: dict[str, Any] = {name: p.read_bytes() for name, p in paths.items()}
    for p in paths.values():
        p.unlink()
    return out | {"rows": entry}


def commit(layout: BatchLayout, run_id: str, artifacts: dict[str, Any]) -> None:
    """On the driver: write a staged run's files into the results directory: the trace, the result (the commit
    point), then its table rows into the driver's row log. The trace must extend the one already there: traces are
    append-only."""
    trace = artifacts["trace"]
    path = layout.trace_path(run_id)
    before = trace_bytes(path)
    if before is not None and not trace.startswith(before):
        raise RuntimeError(f"{path}: the trace run {run_id} brought back does not extend the {len(before)} bytes "
                           "already there; refusing to replace them (was the results directory written meanwhile?)")
    result = RunResult.model_validate_json(artifacts["result"])
    if result.run_id != run_id:
        raise RuntimeError(f"run {run_id} brought back the result of run {result.run_id}")
    atomic_write_bytes(path, trace)
    compressed_path(path).unlink(missing_ok=True)  # the plain trace just written extends it
    atomic_write_bytes(layout.result_path(run_id), artifacts["result"])
    compress_trace(path)
    entry = artifacts["rows"]
    if entry.run_id != run_id:
        raise RuntimeError(f"run {run_id} brought back the table rows of run {entry.run_id}")
    layout.rows.append(entry)


def head_trace(layout: BatchLayout, run_id: str) -> bytes | None:
    """The results directory's trace of ``run_id`` (None when there is none), to send with a run to a staged actor."""
    found = stored_trace(layout.trace_path(run_id))
    if found is None or found.is_symlink():
        return None  # a link is refused by the run that would read it, with the run's own error, not here
    return trace_bytes(layout.trace_path(run_id))


def job_working_dir() -> Path | None:
    """The working directory of the `ray job submit --working-dir` job this driver is the entrypoint of (its
    current directory: Ray unpacks the upload there on each node, and deletes it when the job's runtime env is
    released); None outside such a job. Ray hands a job's entrypoint its runtime env in this variable."""
    raw = os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR")
    if not raw:
        return None
    runtime_env = (json.loads(raw) or {}).get("runtime_env") or {}
    return Path.cwd().resolve() if runtime_env.get("working_dir") else None


def portable(path: str | Path, working_dir: Path | None) -> str:
    """``path`` as a runner actor on any node should open it: relative to the job's working directory when it is
    inside it (each node has its own copy, at another absolute path), else as given."""
    p = Path(path).resolve()
    if working_dir is not None and p.is_relative_to(working_dir):
        return str(p.relative_to(working_dir)) or "."
    return str(path)
