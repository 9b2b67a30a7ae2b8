"""What a results directory stores as JSON: each run's result (its commit point) and the batch's manifest.

Every reader of a result or a manifest (run, status, report, stats, rescore) goes through ``read_result`` and
``read_manifest``, so each names a damaged file the same way.
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from madbench.data.atomic import atomic_write_text
from madbench.data.errors import InputError, format_validation_error
from madbench.results.checks import read_unlinked
from madbench.results.layout import MANIFEST, MANIFEST_JOURNAL
from madbench.results.provenance import Provenance, package_versions
from madbench.results.version import FORMAT_VERSION, check_version


class RunResult(BaseModel):
    run_id: str
    status: str  # ok | failed
    error: str | None = None
    scenario_id: str
    invest_quarter: str
    config_name: str
    sample_index: int
    weights: dict[str, float] = Field(default_factory=dict)
    cash: float = 0.0
    method: str | None = None
    rounds_run: int = 0
    rho_bar: float | None = None
    rho_by_round: list[float] = Field(default_factory=list)
    js: dict[str, float] = Field(default_factory=dict)
    interventions: list[dict[str, Any]] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    extras: dict[str, Any] = Field(default_factory=dict)
    metrics: dict[str, Any] | None = None
    baselines: dict[str, dict[str, Any]] = Field(default_factory=dict)
    #: Each debate agent's final allocation backtested alone (the oracle gap's inputs); {} for staged protocols.
    agent_metrics: dict[str, dict[str, Any]] = Field(default_factory=dict)
    totals: dict[str, Any] = Field(default_factory=dict)


_RERUN = ("delete it and run the batch's `madbench run` command again: that run is re-run, resuming from its trace "
          "(kept in traces/) with its paid calls served from the cache")


def read_result(p: Path, run_id: str | None = None) -> RunResult:
    """The committed result in ``p`` (of ``run_id`` when given). A file that is not one (madbench writes it atomically,
    so it was truncated or edited by something else) is an InputError naming it: deleting it re-runs the run."""
    try:
        result = RunResult.model_validate_json(read_unlinked(p, "the run's commit point"))
    except ValidationError as exc:
        raise InputError(p, f"not a valid run result ({format_validation_error(exc)[:300]})", _RERUN) from None
    if run_id is not None and result.run_id != run_id:
        raise InputError(p, f"holds the result of run {result.run_id}, not of run {run_id}", _RERUN)
    return result


#: Where a run of a batch stands; not_needed: a sequential batch's or sweep's decision made the run unnecessary.
RunStatus = Literal["pending", "ok", "failed", "not_needed"]


class ManifestRun(BaseModel):
    """One run of a batch as the manifest lists it; the driver updates it as the run goes."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    run_id: str
    scenario_id: str
    config: str
    replicate: int
    #: not_needed: a sequential batch's or sweep's decision made the run unnecessary.
    status: RunStatus
    attempts: int = 0
    error: str | None = None
    node_id: str | None = None
    #: While the run is in flight: when it was sent (what `madbench status` shows).
    in_flight_since: str | None = None


class Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    #: None in manifests written before the format was versioned: read as the current format.
    format_version: int | None = None
    spec: dict[str, Any]
    versions: dict[str, str]
    state: str
    updated: str
    runs: list[ManifestRun]
    #: What produced the results (code revision, data hashes, price table, machine); None in manifests before format 3.
    provenance: Provenance | None = None


class DebateManifest(BaseModel):
    """``madbench debate --out``'s manifest beside a run's trace: what produced it."""

    model_config = ConfigDict(extra="forbid")
    format_version: int
    run_id: str
    config: dict[str, Any]
    scenario_id: str
    provenance: Provenance


def versions() -> dict[str, str]:
    return {"python": platform.python_version()} | package_versions(("madbench", "ray", "litellm", "pydantic", "pandas",
                                                                     "pyarrow"))


