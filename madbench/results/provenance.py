"""What produced a result, recorded in its manifest: the code revision, the data's content, the price table, the machine.

A manifest's ``provenance`` is what ``madbench diff`` compares and what a reader needs to reproduce a number: the
madbench version and git commit (with whether the checkout had uncommitted changes), Python and the key packages,
a content hash of the data pack, of each evidence directory and of the scenario file, a hash of litellm's cost map
(the price table every cost was computed from), the OS and CPU count, and the Ray cluster's shape.

The models a provider actually served are per call (``calls.parquet``'s ``model_served``), not here.
"""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
from importlib import metadata, util
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from madbench.data.errors import InputError

#: The packages whose versions change numbers or their reading.
PACKAGES = ("madbench", "ray", "litellm", "pydantic", "pandas", "numpy", "scipy", "statsmodels", "pyarrow")
#: The file of litellm's package that holds its cost map (read with LITELLM_LOCAL_MODEL_COST_MAP, as madbench does).
COST_MAP_FILE = "model_prices_and_context_window_backup.json"


class GitState(BaseModel):
    """The checkout the code ran from: None fields where it is not a git checkout (an installed wheel)."""

    model_config = ConfigDict(extra="forbid")
    root: str | None = None
    commit: str | None = None
    #: Uncommitted changes to tracked files, or untracked files git does not ignore: the commit alone is not the code.
    dirty: bool | None = None


class Provenance(BaseModel):
    model_config = ConfigDict(extra="forbid")
    madbench: str
    git: GitState
    python: str
    packages: dict[str, str]
    #: Content hash of each input: ``pack``, ``evidence:<dir>`` and ``scenarios`` (a generated scenario set: absent).
    data: dict[str, str]
    #: The price table: litellm's version and the sha256 of its cost map file.
    price_table: dict[str, str]
    platform: dict[str, Any]
    #: The Ray cluster the runs ran on (nodes, CPUs, GPUs); None where no cluster was started (nothing to run).
    cluster: dict[str, Any] | None = None


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str]:
    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def code_root() -> Path:
    """The directory holding the ``madbench`` package that is running (a checkout's root, or site-packages)."""
    return Path(__file__).resolve().parents[2]


def git_state(root: Path | None = None) -> GitState:
    """The commit of the checkout at ``root`` and whether it has changes git does not ignore; all None when ``root`` is
    not a git checkout or git is not installed."""
    root = root or code_root()
    try:
        top = _git(root, "rev-parse", "--show-toplevel")
        commit = _git(root, "rev-parse", "HEAD")
        status = _git(root, "status", "--porcelain")
    except (OSError, subprocess.CalledProcessError):  # no git, or not a checkout: nothing to record, said as None
        return GitState()
    if Path(top).resolve() != root.resolve():  # an installed madbench inside some other repository: not its code
        return GitState()
    return GitState(root=top, commit=commit, dirty=bool(status))


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True,
                          timeout=30).stdout.strip()


def tree_sha256(path: str | Path) -> str:
    """sha256 over a file's bytes, or over a directory's files: each file's path relative to it and its bytes, in
    sorted order (names and contents both count; modification times do not)."""
    path = Path(path)
    if not path.exists():
        raise InputError(path, "not found", "give an existing data pack, evidence directory or scenario file")
    h = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for f in files:
        h.update(f.relative_to(path).as_posix().encode() if f != path else b"")
        h.update(b"\0")
        h.update(_file_sha256(f).encode())
    return h.hexdigest()


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def data_hashes(pack_dir: str | Path | None, evidence: list[str] | list[Path], scenarios: str | Path | None) -> dict[str, str]:
    out = {"pack": tree_sha256(pack_dir)} if pack_dir is not None else {}
    out |= {f"evidence:{Path(e).name}": tree_sha256(e) for e in evidence}
    if scenarios is not None:
        out["scenarios"] = tree_sha256(scenarios)
    return out


def price_table() -> dict[str, str]:
    """litellm's version and the sha256 of the cost map file it prices calls from (read from disk, not imported)."""
    spec = util.find_spec("litellm")
    if spec is None or spec.origin is None:
        return {"litellm": "not installed"}
    path = Path(spec.origin).parent / COST_MAP_FILE
    return {"litellm": package_versions(("litellm",))["litellm"], "cost_map": COST_MAP_FILE,
            "cost_map_sha256": _file_sha256(path) if path.is_file() else "not found"}


def machine() -> dict[str, Any]:
    return {"os": platform.platform(), "machine": platform.machine(), "cpu_count": os.cpu_count()}


def collect(pack_dir: str | Path | None, evidence: list[str] | list[Path], scenarios: str | Path | None,
            cluster: dict[str, Any] | None = None) -> Provenance:
    """This process's provenance for results computed from these inputs."""
    packages = package_versions()
    return Provenance(madbench=packages["madbench"], git=git_state(), python=platform.python_version(), packages=packages,
                      data=data_hashes(pack_dir, evidence, scenarios), price_table=price_table(), platform=machine(),
                      cluster=cluster)


def dirty_warning(git: GitState) -> str | None:
    """The warning a run from a checkout with uncommitted changes prints (its manifest records it as dirty)."""
    if not git.dirty:
        return None
    return (f"the code in {git.root} has uncommitted changes: the manifest records commit {git.commit} as dirty, "
            "so that commit alone does not reproduce these results (commit them, or pass --require-clean to refuse)")


def require_clean(git: GitState, flag: str = "--require-clean") -> None:
    """With ``--require-clean``: refuse a checkout with uncommitted changes, or code whose revision is unknown."""
    if git.commit is None:
        raise InputError(flag, "the code's revision is unknown (madbench is not running from a git checkout)",
                         "run from a git checkout of madbench, or leave --require-clean out")
    if git.dirty:
        raise InputError(flag, f"the checkout {git.root} has uncommitted changes (see `git -C {git.root} status`)",
                         "commit or stash them, or leave --require-clean out")

