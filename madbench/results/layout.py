"""Where everything in a results directory lives: the one definition of its layout.

A batch (``madbench run``):

    <root>/manifest.json                 the spec, versions, format version and every run with its status (a snapshot)
    <root>/manifest-journal.jsonl        the runs changed since that snapshot, appended while a driver runs
    <root>/traces/<run>.jsonl            append-only trace of each run in flight; once committed, <run>.jsonl.zst
    <root>/runs/<run>.json               a run's result: written last, atomically (the commit point)
    <root>/parts/rows-<writer>.jsonl     each writer's log of its committed runs' table rows (``rowlog``), until compacted
    <root>/{runs,rounds,calls}.parquet   the tables: the logs merged in at each compaction
    <root>/parts/{runs,rounds,calls}/<run>.parquet   results format 4 and older: a Parquet part per run and table
    <root>/scores/<label>/<run>.parquet  re-scoring, one part per run; failures under <label>/failed/<run>.json
    <root>/budget.json, <root>/.lock     the batch's spend; the lock its one writer holds
    <root>/budget-settled.jsonl          what each paid call billed, appended by the actor that made it (read after a crash)
    <root>/leakage_audit/                a batch's leakage audit (``leakage_audit:``): residue, identify, audit.json

Single debates (``madbench debate --out``): ``<out>/<run>/trace.jsonl`` and ``<out>/<run>/result.json``.
"""

from __future__ import annotations

import os
from pathlib import Path

from madbench.data.names import inside

TABLES = ("runs", "rounds", "calls")
SCORES = "scores"
ORIGINAL = "original"  # the label of the debate's own scores, extracted from its traces
FAILED = "failed"
SCORER = "scorer.json"
AGREEMENT = "agreement.parquet"
AUDIT_AGREEMENT = "audit_agreement.parquet"
MANIFEST = "manifest.json"
#: The manifest's changes since its last snapshot, appended by the driver (``records.ManifestJournal``).
MANIFEST_JOURNAL = "manifest-journal.jsonl"
BUDGET = "budget.json"
#: One line per settled paid call, appended by the runner actor that made it: what a call in flight at a crash
#: was billed, for the next invocation (runner/budget.py).
BUDGET_SETTLED = "budget-settled.jsonl"
#: A batch's leakage audit before its debates (runner/leakage_gate.py): its tables, and audit.json written last.
LEAKAGE_AUDIT = "leakage_audit"
#: A sequential batch's looks and its decision (eval/stats/sequential_record.py).
SEQUENTIAL = "sequential.json"
#: A sweep's looks and each arm's decision (eval/stats/sweep_record.py).
SWEEP = "sweep.json"
LOCK = ".lock"


class DebateDirs:
    """``madbench debate --out``: each run in its own directory."""

    TRACE = "trace.jsonl"
    RESULT = "result.json"

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def run_dir(self, run_id: str) -> Path:
        return inside(self.root, run_id, self.root, "run id")

    def trace_path(self, run_id: str) -> Path:
        return self.run_dir(run_id) / self.TRACE

    def result_path(self, run_id: str) -> Path:
        return self.run_dir(run_id) / self.RESULT

    def manifest_path(self, run_id: str) -> Path:
        return self.run_dir(run_id) / MANIFEST


class BatchDirs:
    """A batch's results directory."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    @property
    def manifest(self) -> Path:
        return self.root / MANIFEST

    @property
    def budget(self) -> Path:
        return self.root / BUDGET

    @property
    def budget_settled(self) -> Path:
        return self.root / BUDGET_SETTLED

    @property
    def lock(self) -> Path:
        return self.root / LOCK

    @property
    def sequential(self) -> Path:
        return self.root / SEQUENTIAL

    @property
    def sweep(self) -> Path:
        return self.root / SWEEP

    @property
    def traces(self) -> Path:
        return self.root / "traces"

    @property
    def commits(self) -> Path:
        """``runs/``: each run's commit point."""
        return self.root / "runs"

    def trace_path(self, run_id: str) -> Path:
        return inside(self.traces, run_id, self.root, "run id", ".jsonl")

    def result_path(self, run_id: str) -> Path:
        return inside(self.commits, run_id, self.root, "run id", ".json")

    def committed_ids(self) -> list[str]:
        """The run id of every committed result, sorted: one listing of ``runs/`` (``*.json``, not a hidden
        temporary), no file opened, names compared as strings (sorting 20,000 paths took most of a no-op run)."""
        try:
            with os.scandir(self.commits) as entries:
                return sorted(e.name[:-5] for e in entries if e.name.endswith(".json") and not e.name.startswith("."))
        except FileNotFoundError:
            return []

    def result_files(self) -> list[Path]:
        """Every committed result's file, in run id order."""
        return [self.commits / f"{run_id}.json" for run_id in self.committed_ids()]

    @property
    def parts_dir(self) -> Path:
        """``parts/``: the writers' row logs (``madbench.results.rowlog``)."""
        return self.root / "parts"

    def parts(self, table: str) -> Path:
        """Results format 4 and older: the folder of ``table``'s per-run parts."""
        return self.root / "parts" / table

    def part(self, table: str, run_id: str) -> Path:
        """Results format 4 and older: a run's part of ``table``."""
        return inside(self.parts(table), run_id, self.root, "run id", ".parquet")

    def table(self, name: str) -> Path:
        return self.root / f"{name}.parquet"

    @property
    def scores(self) -> Path:
        return self.root / SCORES


class ScoreDirs:
    """Re-scoring's tables under a ``scores/`` directory: one part per run and label, and why a run failed."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def label(self, label: str) -> Path:
        return inside(self.root, label, self.root, "score label")

    def part(self, label: str, run_id: str) -> Path:
        return inside(self.label(label), run_id, self.root, "run id", ".parquet")

    def scorer(self, label: str) -> Path:
        """The scorer's model spec and rubric a label was graded with (what `madbench replay` grades it again with)."""
        return self.label(label) / SCORER

    def failure(self, label: str, run_id: str) -> Path:
        return inside(self.label(label) / FAILED, run_id, self.root, "run id", ".json")

    def failures(self, label: str) -> list[Path]:
        return sorted((self.label(label) / FAILED).glob("*.json"))

    def labels(self) -> list[str]:
        """The labels that hold at least one part, ``original`` first."""
        found = sorted(p.name for p in self.root.iterdir() if p.is_dir() and any(p.glob("*.parquet"))) \
            if self.root.is_dir() else []
        return sorted(found, key=lambda name: name != ORIGINAL)


def run_files(root: str | Path) -> list[tuple[Path, Path]]:
    """(trace, its commit file) of every run under ``root``, in either layout: a batch's ``traces/`` and any
    ``<run>/trace.jsonl`` of single debates below it."""
    root = Path(root)
    batch = BatchDirs(root)
    ids = sorted({t.name.removesuffix(".zst").removesuffix(".jsonl") for t in batch.traces.glob("*.jsonl*")
                  if t.name.endswith((".jsonl", ".jsonl.zst"))})
    found = [(batch.trace_path(run_id), batch.result_path(run_id)) for run_id in ids]
    return found + [(t, t.parent / DebateDirs.RESULT) for t in sorted(root.rglob(DebateDirs.TRACE))]


def run_id_of(commit_file: Path) -> str:
    """The run id a commit file is named after: ``<run>/result.json`` or ``runs/<run>.json``."""
    return commit_file.parent.name if commit_file.name == DebateDirs.RESULT else commit_file.stem
