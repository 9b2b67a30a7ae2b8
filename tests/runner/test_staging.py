"""A staged run's files reach the results directory whole and append-only; paths in a job's working directory and
through the Ray client."""

import json
import os

import pytest
import yaml

import madbench.data.market.pack as pack_module
from madbench.data.paths import PROJECT_ROOT
from madbench.debate.trace import compressed_path, trace_bytes
from madbench.results import SPECS, TABLES, RunResult
from madbench.results.rowlog import Entry, logs, read_log
from madbench.runner.cli import main
from madbench.runner.execute import HEAD_DIRS, worker_env
from madbench.runner.staging import collect, commit, portable, prepare
from madbench.runner.store import BatchLayout
from tests.conftest import errors_only
from tests.runner.test_batch import TICKERS, write_batch

#: What Ray hands a `ray job submit --working-dir` job's entrypoint.
JOB_ENV = json.dumps({"runtime_env": {"working_dir": "gcs://_ray_pkg_x.zip"}})


def result(run_id: str) -> RunResult:
    return RunResult(run_id=run_id, status="ok", scenario_id="s", invest_quarter="2021Q2", config_name="c", sample_index=0)


def staged_run(layout: BatchLayout, run_id: str, trace: bytes) -> None:
    layout.trace_path(run_id).parent.mkdir(parents=True, exist_ok=True)
    layout.trace_path(run_id).write_bytes(trace)
    layout.result_path(run_id).parent.mkdir(parents=True, exist_ok=True)
    layout.result_path(run_id).write_text(result(run_id).model_dump_json())


def entry(run_id: str) -> Entry:
    return Entry(run_id, 2, {t: [dict.fromkeys(SPECS[t].schema.names) | {"run_id": run_id}] for t in TABLES})


def test_a_staged_run_is_committed_trace_result_rows_and_only_over_a_trace_it_extends(tmp_path):
    node, head = BatchLayout(tmp_path / "node"), BatchLayout(tmp_path / "head")
    head.trace_path("r1").parent.mkdir(parents=True)
    head.trace_path("r1").write_bytes(b"attempt 1\n")
    prepare(node, "r1", b"attempt 1\n")  # the results directory's trace, continued on the node
    assert node.trace_path("r1").read_bytes() == b"attempt 1\n"
    staged_run(node, "r1", b"attempt 1\nattempt 2\n")
    artifacts = collect(node, "r1", entry("r1"))
    assert not any(p.is_file() for p in (tmp_path / "node").rglob("*"))  # nothing left on the node
    commit(head, "r1", artifacts)
    assert trace_bytes(head.trace_path("r1")) == b"attempt 1\nattempt 2\n"  # stored compressed
    assert compressed_path(head.trace_path("r1")).is_file() and not head.trace_path("r1").exists()
    assert RunResult.model_validate_json(head.result_path("r1").read_text()) == result("r1")
    (log,) = logs(head)  # the rows in the driver's row log
    assert read_log(log)[0] == [entry("r1")]
    with pytest.raises(RuntimeError, match="does not extend"):
        commit(head, "r1", artifacts | {"trace": b"another history\n"})
    with pytest.raises(RuntimeError, match="the result of run r1"):
        commit(head, "r2", artifacts)
    with pytest.raises(RuntimeError, match="the table rows of run r3"):
        commit(head, "r1", artifacts | {"rows": entry("r3")})


def test_prepare_keeps_a_staged_trace_that_extends_the_heads_and_drops_stale_files(tmp_path):
    node = BatchLayout(tmp_path / "node")
    staged_run(node, "r", b"a\nb\n")
    prepare(node, "r", b"a\n")  # this node began an attempt the head has not seen: resumed from it
    assert node.trace_path("r").read_bytes() == b"a\nb\n" and not node.result_path("r").exists()
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
    monkeypatch.setenv("RAY_JOB_CONFIG_JSON_ENV_VAR", JOB_ENV)
    assert main(["run", str(batch), "--quiet"]) == 2
    err = errors_only(capsys.readouterr().err)
    assert "--results-dir" in err and "inside this job's working directory" in err and err.count("\n") == 1
    assert f"e.g. {HEAD_DIRS['--results-dir']} (cluster.yaml's)" in err  # outside the synced checkout, ~/madbench
    assert not (tmp_path / "results" / "t" / "manifest.json").exists()


def test_a_job_without_a_pack_is_told_to_name_one_on_the_head(tmp_path, monkeypatch, capsys):
    batch = write_batch(tmp_path, tmp_path / "pack")
    spec = yaml.safe_load(batch.read_text())
    del spec["pack"]
    batch.write_text(yaml.safe_dump(spec))
    monkeypatch.delenv("MADBENCH_PACK", raising=False)
    monkeypatch.setattr(pack_module, "SHARED_MARKET", tmp_path / "no-offline-pack")  # as in a job: not beside its upload
    monkeypatch.setenv("RAY_JOB_CONFIG_JSON_ENV_VAR", JOB_ENV)
    assert main(["run", str(batch), "--dry-run"]) == 2
    err = errors_only(capsys.readouterr().err)
    assert "no data pack given" in err and "inside a Ray job, pass --pack with an absolute path on the head" in err
    assert err.count("\n") == 1


