"""Bad input that used to end in a traceback is one line on stderr naming the file, and exit 2."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from madbench.data.errors import InputError
from madbench.data.market.pack import load_pack
from madbench.data.scenario import Scenario
from madbench.debate.config_file import load_debate_config
from madbench.debate.events import LLMCall
from madbench.debate.trace import TraceWriter
from madbench.gateway import ModelRouting, ResponseCache
from madbench.gateway.cache import answer_sha256
from madbench.results import read_manifest
from madbench.runner.batch import expand, load_batch, resolve_configs, resolve_scenarios
from madbench.runner.cli import main
from madbench.runner.execute import run_batch
from madbench.runner.pipeline import run_debate
from madbench.runner.store import BatchLayout
from madbench.runner.wiring import build_gateway
from tests.conftest import errors_only
from tests.runner.test_batch import ROOT, TICKERS, write_batch

NOT_UTF8 = "# r\xe9sum\xe9 of the batch\n".encode("latin-1")


def one_line(capsys) -> str:
    err = errors_only(capsys.readouterr().err)
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def small_batch(tmp_path: Path, make_pack, **over) -> Path:
    return write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)), replicates=1,
                       configs=[str(ROOT / "configs/debate/single-causal.yaml")], **over)


# -- a non-UTF-8 batch, scenario or debate config file


def test_a_non_utf8_batch_scenario_or_config_file_is_named(make_pack, tmp_path, capsys):
    batch = small_batch(tmp_path, make_pack)
    clean = batch.read_bytes()
    batch.write_bytes(clean + NOT_UTF8)
    assert main(["run", str(batch), "--dry-run"]) == 2
    err = one_line(capsys)
    assert f"{batch}: not UTF-8 text: byte 0xe9 on line" in err and "save the file as UTF-8" in err

    batch.write_bytes(clean)
    scenarios = Path(yaml.safe_load(clean)["scenarios"]["file"])
    scenarios.write_bytes(scenarios.read_bytes() + NOT_UTF8)
    assert main(["run", str(batch), "--dry-run"]) == 2
    assert f"{scenarios}: not UTF-8 text" in one_line(capsys)

    scenarios.write_bytes(scenarios.read_bytes()[: -len(NOT_UTF8)])
    config = tmp_path / "config.yaml"
    config.write_bytes((ROOT / "configs/debate/single-causal.yaml").read_bytes() + NOT_UTF8)
    batch.write_text(yaml.safe_dump(yaml.safe_load(clean) | {"configs": [str(config)]}))
    assert main(["run", str(batch), "--dry-run"]) == 2
    assert f"{config}: not UTF-8 text" in one_line(capsys)


# -- a results directory that is a file


def test_a_results_dir_that_is_a_file_is_named(make_pack, tmp_path, capsys):
    blocker = tmp_path / "results-file"
    blocker.write_text("a file, not a folder")
    batch = small_batch(tmp_path, make_pack, results_dir=str(blocker))
    assert main(["run", str(batch), "--quiet"]) == 2
    assert f"the results directory's path runs through a file ({blocker})" in one_line(capsys)
    batch = small_batch(tmp_path, make_pack)
    assert main(["run", str(batch), "--dry-run", "--results-dir", str(blocker)]) == 2
    assert f"({blocker})" in one_line(capsys)
    assert blocker.read_text() == "a file, not a folder"


def test_an_unreadable_budget_record_is_named_before_the_manifest_says_running(make_pack, tmp_path, capsys):
    batch = small_batch(tmp_path, make_pack)
    root = tmp_path / "results" / "t"
    root.mkdir(parents=True)
    (root / "budget.json").write_text('{"spent_usd": "a lot"}')
    assert main(["run", str(batch), "--quiet"]) == 2
    assert f"{root / 'budget.json'}: not a budget record" in one_line(capsys)
    assert not (root / "manifest.json").exists()  # nothing half-written: no batch "running" without a driver


# -- an unknown model provider


def test_an_unknown_model_provider_is_caught_by_the_preflight(make_pack, tmp_path, capsys):
    batch = small_batch(tmp_path, make_pack, model="nosuchprovider/foo")
    assert main(["run", str(batch), "--quiet"]) == 2
    err = one_line(capsys)
    assert "found before any model call: nosuchprovider/foo: unknown model provider 'nosuchprovider'" in err
    assert not (tmp_path / "results").exists()
    batch = small_batch(tmp_path, make_pack)
    assert main(["run", str(batch), "--dry-run", "--model", "nosuch/x"]) == 2
    assert "nosuch/x: unknown model provider 'nosuch'" in one_line(capsys)


# -- a corrupt runs/<id>.json


@pytest.mark.slow
def test_a_corrupt_committed_result_is_named_by_run_status_report_and_stats_and_deleting_it_reruns_the_run(
        make_pack, tmp_path, capsys, ray_local):
    batch = small_batch(tmp_path, make_pack)
    spec = yaml.safe_load(batch.read_text())
    batch.write_text(yaml.safe_dump(spec | {"scenarios": {"file": spec["scenarios"]["file"], "ids": ["s2021Q2", "s2021Q3"]}}))
    cache = str(tmp_path / "cache")
    assert main(["run", str(batch), "--quiet", "--cache-dir", cache]) == 0
    capsys.readouterr()
    root = tmp_path / "results" / "t"
    truncated, wrong = sorted((root / "runs").glob("*.json"))
    good = truncated.read_text()
    truncated.write_text(good[: len(good) // 2])
    for cmd in (["run", str(batch), "--quiet", "--cache-dir", cache], ["run", str(batch), "--dry-run"],
                ["status", str(root)], ["report", str(root)], ["stats", str(root)]):
        assert main(cmd) == 2, cmd
        err = one_line(capsys)
        assert f"{truncated}: not a valid run result (Invalid JSON" in err, (cmd, err)
        assert "delete it and run the batch's `madbench run` command again" in err
    truncated.unlink()
    wrong.write_text(json.dumps({"run_id": wrong.stem, "status": "ok"}))  # valid JSON, not a run result
    assert main(["status", str(root)]) == 2
    err = one_line(capsys)
    assert f"{wrong}: not a valid run result (" in err and "Field required" in err
    wrong.unlink()
    assert main(["run", str(batch), "--quiet", "--cache-dir", cache]) == 0  # both re-run, from their kept traces
    assert "2 submitted" in capsys.readouterr().out
    again, before = json.loads(truncated.read_text()), json.loads(good)
    assert (again["status"], again["weights"]) == (before["status"], before["weights"])  # the same run, re-run
    assert {r.status for r in read_manifest(root).runs} == {"ok"}


# -- a read-only cache directory


def _as_unprivileged() -> list[str]:
    """Root writes through any mode bits: run the CLI without the capabilities that let it (as a user would)."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: a read-only directory cannot be made read-only for this process")
    caps = "-dac_override,-dac_read_search"
    return ["setpriv", "--bounding-set", caps, "--inh-caps", caps]


