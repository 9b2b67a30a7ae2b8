"""Readers trust only commit points: export, replay, diff, report and stats read the runs a `runs/<id>.json` vouches
for, never a results file through a symbolic link, never a config name or run id as a path; a batch still running is
said to be read as a snapshot; bad input is one line on stderr, exit 2, with nothing written."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from madbench.runner.cli import main
from madbench.runner.lock import ResultsLock
from tests.conftest import errors_only

#: Two committed runs (single-causal, mean3-causal) of the rules-35 batch, with manifest, traces, parts and tables.
BATCH = Path(__file__).resolve().parents[1] / "results" / "data" / "rules-2-unversioned"
RUN = "76a2595a93925ea1"
#: Every reader of a batch directory, as its command line (the results directory appended).
READERS = {"export": ["export", "--format", "jsonl", "--out"], "replay": ["replay"], "diff": ["diff"],
           "report": ["report"], "stats": ["stats"]}


@pytest.fixture
def batch(tmp_path) -> Path:
    return Path(shutil.copytree(BATCH, tmp_path / "b"))


def argv(command: str, root: Path, tmp_path: Path) -> list[str]:
    """``command`` reading ``root``: export writes to tmp_path/out, diff compares with an untouched copy."""
    if command == "export":
        return [*READERS[command], str(tmp_path / "out"), str(root)]
    if command == "diff":
        other = tmp_path / "other"
        return ["diff", str(other if other.is_dir() else shutil.copytree(BATCH, other)), str(root)]
    return [*READERS[command], str(root)]


def tree(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.lstat().st_size, p.lstat().st_mtime_ns) for p in root.rglob("*")}


def refused(capsys, tmp_path: Path, args: list[str]) -> str:
    """Runs ``args``; asserts exit 2, one line on stderr and nothing written under tmp_path; returns the line."""
    before = tree(tmp_path)
    code = main(args)
    err = errors_only(capsys.readouterr().err)
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err and err.startswith("madbench: error: "), err
    assert tree(tmp_path) == before
    return err


# -- a config's name becomes a file name in an inspect export


@pytest.mark.parametrize("name", ["../../../../victim/PWNED", "/ABSOLUTE/PWNED"])
def test_a_config_name_that_is_a_path_is_refused_by_export_and_nothing_leaves_out(batch, tmp_path, capsys, name):
    name = name.replace("/ABSOLUTE", str(tmp_path / "abs"))
    table = pq.read_table(batch / "runs.parquet")
    i = table.schema.get_field_index("config")
    configs = table.column("config").to_pylist()
    configs[0] = name
    pq.write_table(table.set_column(i, table.schema.field(i), pa.array(configs, table.schema.field(i).type)),
                   batch / "runs.parquet")
    out = tmp_path / "deep" / "er" / "out"
    assert main(["export", str(batch), "--format", "inspect", "--out", str(out)]) == 2
    err = errors_only(capsys.readouterr().err)
    assert err.count("\n") == 1 and f"config name {name!r} would make a path outside {out}" in err, err
    assert not list(out.rglob("*"))  # nothing exported
    assert not (tmp_path / "victim").exists() and not (tmp_path / "abs").exists()


def test_export_writes_each_config_to_its_own_file_in_out(batch, tmp_path, capsys):
    assert main(["export", str(batch), "--format", "inspect", "--out", str(tmp_path / "out")]) == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["mean3-causal.json", "single-causal.json"]
    assert errors_only(capsys.readouterr().err) == ""


# -- rows no commit point vouches for


@pytest.mark.parametrize("command", list(READERS))
def test_a_table_holding_runs_whose_commit_point_is_gone_is_refused_by_every_reader(batch, tmp_path, capsys, command):
    (batch / "runs" / f"{RUN}.json").unlink()
    err = refused(capsys, tmp_path, argv(command, batch, tmp_path))
    assert f"{batch / 'runs.parquet'}: holds 1 run(s) no commit point vouches for (no runs/<id>.json), e.g. {RUN}" in err


def test_a_folder_of_tables_alone_is_still_read_by_stats(batch, tmp_path, capsys):
    # no runs/, no traces/, no manifest: tables copied on their own, as `madbench stats` has always read them
    for name in ("runs", "traces", "parts", "manifest.json", "budget.json"):
        shutil.rmtree(batch / name) if (batch / name).is_dir() else (batch / name).unlink()
    assert main(["stats", str(batch), "--metric", "sharpe"]) == 0


# -- symbolic links


@pytest.mark.parametrize("command", list(READERS))
def test_a_commit_point_that_is_a_symbolic_link_is_refused_by_every_reader(batch, tmp_path, capsys, command):
    outside = tmp_path / "elsewhere.json"
    commit = batch / "runs" / f"{RUN}.json"
    commit.rename(outside)
    commit.symlink_to(outside)
    err = refused(capsys, tmp_path, argv(command, batch, tmp_path))
    assert f"{commit}: the run's commit point is a symbolic link (to {outside})" in err


@pytest.mark.parametrize("name", ["manifest.json", "runs.parquet"])
def test_a_manifest_or_table_that_is_a_symbolic_link_is_refused(batch, tmp_path, capsys, name):
    (batch / name).rename(tmp_path / name)
    (batch / name).symlink_to(tmp_path / name)
    for command in ("export", "diff", "stats"):
        err = refused(capsys, tmp_path, argv(command, batch, tmp_path))
        assert f"{batch / name}: the results file {name} is a symbolic link" in err


# -- a batch still running, or left unfinished


def _running(batch: Path) -> None:
    manifest = json.loads((batch / "manifest.json").read_text())
    extra = dict(manifest["runs"][0], run_id="ffffffffffffffff", status="pending")
    manifest |= {"state": "running", "runs": [*manifest["runs"], extra]}
    (batch / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("command", ["export", "diff", "stats", "report"])
def test_a_running_batch_is_read_as_a_snapshot_and_said_so(batch, tmp_path, capsys, command):
    _running(batch)
    with ResultsLock(batch, "madbench run"):
        assert main(argv(command, batch, tmp_path)) == 0
    err = capsys.readouterr().err
    assert f"madbench: warning: {batch}: the batch is still running (madbench run on host" in err
    assert f"{command} reads a snapshot of its 2 committed run(s) of 3" in err
    # its driver gone, the manifest still says running: read, and said to be unfinished
    assert main(argv(command, batch, tmp_path)) == 0
    assert f"{command} reads its 2 committed run(s) of 3" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["export", "stats", "report"])
def test_a_first_invocation_still_running_is_read_from_its_committed_runs_parts(batch, tmp_path, capsys, command):
    """Before its first invocation ends a batch has no compacted tables; a stale table of an earlier invocation
    holds fewer runs than are committed. Either way a reader takes the committed runs' parts: one snapshot."""
    _running(batch)
    for name in ("runs", "rounds", "calls"):
        (batch / f"{name}.parquet").unlink()
    (batch / "parts" / "runs" / f"{RUN}.parquet").rename(tmp_path / "uncommitted-part.parquet")
    (batch / "runs" / f"{RUN}.json").rename(tmp_path / "uncommitted-commit.json")  # in flight: parts, no commit yet
    with ResultsLock(batch, "madbench run"):
        assert main(argv(command, batch, tmp_path)) == 0
    assert f"{command} reads a snapshot of its 1 committed run(s) of 3" in capsys.readouterr().err
    if command == "export":
        assert len((tmp_path / "out" / "runs.jsonl").read_text().splitlines()) == 1


