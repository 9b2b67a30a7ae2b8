"""A staged run's files reach the results directory whole and append-only; paths in a job's working directory."""

import json

import pytest

from runner.cli import main
from runner.staging import collect, commit, portable, prepare
from runner.store import TABLES, BatchLayout
from tests.runner.test_batch import TICKERS, write_batch


def staged_run(layout: BatchLayout, run_id: str, trace: bytes) -> None:
    layout.trace_path(run_id).parent.mkdir(parents=True, exist_ok=True)
    layout.trace_path(run_id).write_bytes(trace)
    layout.result_path(run_id).parent.mkdir(parents=True, exist_ok=True)
    layout.result_path(run_id).write_text(json.dumps({"run_id": run_id}))
    for t in TABLES:
        layout.part(t, run_id).parent.mkdir(parents=True, exist_ok=True)
        layout.part(t, run_id).write_bytes(t.encode())


def test_a_staged_run_is_committed_trace_result_parts_and_only_over_a_trace_it_extends(tmp_path):
    node, head = BatchLayout(tmp_path / "node"), BatchLayout(tmp_path / "head")
    head.trace_path("r1").parent.mkdir(parents=True)
    head.trace_path("r1").write_bytes(b"attempt 1\n")
    prepare(node, "r1", b"attempt 1\n")  # the results directory's trace, continued on the node
    assert node.trace_path("r1").read_bytes() == b"attempt 1\n"
    staged_run(node, "r1", b"attempt 1\nattempt 2\n")
    artifacts = collect(node, "r1")
    assert not any(p.is_file() for p in (tmp_path / "node").rglob("*"))  # nothing left on the node
    commit(head, "r1", artifacts)
    assert head.trace_path("r1").read_bytes() == b"attempt 1\nattempt 2\n"
    assert json.loads(head.result_path("r1").read_text()) == {"run_id": "r1"}
    assert [head.part(t, "r1").read_bytes() for t in TABLES] == [t.encode() for t in TABLES]
    with pytest.raises(RuntimeError, match="does not extend"):
        commit(head, "r1", artifacts | {"trace": b"another history\n"})
    with pytest.raises(RuntimeError, match="the result of run r1"):
        commit(head, "r2", artifacts)


def test_prepare_keeps_a_staged_trace_that_extends_the_heads_and_drops_stale_files(tmp_path):
    node = BatchLayout(tmp_path / "node")
    staged_run(node, "r", b"a\nb\n")
    prepare(node, "r", b"a\n")  # this node began an attempt the head has not seen: resumed from it
    assert node.trace_path("r").read_bytes() == b"a\nb\n" and not node.result_path("r").exists()
    assert not any(node.part(t, "r").exists() for t in TABLES)
    prepare(node, "r", b"x\n")  # the head's trace moved on elsewhere: start from it
    assert node.trace_path("r").read_bytes() == b"x\n"
    prepare(node, "r", None)
    assert node.trace_path("r").read_bytes() == b"x\n"  # extends the (empty) head trace: kept
    node.trace_path("r").write_bytes(b"")
    prepare(node, "r", None)
    assert node.trace_path("r").exists()


def test_paths_inside_a_jobs_working_directory_travel_relative(tmp_path):
    assert portable(tmp_path / "job" / "packs" / "p", tmp_path / "job") == "packs/p"
    assert portable(tmp_path / "elsewhere", tmp_path / "job") == str(tmp_path / "elsewhere")
    assert portable(tmp_path / "elsewhere", None) == str(tmp_path / "elsewhere")


def test_results_inside_a_jobs_working_directory_are_refused_before_anything_runs(make_pack, tmp_path, monkeypatch, capsys):
    batch = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)))  # results_dir: tmp_path/results
    monkeypatch.chdir(tmp_path)  # a `ray job submit --working-dir` entrypoint runs in its working directory
    monkeypatch.setenv("RAY_JOB_CONFIG_JSON_ENV_VAR", json.dumps({"runtime_env": {"working_dir": "gcs://_ray_pkg_x.zip"}}))
    assert main(["run", str(batch), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "--results-dir" in err and "inside this job's working directory" in err and err.count("\n") == 1
    assert not (tmp_path / "results" / "t" / "manifest.json").exists()
