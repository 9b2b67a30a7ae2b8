"""A batch as a reader command (export, replay, diff, report, stats) takes it: only what commit points vouch for.

A run is in a batch once its ``runs/<id>.json`` is written (last, atomically): its trace, table parts and rows may
exist before that, and a row whose commit point is gone is not a run of the batch. So a reader needs the batch's
manifest, refuses a ``runs.parquet`` holding a run no commit point vouches for (one line, before it writes anything),
takes no results file through a symbolic link (``madbench.results.checks``), and says on stderr when the batch is
still running, or was left unfinished, that what it reads is a snapshot of the runs committed so far.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from madbench.data.errors import InputError
from madbench.results import ResultsDir
from madbench.results.records import Manifest
from madbench.runner.lock import lock_holder

_FIX_UNCOMMITTED = ("restore their runs/<id>.json from a copy of the results, or run the batch's `madbench run` command "
                    "again: it runs them again and rebuilds the tables from the committed runs")


def read_committed(root: str | Path, command: str, needs_manifest: bool = True, snapshot: bool = True) -> ResultsDir:
    """``root`` as ``command`` reads it: a batch directory with its manifest (unless not ``needs_manifest``: `madbench
    stats` reads a folder of tables alone), every row of its ``runs.parquet`` vouched for by a commit point (a folder
    of tables copied without their runs, no ``runs/`` nor ``traces/``, is read as its tables), and a snapshot said on
    stderr (``snapshot_note``) when the batch is unfinished: its committed runs, whose parts are then its tables
    (``ResultsDir.table``), the same runs for every reader. Not ``snapshot``: an unfinished batch is refused (replay
    compares a batch's tables with its traces, and an unfinished batch's tables are not yet rebuilt)."""
    results = ResultsDir(root)
    if needs_manifest:
        manifest_of(results)
    table = results.dirs.table("runs").exists() and (results.dirs.traces.is_dir() or results.dirs.commits.is_dir())
    if table and not results.unfinished:  # an unfinished batch's tables are its committed runs' parts
        stray = results.uncommitted("runs")  # a table that cannot be read is an InputError naming it
        if stray:
            raise InputError(results.dirs.table("runs"), f"holds {len(stray)} run(s) no commit point vouches for "
                             f"(no runs/<id>.json), e.g. {stray[0]}", _FIX_UNCOMMITTED)
    if results.unfinished and not snapshot:
        raise InputError(results.root, f"the batch's last invocation has not finished (its manifest says running, or its row logs are not yet "
                         f"folded into the tables), so "
                         f"its tables are not yet rebuilt from its committed runs: {command} needs a finished batch",
                         "run it once the batch has finished (a stopped one: run its `madbench run` command again)")
    note = snapshot_note(results, command, lambda: len(results.committed_ids()))
    if note:
        # A run committed as its driver stopped, before its row log held its rows (or its line torn), has none yet.
        rowless = len(results.committed_ids()) - results.runs["run_id"].nunique()
        if rowless > 0:
            note += (f", {rowless} of them without rows yet (their row log's line was never written or was torn: "
                     f"they are left out; their rows are rebuilt from their traces when the batch's `madbench run` "
                     f"command runs again)")
        print(f"madbench: warning: {note}", file=sys.stderr)
    return results


def manifest_of(results: ResultsDir) -> Manifest:
    """The batch's manifest, or an InputError saying the folder is no batch results directory without it."""
    if results.manifest is None:
        raise InputError(results.root, "no manifest.json here: not a batch results directory (or one copied without "
                         "it), so nothing says which runs it holds",
                         "give the folder `madbench run` wrote, manifest.json included")
    return results.manifest


def snapshot_note(results: ResultsDir, command: str, committed: Callable[[], int]) -> str | None:
    """What ``command`` says of a batch it reads before the batch is done (``committed``: how many committed runs it
    sees): its driver still holding the lock, or a manifest saying ``running`` with no driver left; None for a batch
    that finished or stopped."""
    manifest = results.manifest
    holder = lock_holder(results.root)
    if holder is None and not results.unfinished:
        return None
    n = committed()
    total = len(manifest.runs) if manifest is not None else n
    if holder is not None:
        return (f"{results.root}: the batch is still running ({holder}): {command} reads a snapshot of its {n} "
                f"committed run(s) of {total}")
    why = ("the manifest still says running" if manifest is not None and manifest.state == "running" else
           "its row logs are not yet folded into the tables")
    return (f"{results.root}: the batch's driver stopped before it finished ({why}): "
            f"{command} reads its {n} committed run(s) of {total}")
