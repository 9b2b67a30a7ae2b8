"""Issue 21 (7): bad input that used to end in a traceback is one line on stderr naming the file, and exit 2."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from madbench_data.market.pack import load_pack
from madbench_gateway import ResponseCache
from runner.batch import expand, load_batch, resolve_configs, resolve_scenarios
from runner.cli import main
from runner.execute import run_batch
from runner.store import BatchLayout, read_manifest
from tests.runner.test_batch import ROOT, TICKERS, write_batch

NOT_UTF8 = "# r\xe9sum\xe9 of the batch\n".encode("latin-1")


def one_line(capsys) -> str:
    err = capsys.readouterr().err
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
    assert {r["status"] for r in read_manifest(root)["runs"]} == {"ok"}


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
        proc = subprocess.run([*_as_unprivileged(), sys.executable, "-m", "runner.cli", "run", str(batch), "--quiet",
                               "--cache-dir", str(cache)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    finally:
        cache.chmod(0o755)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
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
    assert m["state"].startswith("stopped: RuntimeError: runner actors keep dying"), m["state"]
    assert {r["status"] for r in m["runs"]} == {"pending"}