def test_replay_refuses_a_batch_that_has_not_finished(batch, tmp_path, capsys):
    _running(batch)
    for held in (True, False):  # a driver at work, or one killed: its tables are not rebuilt from its commits yet
        with ResultsLock(batch, "madbench run") if held else contextlib.nullcontext():
            err = refused(capsys, tmp_path, argv("replay", batch, tmp_path))
        assert "the batch's last invocation has not finished" in err and "replay needs a finished batch" in err


def test_a_finished_batch_is_read_without_a_note(batch, tmp_path, capsys):
    assert main(argv("export", batch, tmp_path)) == 0
    assert errors_only(capsys.readouterr().err) == "" and len((tmp_path / "out" / "runs.jsonl").read_text().splitlines()) == 2


# -- no manifest, an empty --out, a run id that is a path, a damaged table


@pytest.mark.parametrize("command", ["export", "replay", "diff", "report"])
def test_a_folder_without_a_manifest_is_refused(batch, tmp_path, capsys, command):
    (batch / "manifest.json").unlink()
    err = refused(capsys, tmp_path, argv(command, batch, tmp_path))
    assert "manifest.json" in err


def test_export_refuses_an_empty_out(batch, tmp_path, capsys):
    err = refused(capsys, tmp_path, ["export", str(batch), "--format", "jsonl", "--out", ""])
    assert "madbench: error: --out: is empty" in err and not (batch / "export").exists()