@pytest.mark.parametrize("lock", ["folder", "files"])
def test_a_read_only_cache_is_named_before_anything_starts(make_pack, tmp_path, lock):
    batch = small_batch(tmp_path, make_pack)
    cache = tmp_path / "cache"
    with ResponseCache(cache) as c:  # a real cache, with its databases
        c.put("k", "rules/auto", {"response": {"content": "{}"}})
    if lock == "folder":
        cache.chmod(0o555)
        blocked = cache
    else:
        blocked = cache / "responses" / "cache.db"
        for db in cache.glob("*/cache.db*"):
            db.chmod(0o444)
    try:
        env = os.environ | {"PYTHONPATH": str(ROOT)}
        proc = subprocess.run([*_as_unprivileged(), sys.executable, "-m", "madbench.runner.cli", "run", str(batch), "--quiet",
                               "--cache-dir", str(cache)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    finally:
        cache.chmod(0o755)
    assert proc.returncode == 2, proc.stderr
    assert errors_only(proc.stderr).count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert f"the LLM cache directory {cache} is read-only ({blocked} is not writable by this user)" in proc.stderr
    assert not (tmp_path / "results").exists()  # nothing started, nothing written


@pytest.mark.slow
def test_a_batch_stopped_by_dying_actors_is_not_recorded_as_finished(make_pack, tmp_path, ray_local):
    # The preflight is bypassed (run_batch is called directly) so that every runner actor dies as it opens the cache.
    batch = small_batch(tmp_path, make_pack, workers=1)
    spec, base = load_batch(batch)
    pack = make_pack(tickers=tuple(TICKERS))
    scenarios = resolve_scenarios(spec, base, load_pack(pack), str(batch))
    runs = expand(spec, scenarios, resolve_configs(spec, base, str(batch)), str(batch))
    not_a_folder = tmp_path / "cache"
    not_a_folder.write_text("")
    layout = BatchLayout(tmp_path / "results" / "t")
    with pytest.raises(RuntimeError, match="runner actors keep dying"):
        run_batch(spec, runs, layout, str(pack), [], str(not_a_folder), quiet=True)
    m = read_manifest(layout.root)
    assert m.state.startswith("stopped: RuntimeError: runner actors keep dying"), m.state
    assert {r.status for r in m.runs} == {"pending"}


# -- `madbench rescore` on a corrupt runs/<id>.json: the same line as run, status, report and stats


def test_rescore_names_a_corrupt_committed_result_as_every_other_command_does(make_pack, tmp_path, capsys):
    pack = load_pack(make_pack(tickers=tuple(TICKERS)))
    cfg = load_debate_config(ROOT / "configs/debate/single-causal.yaml").model_copy(
        update={"models": ModelRouting.single("rules/auto")})
    layout = BatchLayout(tmp_path / "results" / "t")
    scenario = Scenario(id="s", invest_quarter="2021Q3", tickers=TICKERS, constraints={"max_weight": 0.6})
    result = asyncio.run(run_debate(scenario, pack, cfg, build_gateway(), layout))
    assert result.status == "ok"
    committed = layout.result_path(result.run_id)
    committed.write_text(committed.read_text()[:40])  # truncated by something other than madbench
    with pytest.raises(InputError) as expected:
        layout.stored_result(result.run_id)  # what `run`, `status`, `report` and `stats` say
    for dry in ([], ["--dry-run"]):
        assert main(["rescore", str(layout.root), "--scorer", "rules", "--quiet", *dry]) == 2  # not "1 other trace skipped"
        assert one_line(capsys) == f"madbench: error: {expected.value}\n"


# -- a trace that is a symbolic link: a plain one-line message, no Python class name


def test_a_planted_trace_link_is_one_plain_line(tmp_path, capsys):
    outside = tmp_path / "outside.jsonl"
    outside.write_text("not madbench's\n")
    (tmp_path / "runs" / "r1").mkdir(parents=True)
    (tmp_path / "runs" / "r1" / "trace.jsonl").symlink_to(outside)
    ResponseCache(tmp_path / "cache").close()
    assert main(["cache", "verify", str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache")]) == 2
    err = one_line(capsys)
    assert f"{tmp_path / 'runs' / 'r1' / 'trace.jsonl'}: the trace is a symbolic link (to {outside})" in err
    assert "Error" not in err.removeprefix("madbench: error: ") and "remove the link" in err


# -- the cache commands on a read-only cache: read-only ones work, writing ones say so in one line


READ_ONLY_CLI = """
import contextlib, io, json, sys
from madbench.runner.cli import main
out = []
for argv in json.loads(sys.argv[1]):
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        rc = main(argv)
    out.append([rc, stdout.getvalue(), stderr.getvalue()])
print(json.dumps(out))
"""


@pytest.mark.parametrize("lock", ["folder", "files"])
def test_cache_commands_on_a_read_only_cache(tmp_path, lock):
    cache, empty, runs = tmp_path / "cache", tmp_path / "empty", tmp_path / "runs"
    empty.mkdir()
    with ResponseCache(cache) as c:
        c.put("k", "rules/auto", {"response": {"content": "{}"}})
        c.get("k", "rules/auto")
    with TraceWriter(runs / "r1" / "trace.jsonl") as trace:  # a run that used the entry, for `cache verify`
        trace.write(LLMCall(agent="macro", phase="propose", round=0, label="propose", key="k", model_requested="m",
                            model_used="m", is_llm=True, cached=False, latency_s=0.1, response="{}",
                            answer_sha256=answer_sha256("{}")))
    locked = [cache, cache / "responses", cache / "stats", empty] if lock == "folder" else list(cache.glob("*/cache.db*"))
    blocked = cache if lock == "folder" else cache / "responses" / "cache.db"
    before = {p: p.stat().st_mode for p in locked}
    for p in locked:
        p.chmod(0o555 if p.is_dir() else 0o444)
    argvs = [["cache", "stats", "--cache-dir", str(cache), "--json"], ["cache", "stats", "--cache-dir", str(empty)],
             ["cache", "verify", str(runs), "--cache-dir", str(cache)],
             ["cache", "prune", "--older-than", "1d", "--cache-dir", str(cache)],
             ["cache", "verify", str(runs), "--cache-dir", str(cache), "--drop"],
             ["llm", "ask", "--model", "rules/auto", "--prompt", "hi", "--cache-dir", str(cache)]]
    try:
        proc = subprocess.run([*_as_unprivileged(), sys.executable, "-c", READ_ONLY_CLI, json.dumps(argvs)], cwd=ROOT,
                              env=os.environ | {"PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
    finally:
        for p, mode in before.items():
            p.chmod(mode)
    assert proc.returncode == 0, proc.stderr
    (stats, empty_stats, verify, *writers) = json.loads(proc.stdout)
    assert stats[0] == 0 and json.loads(stats[1])["entries"] == 1 and json.loads(stats[1])["by_model"]["rules/auto"]["hits"] == 1
    assert empty_stats[0] == 0 and "0 entries" in empty_stats[1] and not any(empty.iterdir())  # nothing created
    assert verify[0] == 0 and "1 match, 0 differ" in verify[1]
    for rc, _, err in writers:  # prune, verify --drop and llm ask write: one line naming the directory, exit 2
        assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err, err
        assert f"the LLM cache directory {cache} is read-only ({blocked} is not writable by this user)" in err
    with ResponseCache(cache) as c:  # the cache itself is untouched
        assert len(c) == 1 and c.inspect("k").answer_sha256 == answer_sha256("{}")


def test_a_local_ray_that_does_not_start_is_one_line_exit_4_and_nothing_runs(make_pack, tmp_path, capsys, monkeypatch):
    """An overloaded machine can keep Ray's node from coming up; that cannot be caused on demand, so ray.init raises
    here what Ray raises then. The user gets one line and exit 4, the runs stay pending, and the same command resumes."""
    import ray

    half_started = []

    def timed_out(*args, **kwargs):
        # What a node that failed half-way leaves: a process of its own (its GCS server), not Ray's to shut down.
        half_started.append(subprocess.Popen(["sleep", "600"]))
        raise Exception("The current node timed out during startup. This could happen because some of the raylet "
                        "failed to startup or the GCS has become overloaded.")
    shutdowns = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", timed_out)
    monkeypatch.setattr(ray, "shutdown", lambda: shutdowns.append(1))  # not this worker's own Ray
    batch = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)))
    assert main(["run", str(batch), "--quiet"]) == 4
    err = capsys.readouterr().err
    assert err.count("trying again (2 of 3)") == 1 and err.count("trying again (3 of 3)") == 1  # a busy machine, tried thrice
    assert len(shutdowns) == 3  # each failed start's processes are shut down
    assert len(half_started) == 3 and all(p.poll() is not None for p in half_started)  # and none left behind
    line = errors_only(err)
    assert line.count("\n") == 1 and "Traceback" not in line
    assert "a local Ray did not start (3 tries): The current node timed out during startup" in line and "same command" in line
    manifest = read_manifest(tmp_path / "results" / "t")
    assert manifest.runs and all(r.status == "pending" for r in manifest.runs)
