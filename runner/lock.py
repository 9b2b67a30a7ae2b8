"""One writer per results directory: an exclusive ``flock`` on ``<results>/.lock``, held for a whole run.

``madbench run`` and ``madbench rescore`` write into the same results directory (traces, results, table
parts, scores); two of them at once would corrupt each other. The driver takes the lock before writing
anything and keeps it until it has finished; a second driver fails at once with an ``InputError`` naming
the holder (host, pid, since). The OS releases a ``flock`` when its process dies, so a lock left by a
killed driver is simply taken over. Taking the lock, and releasing it, removes the temporary files that killed
writers left (an actor killed mid-write as its batch stopped): only the holder can know that no writer of its own
is still at work. Readers never take it; ``madbench status`` only asks whether a driver holds it
(``lock_holder``), to tell a running batch from one whose driver is gone.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import socket
import time
from pathlib import Path

from madbench.data.atomic import remove_stale_temporaries
from madbench.data.errors import InputError
from madbench.gateway.errors import DriverGone
from madbench.results.layout import LOCK as LOCK_NAME

#: How long a starting driver retries a taken lock: an orphaned actor of a killed driver checks the lock with a
#: brief shared ``flock`` (``WriterGuard``), which must not be mistaken for another driver.
ACQUIRE_PATIENCE_S = 2.0
#: What a holder is called before it has written its line (between its flock and its write).
UNNAMED_HOLDER = "a driver (host, pid and start time not yet written)"
#: How long a driver letting go of the lock waits for its killed actors' processes to end, so that the files they
#: were writing are known to be abandoned and can go.
WRITERS_END_S = 10.0


class ResultsLock:
    """``with ResultsLock(root, "madbench run"):`` holds ``root/.lock`` exclusively, or raises ``InputError``."""

    def __init__(self, root: str | Path, what: str = "madbench run"):
        self.root = Path(root)
        self.path = self.root / LOCK_NAME
        self.what = what
        self._fd: int | None = None
        self.holder = ""  # what this driver wrote into the lock file: its actors' WriterGuard compares against it

    def acquire(self) -> ResultsLock:
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            _flock_patiently(fd, fcntl.LOCK_EX)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise _held(self.root, holder) from None
        except BaseException:
            os.close(fd)
            raise
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        # The lock's own id: two drivers of one process within a second (the Python API, one after the other) would
        # otherwise write one line, and the first one's lingering actors would take the second's lock for theirs.
        text = f"{self.what} on host {socket.gethostname()}, pid {os.getpid()}, since {since}, lock {secrets.token_hex(4)}\n"
        os.ftruncate(fd, 0)
        os.pwrite(fd, text.encode(), 0)
        self._fd, self.holder = fd, text
        try:
            remove_stale_temporaries(self.root)
        except BaseException:
            self.release()
            raise
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            remove_stale_temporaries(self.root, wait_s=WRITERS_END_S)
            os.ftruncate(fd, 0)  # the file stays (unlinking a flocked file races with a new taker); its text goes
        finally:
            os.close(fd)  # closing releases the flock

    def __enter__(self) -> ResultsLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def refuse_if_held(root: str | Path) -> None:
    """The ``InputError`` that taking ``root``'s lock would raise now, before a driver spends seconds on its checks
    (a second driver is told at once); taking the lock is still what keeps two drivers apart."""
    holder = lock_holder(root)  # a lock file closed to this user raises, named (the CLI says which and the fix)
    if holder is not None:
        raise _held(Path(root), holder)


def _held(root: Path, holder: str) -> InputError:
    return InputError(root, f"another driver is writing this results directory: {holder} holds {root / LOCK_NAME}",
                      "wait for it to finish (`madbench status` shows its progress), or stop it; a lock left by a "
                      "killed driver is taken over automatically")


def _read_holder(fd: int) -> str:
    try:
        text = os.pread(fd, 4096, 0).decode(errors="replace").strip()
    except OSError:
        text = ""
    return text or UNNAMED_HOLDER


def _flock_patiently(fd: int, mode: int) -> None:
    deadline = time.monotonic() + ACQUIRE_PATIENCE_S
    while True:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


def _probe(path: Path) -> tuple[bool, str]:
    """(whether a driver holds ``path`` now, the holder line in it). A brief shared, non-blocking ``flock``: granted
    only when no driver holds the exclusive lock (a starting driver that meets it retries for ``ACQUIRE_PATIENCE_S``).
    ``FileNotFoundError`` when there is no lock file."""
    fd = os.open(path, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            held = False
        except BlockingIOError:
            held = True
        text = os.pread(fd, 4096, 0).decode(errors="replace")
    finally:
        os.close(fd)  # also drops the shared lock, if it was granted
    return held, text


def lock_holder(root: str | Path) -> str | None:
    """The holder line (host, pid, since) of the driver holding ``root``'s lock now, or None when no driver does: none
    ever ran there, or it finished, or it was killed (the OS drops a dead process's ``flock``)."""
    try:
        held, text = _probe(Path(root) / LOCK_NAME)
    except (FileNotFoundError, NotADirectoryError):  # no lock file, or no folder to hold one: no driver there
        return None
    return (text.strip() or UNNAMED_HOLDER) if held else None


class WriterGuard:
    """Raises ``DriverGone`` once the driver that started this work no longer holds the results directory's lock.

    A runner actor outlives its driver for a few seconds after a ``kill -9`` (Ray reaps an owner's actors
    asynchronously); in that time it would go on paying for calls and writing traces that a resumed driver's
    actors are writing too. The gateway calls this guard before every answer it takes or pays for, and the
    runner before every commit. The lock tells the truth at once: the OS drops a dead process's ``flock``, and
    a new driver writes its own holder line. Cost: one open, one non-blocking ``flock`` and one read (~20 µs).
    """

    def __init__(self, root: str | Path, holder: str):
        self.path = Path(root) / LOCK_NAME
        self.holder = holder

    def __call__(self) -> None:
        try:
            held, text = _probe(self.path)
        except FileNotFoundError:
            raise DriverGone(f"{self.path} is gone: the results directory was removed under this batch") from None
        if not held or text != self.holder:
            raise DriverGone(f"the driver that started this work ({self.holder.strip()}) no longer holds {self.path}")
