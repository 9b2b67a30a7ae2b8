"""A results directory's shape checked before a command reads or writes it: each entry of the layout the kind it
should be (a folder where a folder belongs, a file where a file does), and no folder inside it a symbolic link, which
would send reads and writes outside the directory the user named (a run's parts written into another batch, say)."""

from __future__ import annotations

import os
from pathlib import Path

from madbench.data.errors import InputError
from madbench.results.layout import BUDGET, MANIFEST, SCORES, TABLES

#: Entries of a batch directory that are folders, and those that are files (``madbench.results.layout``).
FOLDERS = ("traces", "runs", "parts", SCORES, *(f"parts/{t}" for t in TABLES))
FILES = (MANIFEST, BUDGET, *(f"{t}.parquet" for t in TABLES))
#: How deep symbolic links to folders are looked for: scores/<label>/failed is the deepest folder of the layout.
DEPTH = 3


def check_results_dir(root: str | Path, what: str = "results directory") -> None:
    """An ``InputError`` naming the first problem with ``root``: a file given for it, an entry of its layout of the wrong
    kind, or a folder inside it that is a symbolic link. Nothing to check when it does not exist yet."""
    root = Path(root)
    if not root.exists():
        return
    if not root.is_dir():
        raise InputError(root, f"is a file, not a {what}", f"give the {what} (the folder that holds manifest.json)")
    if not os.access(root, os.R_OK | os.X_OK):
        raise InputError(root, f"the {what} is not readable by this user", f"make it readable (chmod u+rx {root})")
    for name in FOLDERS:
        p = root / name
        if p.exists() and not p.is_dir():
            raise InputError(p, "is a file where the results layout has a folder",
                             "move it away (the results directory is damaged: restore it, or use a fresh one)")
    for name in FILES:
        p = root / name
        if p.is_dir():
            raise InputError(p, "is a folder where the results layout has a file",
                             "move it away (the results directory is damaged: restore it, or use a fresh one)")
    linked = linked_folder(root)
    if linked is not None:
        raise InputError(linked, f"is a symbolic link to a folder ({os.readlink(linked)}) inside the {what}: "
                         "madbench does not follow it, so reads and writes cannot leave the directory you named",
                         f"replace the link with a real folder (or copy {root} whole with `cp -rL`)")


def linked_folder(root: Path, depth: int = DEPTH) -> Path | None:
    """The first folder at most ``depth`` levels below ``root`` that is a symbolic link, not followed; None if none."""
    todo = [(root, 0)]
    while todo:
        folder, level = todo.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except PermissionError:
            raise InputError(folder, "is not readable by this user", f"make it readable (chmod -R u+rX {root})") from None
        for e in entries:
            if e.is_symlink() and e.is_dir(follow_symlinks=True):
                return Path(e.path)
            if level + 1 < depth and e.is_dir(follow_symlinks=False) and e.name not in ("traces", "runs"):
                todo.append((Path(e.path), level + 1))  # traces/ and runs/ hold only files: not listed twice
    return None


def _link_error(path: Path, what: str) -> InputError:
    try:
        target = f" (to {os.readlink(path)})"
    except OSError:
        target = ""
    return InputError(path, f"{what} is a symbolic link{target}; madbench never reads a results file through one, so "
                      "a reader cannot report a file from elsewhere as the batch's",
                      "replace the link with the file itself (or copy the results whole with `cp -rL`)")


def read_unlinked(path: str | Path, what: str) -> bytes:
    """The bytes of a results file (a run's commit point, a manifest), never read through a symbolic link at ``path``
    itself (O_NOFOLLOW, as a trace is read: no check-then-open race); a missing file raises as ``open`` does."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        if path.is_symlink():
            raise _link_error(path, what) from None
        raise
    with os.fdopen(fd, "rb") as fh:
        return fh.read()


def check_unlinked_files(root: str | Path) -> None:
    """An ``InputError`` naming the first file a reader of ``root`` takes as the batch's that is a symbolic link: its
    manifest, budget and tables, and each commit point in ``runs/`` (traces are refused when read, ``read_trace``)."""
    root = Path(root)
    for name in FILES:
        if (root / name).is_symlink():
            raise _link_error(root / name, f"the results file {name}")
    runs = root / "runs"
    if runs.is_dir():
        for e in sorted(os.scandir(runs), key=lambda e: e.name):
            if e.is_symlink():
                raise _link_error(Path(e.path), "the run's commit point")
