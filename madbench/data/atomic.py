"""Atomic file writes: write a sibling temporary file, fsync, then rename.

A reader (or a resumed batch) therefore sees either the old file or the whole
new one, never a half-written file.

The temporary file comes from ``tempfile.mkstemp``, which creates it ``0600``
whatever the umask. Before the rename it is given the mode an ordinary
``open(path, "w")`` would have: ``0o666 & ~umask`` (``0644`` under the usual
``022``), so colleagues on shared storage can read the results when the umask
lets them, and nobody can when it does not (``077`` gives ``0600``).

A target that is a symbolic link is replaced by the new regular file: the
rename acts on the link itself, so the file it pointed to (perhaps outside the
results directory) is never opened, truncated or written.

A writer killed between the two steps (a runner actor killed as its batch stops)
leaves its temporary file behind. The name says who wrote it
(``.<name>.w<pid>@<host>.<random>.tmp``), so that the results directory's next
holder can tell a stale one (its writer is gone) from one being written, and
remove it (``remove_stale_temporaries``).
"""

from __future__ import annotations

import os
import re
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from madbench.data.errors import InputError

if TYPE_CHECKING:
    import pandas as pd

_UMASK_LOCK = threading.Lock()


def current_umask() -> int:
    """The process's umask, read without changing it where the OS allows.

    Linux reports it in ``/proc/self/status``. Elsewhere ``os.umask`` is the only
    way, and it sets while it reads: the value is swapped for the strict ``077``
    for an instant (a file another thread creates in that instant is made more
    private, never less) and restored, under a lock so two readers do not race.
    """
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o077)
        os.umask(mask)
    return mask


def file_mode() -> int:
    """The mode a newly created regular file gets under the current umask."""
    return 0o666 & ~current_umask()


def dir_mode() -> int:
    """The mode a newly created directory gets under the current umask (for ``tempfile.mkdtemp``'s 0700)."""
    return 0o777 & ~current_umask()


def check_target(path: Path) -> None:
    """An InputError unless ``path`` is absent or a regular file: the move that ends a write replaces whatever is
    there, so a symbolic link, a device (``/dev/null`` given as ``--out``), a pipe or a folder is refused, not
    replaced, before anything is written."""
    if not os.path.lexists(path):
        return
    if path.is_symlink():
        raise InputError(path, f"is a symbolic link (to {os.readlink(path)}): madbench writes a file whole in its place, "
                         "so it would replace the link, not write where it points", "give the path of a regular file")
    if not path.is_file():
        kind = "a folder" if path.is_dir() else "a device, pipe or socket, not a regular file"
        raise InputError(path, f"is {kind}: writing there would replace it",
                         "give the path of a regular file (or one that does not exist yet)")


def atomic_write(path: str | Path, write: Callable[[Path], object]) -> Path:
    """Call ``write(tmp_path)`` and atomically move the result onto ``path`` (mode ``0o666 & ~umask``); ``path``
    must be absent or a regular file (``check_target``)."""
    path = Path(path)
    check_target(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.w{os.getpid()}@{socket.gethostname()}.", suffix=".tmp",
                               dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        write(tmp_path)
        # after write(): a writer may have replaced the temporary file rather than written into it
        os.chmod(tmp_path, file_mode())
        with open(tmp_path, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp_path, path)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise
    return path


#: An ``atomic_write`` temporary file's name: its target's, its writer's pid and host, mkstemp's random part.
_TEMPORARY = re.compile(r"^\..*\.w(?P<pid>\d+)@(?P<host>[^/]*)\.[A-Za-z0-9_]+\.tmp$")


def _writer_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def _local_writers(root: Path) -> dict[Path, int]:
    """``atomic_write`` temporaries under ``root`` written by processes of this host, with their writers' pids."""
    host = socket.gethostname()
    found = {}
    for tmp in root.rglob(".*.tmp"):
        m = _TEMPORARY.match(tmp.name)
        if m is not None and m["host"] == host:
            found[tmp] = int(m["pid"])
    return found


def remove_stale_temporaries(root: str | Path, wait_s: float = 0.0) -> list[Path]:
    """Remove the temporary files under ``root`` that killed writers of this host left behind; the removed.

    A writer still running keeps its file, after up to ``wait_s`` seconds for it to end (a killed actor's process
    may outlive the kill by a moment). Temporaries of other hosts (shared storage) are left: whether their writers
    live cannot be known from here. Only the results directory's lock holder calls this, so no new writer starts.
    """
    root = Path(root)
    if not root.is_dir():
        return []
    writers = _local_writers(root)
    deadline = time.monotonic() + wait_s
    while any(_writer_alive(pid) for pid in writers.values()) and time.monotonic() < deadline:
        time.sleep(0.05)
    removed = []
    for tmp, pid in writers.items():
        if pid != os.getpid() and not _writer_alive(pid):
            tmp.unlink(missing_ok=True)
            removed.append(tmp)
    return removed


def frame_writer(frame: pd.DataFrame) -> Callable[[Path], object]:
    """``atomic_write``'s writer of ``frame`` as Parquet, without its index."""
    def write(path: Path) -> object:
        return frame.to_parquet(path, index=False)
    return write


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write(path, lambda p: p.write_text(text, encoding="utf-8"))


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    return atomic_write(path, lambda p: p.write_bytes(data))