def test_scenarios_from_the_command_line_replace_the_batchs_file_and_its_ids_still_select(make_pack, tmp_path, capsys):
    """As in a job whose batch names scenarios beside the checkout, outside its upload (configs/batches/rq2-e1.yaml)."""
    batch = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)))
    moved = tmp_path / "on-the-head.yaml"
    (tmp_path / "scenarios.yaml").rename(moved)
    assert main(["run", str(batch), "--dry-run", "--json"]) == 2
    assert "scenarios.yaml not found" in capsys.readouterr().err
    assert main(["run", str(batch), "--dry-run", "--json", "--scenarios", str(moved)]) == 0
    assert json.loads(capsys.readouterr().out)["runs"] == 4 * 2 * 2  # scenarios × configs × replicates
    spec = yaml.safe_load(batch.read_text())
    batch.write_text(yaml.safe_dump(spec | {"scenarios": {"file": "gone.yaml", "ids": ["s2021Q3"]}}))
    assert main(["run", str(batch), "--dry-run", "--json", "--scenarios", str(moved)]) == 0
    assert json.loads(capsys.readouterr().out)["runs"] == 1 * 2 * 2
    assert main(["run", str(batch), "--dry-run", "--scenarios", str(tmp_path / "nowhere.yaml")]) == 2
    err = errors_only(capsys.readouterr().err)
    assert "error: --scenarios: " in err and "nowhere.yaml not found" in err and err.count("\n") == 1


@pytest.mark.parametrize("cache", [None, "relative/cache"])
def test_the_ray_client_without_the_heads_cache_directory_is_refused_before_anything_runs(make_pack, tmp_path, monkeypatch,
                                                                                          capsys, cache):
    batch = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)))
    monkeypatch.delenv("MADBENCH_CACHE_DIR", raising=False)
    args = ["run", str(batch), "--quiet", "--address", "ray://127.0.0.1:1"] + (["--cache-dir", cache] if cache else [])
    assert main(args) == 2  # before any connection: nothing listens on port 1
    err = errors_only(capsys.readouterr().err)
    assert "error: --cache-dir: " in err and "through the Ray client (ray://127.0.0.1:1)" in err and err.count("\n") == 1
    assert f"--cache-dir {HEAD_DIRS['--cache-dir']} (cluster.yaml's MADBENCH_CACHE_DIR)" in err
    assert not (tmp_path / "results" / "t").exists()


def test_the_ray_clients_cache_directory_is_the_heads_and_not_checked_here(make_pack, tmp_path, monkeypatch, capsys):
    batch = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)))
    (tmp_path / "a-file").write_text("")
    cache = str(tmp_path / "a-file" / "cache")  # unusable here, whoever runs the test (root too)
    assert main(["run", str(batch), "--dry-run", "--cache-dir", cache]) == 2
    assert "path runs through a file" in capsys.readouterr().err
    assert main(["run", str(batch), "--dry-run", "--json", "--cache-dir", cache, "--address", "ray://127.0.0.1:1"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"] == 16


def test_workers_get_the_project_on_their_path_only_where_it_is_theirs(monkeypatch):
    monkeypatch.delenv("RAY_JOB_CONFIG_JSON_ENV_VAR", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    monkeypatch.setenv("MADBENCH_TEST_FORWARDED", "value")
    monkeypatch.setenv("MADBENCH_FORWARD_ENV", "MADBENCH_TEST_FORWARDED")
    monkeypatch.delenv("RAY_worker_niceness", raising=False)
    nice = {"RAY_worker_niceness": "0"}  # the actors compete with the machine's other work as equals
    local = worker_env(None)["env_vars"]  # a local Ray, or a cluster this machine is a node of
    assert local == {"PYTHONPATH": str(PROJECT_ROOT) + os.pathsep + "/elsewhere", "MADBENCH_TEST_FORWARDED": "value", **nice}
    assert worker_env("ray://head:10001")["env_vars"] == {"MADBENCH_TEST_FORWARDED": "value", **nice}  # a path on the laptop
    monkeypatch.setenv("RAY_ADDRESS", "ray://head:10001")
    assert "PYTHONPATH" not in worker_env(None)["env_vars"]
    monkeypatch.delenv("RAY_ADDRESS")
    monkeypatch.setenv("RAY_JOB_CONFIG_JSON_ENV_VAR", JOB_ENV)  # Ray puts each node's copy of the upload on the path
    assert worker_env("127.0.0.1:6379")["env_vars"] == {"MADBENCH_TEST_FORWARDED": "value", **nice}