def write_manifest(root: str | Path, spec: dict[str, Any], runs: list[ManifestRun], state: str,
                   provenance: Provenance | None = None) -> Path:
    """The whole manifest, a snapshot: it supersedes the journal of changes since the last (removed after it)."""
    body = Manifest(format_version=FORMAT_VERSION, spec=spec, versions=versions(), state=state,
                    updated=_now(), runs=runs, provenance=provenance)
    path = atomic_write_text(Path(root) / MANIFEST, body.model_dump_json(indent=1))
    # A crash before this leaves a journal whose changes, applied again in order, end where the snapshot is.
    (Path(root) / MANIFEST_JOURNAL).unlink(missing_ok=True)
    return path


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class ManifestJournal:
    """The manifest's changes between two snapshots, appended: each line the runs that changed since the line before
    (whole, as ``ManifestRun``), with the time and the batch's state. A driver appends the runs it touched every few
    seconds rather than rewriting every run; ``read_manifest`` applies the lines over the snapshot, in order."""

    def __init__(self, root: str | Path):
        self.path = Path(root) / MANIFEST_JOURNAL
        self.bytes = self.path.stat().st_size if self.path.exists() else 0

    def append(self, runs: list[ManifestRun], state: str) -> None:
        line = json.dumps({"updated": _now(), "state": state, "runs": [r.model_dump(mode="json") for r in runs]},
                          separators=(",", ":")).encode() + b"\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0),
                     0o666)
        try:
            if os.write(fd, line) != len(line):
                raise OSError(f"{self.path}: a line of the manifest's journal was written short")
        finally:
            os.close(fd)  # not synced: the journal says what `madbench status` shows; commit points say what ran
        self.bytes += len(line)


def apply_journal(manifest: Manifest, root: Path) -> Manifest:
    """``manifest`` with the lines of its journal applied in order (a last line a crash tore is not one)."""
    path = root / MANIFEST_JOURNAL
    if not path.exists():
        return manifest
    data = read_unlinked(path, "the manifest's journal")
    data = data[:data.rfind(b"\n") + 1]
    if not data:
        return manifest
    runs = {r.run_id: r for r in manifest.runs}
    state, updated = manifest.state, manifest.updated
    fix = ("delete it (the manifest is then as last snapshotted; the commit points say which runs ran) and run the "
           "batch's `madbench run` command again")
    for n, raw in enumerate(data.splitlines(), 1):
        try:
            line = json.loads(raw)
            changed = [ManifestRun.model_validate(r) for r in line["runs"]]
            state, updated = str(line["state"]), str(line["updated"])
        except (ValueError, KeyError, TypeError, ValidationError) as exc:
            raise InputError(path, f"line {n} is not a change of the manifest ({type(exc).__name__})", fix) from None
        # The driver snapshots every run of the batch before it journals any change: a run the snapshot lacks is
        # not this batch's (a journal copied from another batch, or one left beside a replaced manifest).
        unknown = [r.run_id for r in changed if r.run_id not in runs]
        if unknown:
            raise InputError(path, f"line {n} changes run {unknown[0]}, which the manifest does not list", fix)
        runs |= {r.run_id: r for r in changed}
    return manifest.model_copy(update={"runs": list(runs.values()), "state": state, "updated": updated})


def write_debate_manifest(path: str | Path, body: DebateManifest) -> Path:
    return atomic_write_text(path, body.model_dump_json(indent=1))


def read_debate_manifest(path: str | Path) -> DebateManifest:
    try:
        return DebateManifest.model_validate_json(Path(path).read_bytes())
    except ValidationError as exc:
        raise InputError(path, f"not a valid run manifest ({format_validation_error(exc)[:300]})",
                         "run the debate again with `madbench debate ... --out`") from None


def read_manifest(root: str | Path) -> Manifest:
    path = Path(root) / MANIFEST
    fix = ("delete it and run the batch's `madbench run` command again: it rebuilds the manifest from the committed "
           "runs (their results are kept)")
    try:
        raw = json.loads(read_unlinked(path, "the manifest").decode())
    except json.JSONDecodeError as exc:  # truncated by hand or by a copy (madbench itself writes it atomically)
        raise InputError(path, f"not valid JSON (line {exc.lineno}: {exc.msg})", fix) from None
    check_version(raw.get("format_version") if isinstance(raw, dict) else None, path, "the manifest")
    try:
        manifest = Manifest.model_validate(raw)
    except ValidationError as exc:
        raise InputError(path, f"not a valid manifest ({format_validation_error(exc)[:300]})", fix) from None
    return apply_journal(manifest, Path(root))
