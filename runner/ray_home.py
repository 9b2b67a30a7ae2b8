"""Where a local Ray keeps its session folders: ``$MADBENCH_HOME/ray`` (madbench.data.home), not Ray's /tmp/ray, and
the sessions of drivers that are gone removed before the next one starts (each driver's Ray makes one, logs and
sockets, and Ray removes none)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import psutil

from madbench.data.errors import InputError
from madbench.data.home import HOME_ENV, RAY, home_path

#: The longest path a Unix socket may have (sun_path), and what Ray adds to its temp folder for its longest socket.
UNIX_PATH_MAX = 107
SOCKET_TAIL = len("/session_2026-12-05_02-30-12_123456_4194304/sockets/plasma_store")


def local_ray_temp_dir() -> Path:
    """The temp folder a local Ray is given (made here): $MADBENCH_HOME/ray, or $RAY_TMPDIR/ray where Ray's own
    variable is set; refused when its sockets' paths would be too long."""
    given = os.environ.get("RAY_TMPDIR")
    temp = Path(given).expanduser().absolute() / "ray" if given else home_path(RAY)
    if len(str(temp)) + SOCKET_TAIL > UNIX_PATH_MAX:
        raise InputError("RAY_TMPDIR" if given else HOME_ENV, f"{temp} is too long for the socket paths a local Ray makes "
                         f"in it (at most {UNIX_PATH_MAX - SOCKET_TAIL} characters)",
                         f"set {HOME_ENV} to a shorter folder (e.g. ~/.madbench), or RAY_TMPDIR to one for Ray's sessions "
                         "alone (e.g. /tmp)")
    temp.mkdir(parents=True, exist_ok=True)
    return temp


def remove_stale_sessions(temp: Path) -> list[Path]:
    """Remove the session folders under ``temp`` whose driver (the pid Ray ends their name with) has exited and that
    no running process names (a Ray process of theirs outliving its driver); the folders removed."""
    sessions = [p for p in temp.glob("session_*") if p.is_dir() and not p.is_symlink()
                and p.name.rsplit("_", 1)[-1].isdigit() and not psutil.pid_exists(int(p.name.rsplit("_", 1)[-1]))]
    if not sessions:
        return []
    named = _sessions_in_use()
    stale = [p for p in sessions if p.name not in named]
    for path in stale:
        shutil.rmtree(path)
    latest = temp / "session_latest"
    if latest.is_symlink() and not latest.exists():
        latest.unlink()
    return stale


def _sessions_in_use() -> set[str]:
    """The session folder names in the command lines of the running processes."""
    names: set[str] = set()
    for proc in psutil.process_iter(["cmdline"]):
        for arg in proc.info["cmdline"] or ():
            start = arg.find("session_")
            if start >= 0:
                names.add(arg[start:].split("/", 1)[0].split()[0])
    return names
