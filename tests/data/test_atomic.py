"""Atomic writes and the file mode of every artifact: ``0o666 & ~umask``, never mkstemp's private 0600.

The umask is process-wide, so every check that sets one runs in a subprocess with its own.
"""

import contextlib
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from madbench.data.atomic import atomic_write, atomic_write_text, current_umask, remove_stale_temporaries
from madbench.runner.lock import ResultsLock

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_current_umask_reads_without_changing_it():
    before = os.umask(0o022)
    try:
        assert current_umask() == 0o022
        assert current_umask() == 0o022  # reading left it as it was
    finally:
        os.umask(before)


@pytest.mark.parametrize("umask,expected", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664), (0o027, 0o640)])
def test_atomic_writes_follow_the_umask(tmp_path, umask, expected):
    script = textwrap.dedent(f"""
        import os, sys
        os.umask({umask:#o})
        import pandas as pd
        from madbench.data.atomic import atomic_write, atomic_write_bytes, atomic_write_text
        out = sys.argv[1]
        atomic_write_text(out + "/a.txt", "x")
        atomic_write_bytes(out + "/b.bin", b"x")
        atomic_write_text(out + "/a.txt", "again")  # replacing a file gives the new one the same mode
        atomic_write(out + "/c.parquet", lambda p: pd.DataFrame({{"x": [1]}}).to_parquet(p))
        atomic_write(out + "/d.csv", lambda p: (p.unlink(), p.write_text("y")))  # a writer that recreates the file
    """)
    subprocess.run([sys.executable, "-c", script, str(tmp_path)], env=ENV, check=True)
    files = sorted(tmp_path.iterdir())
    assert [p.name for p in files] == ["a.txt", "b.bin", "c.parquet", "d.csv"]  # no temporary file left behind
    assert {p.name: oct(mode(p)) for p in files} == {p.name: oct(expected) for p in files}


def test_a_failed_write_leaves_nothing(tmp_path):
    def boom(p):
        p.write_text("half")
        raise RuntimeError("disk full")
    atomic_write_text(tmp_path / "keep.txt", "old")
    with pytest.raises(RuntimeError):
        atomic_write(tmp_path / "keep.txt", boom)
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"] and (tmp_path / "keep.txt").read_text() == "old"


@contextlib.contextmanager
def _writer_mid_write(target: Path):
    """A process writing ``target`` atomically that never finishes, stopped mid-write; kill -9 on leaving."""
    script = textwrap.dedent("""
        import sys, time
        from madbench.data.atomic import atomic_write
        atomic_write(sys.argv[1], lambda p: (p.write_text("half"), print("writing", flush=True), time.sleep(600)))
    """)
    proc = subprocess.Popen([sys.executable, "-c", script, str(target)], env=ENV, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "writing"
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_the_temporary_a_killed_writer_left_goes_when_the_next_holder_takes_the_lock(tmp_path):
    root = tmp_path / "results" / "b"
    runs = root / "parts" / "runs"
    with _writer_mid_write(runs / "r1.parquet"):
        pass
    (left,) = runs.glob(".*.tmp")
    assert left.name.startswith(".r1.parquet.w")  # named after its target and its writer
    foreign = runs / f".r2.parquet.w{os.getpid()}@another-host.abcdefgh.tmp"
    foreign.write_text("another host's writer may be at work")
    with ResultsLock(root, "madbench run"):
        assert not left.exists()
        assert foreign.exists()  # whether its writer lives cannot be known from this host
    assert not (runs / "r1.parquet").exists()  # nothing half-written took the target's name


def test_a_running_writers_temporary_is_kept_until_it_is_gone(tmp_path):
    with _writer_mid_write(tmp_path / "a.txt"):
        assert remove_stale_temporaries(tmp_path) == []
        (writing,) = tmp_path.glob(".a.txt.*.tmp")
    assert remove_stale_temporaries(tmp_path) == [writing]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_every_file_of_a_batch_follows_the_umask(tmp_path):
    """run → stats → report → rescore-free artifacts of a small batch, in a subprocess with its own umask. One umask
    tells every wrong mode apart: 027 gives 0640 and 0750, where mkstemp's and mkdtemp's private 0600 and 0700 and a
    fixed 0644 and 0755 that ignore the umask all differ."""
    umask, file_mode, dir_mode = 0o027, 0o640, 0o750
    from madbench.data.market.write import write_pack
    from tests.conftest import synthetic_tables
    from tests.runner.test_batch import TICKERS, write_batch
    pack = write_pack(tmp_path / "pack", synthetic_tables(tickers=tuple(TICKERS)))
    batch = write_batch(tmp_path, pack, replicates=1)
    spec = yaml.safe_load(batch.read_text())
    spec["cache_dir"] = str(tmp_path / "cache")
    spec["scenarios"]["ids"] = ["s2021Q2", "s2021Q3"]
    spec["workers"] = 1  # one actor writes every kind of artifact a second would, and the process starts one less
    batch.write_text(yaml.safe_dump(spec))
    root = tmp_path / "results" / "t"
    script = textwrap.dedent(f"""
        import os, sys
        os.umask({umask:#o})
        from madbench.runner.cli import main
        assert main(["run", sys.argv[1], "--quiet"]) == 0
        assert main(["stats", sys.argv[2]]) == 0
        assert main(["report", sys.argv[2]]) == 0
    """)
    subprocess.run([sys.executable, "-c", script, str(batch), str(root)], env=ENV, check=True,
                   stdout=subprocess.DEVNULL, start_new_session=True, timeout=600)
    files = [p for base in (root, tmp_path / "cache") for p in base.rglob("*") if p.is_file()]
    names = {p.relative_to(tmp_path).as_posix() for p in files}
    for expected in ("results/t/manifest.json", "results/t/runs.parquet", "results/t/report.html", "results/t/stats/summary.csv"):
        assert expected in names
    assert any(n.startswith("results/t/traces/") for n in names)
    assert any(n.startswith("results/t/runs/") for n in names) and any(n.startswith("cache/") for n in names)
    wrong = {p.relative_to(tmp_path).as_posix(): oct(mode(p)) for p in files if mode(p) != file_mode}
    assert not wrong, f"not {oct(file_mode)}: {wrong}"
    dirs = [p for base in (root, tmp_path / "cache") for p in base.rglob("*") if p.is_dir()]
    wrong = {p.relative_to(tmp_path).as_posix(): oct(mode(p)) for p in dirs if mode(p) != dir_mode}
    assert not wrong, f"directories not {oct(dir_mode)}: {wrong}"