@pytest.mark.parametrize("run_id", ["../../../x", "/etc/passwd", "..", "a/b"])
def test_diff_reads_a_run_only_inside_its_results_directory(batch, tmp_path, capsys, run_id):
    (tmp_path / "x.json").write_text("{}")
    err = refused(capsys, tmp_path, ["diff", f"{batch}:{RUN}", f"{batch}:{run_id}"])
    assert f"{batch}:{run_id}: run id {run_id!r}" in err


def test_diff_of_two_runs_of_a_batch_still_works(batch, tmp_path, capsys):
    (other,) = [r["run_id"] for r in json.loads((batch / "manifest.json").read_text())["runs"] if r["run_id"] != RUN]
    assert main(["diff", f"{batch}:{RUN}", f"{batch}:{other}"]) == 0
    out = capsys.readouterr().out
    assert "  name: 'mean3-causal' -> 'single-causal'" in out and "outcomes changed:" in out, out


def test_diff_against_a_truncated_runs_table_is_one_line_not_no_change(batch, tmp_path, capsys):
    with open(batch / "runs.parquet", "r+b") as fh:
        fh.truncate(100)
    err = refused(capsys, tmp_path, argv("diff", batch, tmp_path))
    assert f"{batch / 'runs.parquet'}: not a readable Parquet file" in err
    assert os.path.getsize(batch / "runs.parquet") == 100


def test_a_stopped_batch_says_how_many_committed_runs_it_reads_without_rows(batch, tmp_path, capsys):
    """Killed between a run's commit point and its row log's line: the run is committed but has no rows until the
    batch resumes. A reader leaves it out, and says so rather than counting it among the runs it reads."""
    _running(batch)
    for name in ("runs", "rounds", "calls"):
        (batch / f"{name}.parquet").unlink()
        (batch / "parts" / name / f"{RUN}.parquet").unlink()  # committed, its rows never written
    assert main(argv("export", batch, tmp_path)) == 0
    assert ("export reads its 2 committed run(s) of 3, 1 of them without rows yet"
            in capsys.readouterr().err)
    assert len((tmp_path / "out" / "runs.jsonl").read_text().splitlines()) == 1


def test_a_finished_manifest_with_row_logs_not_yet_folded_is_read_with_their_rows(batch, tmp_path, capsys):
    """Killed after the manifest's last snapshot (``finished``) and before the final compaction: the tables lack the
    runs the row logs hold. A reader merges the logs (and says the batch is unfinished) rather than read the tables."""
    from madbench.results.layout import BatchDirs
    from madbench.results.rowlog import Entry, RowLog
    from madbench.results.table_schemas import SPECS

    dirs = BatchDirs(batch)
    shutil.rmtree(batch / "parts")  # no per-run parts: the tables, as format 6 keeps them
    rows = {}
    for name in ("runs", "rounds", "calls"):
        table = pq.read_table(batch / f"{name}.parquet")
        rows[name] = [dict.fromkeys(SPECS[name].schema.names) | r for r in table.to_pylist() if r["run_id"] == RUN]
        pq.write_table(table.filter(pa.compute.not_equal(table.column("run_id"), RUN)), batch / f"{name}.parquet")
    log = RowLog(dirs, "killed")
    log.append(Entry(RUN, 1, rows))
    log.close()
    assert main(argv("export", batch, tmp_path)) == 0
    assert "its row logs are not yet folded into the tables" in capsys.readouterr().err
    assert len((tmp_path / "out" / "runs.jsonl").read_text().splitlines()) == 2
