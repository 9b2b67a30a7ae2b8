"""A local Ray keeps its sessions under $MADBENCH_HOME/ray, and the sessions of drivers that are gone are removed."""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from madbench.data.errors import InputError
from madbench.runner.ray_home import local_ray_temp_dir, remove_stale_sessions


def _gone_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_only_the_sessions_of_exited_drivers_that_no_process_names_are_removed(tmp_path):
    gone = _gone_pid()
    dead = tmp_path / f"session_2026-12-05_02-30-12_123456_{gone}"
    mine = tmp_path / f"session_2026-12-05_02-30-13_123456_{os.getpid()}"
    orphaned = tmp_path / f"session_2026-12-05_02-30-14_123456_{gone}1"  # its driver gone, a Ray process of it not
    for d in (dead, mine, orphaned):
        (d / "logs").mkdir(parents=True)
    (tmp_path / "session_latest").symlink_to(dead)
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", f"--session-dir={orphaned}"])
    try:
        assert remove_stale_sessions(tmp_path) == [dead]
    finally:
        holder.kill()
        holder.wait()
    assert not dead.exists() and mine.is_dir() and orphaned.is_dir()
    assert not (tmp_path / "session_latest").is_symlink()  # it pointed at the removed one


def test_the_ray_folder_is_under_madbench_home_and_a_home_too_long_for_its_sockets_is_one_message(monkeypatch):
    home = Path(tempfile.mkdtemp(prefix="mbh-"))  # short: pytest's own temporary paths are too long for Ray
    try:
        monkeypatch.delenv("RAY_TMPDIR", raising=False)
        monkeypatch.setenv("MADBENCH_HOME", str(home))
        assert local_ray_temp_dir() == home / "ray" and (home / "ray").is_dir()
        monkeypatch.setenv("RAY_TMPDIR", str(home / "t"))  # Ray's own variable wins
        assert local_ray_temp_dir() == home / "t" / "ray"
        monkeypatch.delenv("RAY_TMPDIR")
        monkeypatch.setenv("MADBENCH_HOME", str(home / ("x" * 60)))
        with pytest.raises(InputError, match="MADBENCH_HOME: .* too long for the socket paths .* set MADBENCH_HOME"):
            local_ray_temp_dir()
    finally:
        shutil.rmtree(home)


def test_a_relative_madbench_home_or_ray_tmpdir_gives_ray_an_absolute_folder_checked_at_its_full_length(monkeypatch):
    home = Path(tempfile.mkdtemp(prefix="mbh-"))
    try:
        monkeypatch.chdir(home)
        monkeypatch.delenv("RAY_TMPDIR", raising=False)
        monkeypatch.setenv("MADBENCH_HOME", "rel home")
        assert local_ray_temp_dir() == home / "rel home" / "ray" and (home / "rel home" / "ray").is_dir()
        monkeypatch.setenv("RAY_TMPDIR", "t")
        assert local_ray_temp_dir() == home / "t" / "ray"
        monkeypatch.delenv("RAY_TMPDIR")
        deep = home / ("d" * 40)  # the relative name is short; the folder Ray's sockets go in is not
        deep.mkdir()
        monkeypatch.chdir(deep)
        monkeypatch.setenv("MADBENCH_HOME", "h")
        with pytest.raises(InputError, match="MADBENCH_HOME: .* too long for the socket paths"):
            local_ray_temp_dir()
    finally:
        shutil.rmtree(home)
