"""One writer per results directory: an exclusive ``flock`` on ``<results>/.lock``, held for a whole run.

``madbench run`` and ``madbench rescore`` write into the same results directory (traces, results, table
parts, scores); two of them at once would corrupt each other. The driver takes the lock before writing
anything and keeps it until it has finished; a second driver fails at once with an ``InputError`` naming
the holder (host, pid, since). The OS releases a ``flock`` when its process dies, so a lock left by a
killed driver is simply taken over. Readers (``madbench status``) never take it.
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
from pathlib import Path

from madbench_data.errors import InputError

LOCK_NAME = ".lock"


class ResultsLock:
    """``with ResultsLock(root, "madbench run"):`` holds ``root/.lock`` exclusively, or raises ``InputError``."""

    def __init__(self, root: str | Path, what: str = "madbench run"):
        self.root = Path(root)
        self.path = self.root / LOCK_NAME
        self.what = what
        self._fd: int | None = None

    def acquire(self) -> ResultsLock:
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise InputError(self.root, f"another driver is writing this results directory: {holder} holds {self.path}",
                             "wait for it to finish (`madbench status` shows its progress), or stop it; a lock left "
                             "by a killed driver is taken over automatically") from None
        except BaseException:
            os.close(fd)
            raise
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        text = f"{self.what} on host {socket.gethostname()}, pid {os.getpid()}, since {since}\n"
        os.ftruncate(fd, 0)
        os.pwrite(fd, text.encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.ftruncate(fd, 0)  # the file stays (unlinking a flocked file races with a new taker); its text goes
        finally:
            os.close(fd)  # closing releases the flock

    def __enter__(self) -> ResultsLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _read_holder(fd: int) -> str:
    try:
        text = os.pread(fd, 4096, 0).decode(errors="replace").strip()
    except OSError:
        text = ""
    return text or "a driver (host, pid and start time not yet written)"
