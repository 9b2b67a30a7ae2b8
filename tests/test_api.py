"""The Python API (``madbench.run``, ``madbench.estimate``, ``madbench.open_results``): what the CLI calls, usable from
a notebook, and importable from an installed wheel whatever folders sit in the working directory."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
import yaml

import madbench
from madbench.results.records import read_manifest
from madbench.runner.api import BatchRun
from tests.conftest import requires_shared

ROOT = Path(__file__).resolve().parents[1]
RULES_35 = ROOT / "configs" / "batches" / "rules-35.yaml"


@pytest.fixture
def readme_run(readme_rules35, monkeypatch):
    """The README's example (run once per session), seen from its working directory."""
    here, namespace = readme_rules35
    monkeypatch.chdir(here)
    monkeypatch.setenv("MADBENCH_CACHE_DIR", str(here / "cache"))
    yield here, namespace
    import ray
    if ray.is_initialized():  # a test that ran the API again here: its Ray holds this cache setting
        ray.shutdown()


@requires_shared
@pytest.mark.slow
def test_the_readme_example_runs_rules_35_offline_and_its_tables_hold_35_scenarios_by_3_configs(readme_run):
    here, ns = readme_run
    run, res = ns["run"], ns["res"]
    assert isinstance(run, BatchRun) and (run.ok, run.failed, run.pending, run.exit_status) == (105, 0, 0, 0)
    assert run.results_dir.resolve() == (here / "results" / "rules-35").resolve() and run.failures == []
    runs = res.runs
    assert len(runs) == 105 and runs["scenario_id"].nunique() == 35
    assert runs.groupby("config").size().to_dict() == {"causal-debate-3": 35, "mean3-causal": 35, "single-causal": 35}
    assert {"run_id", "config", "scenario_id", "status", "sharpe", "rho_bar", "cost_usd"} <= set(runs.columns)
    assert len(res.rounds) == run.tables.rounds > 0 and len(res.calls) == run.tables.calls > 0
    assert res.scores.empty and "label" in res.scores.columns  # nothing re-scored yet
    assert res.manifest.spec["name"] == "rules-35"


@requires_shared
@pytest.mark.slow
def test_results_give_the_status_statistics_and_report_the_commands_give(readme_run):
    here, ns = readme_run
    res = ns["res"]
    status = res.status()
    assert (status.batch, status.state, status.ok, status.committed, status.in_flight) == ("rules-35", "finished", 105, 105, [])
    analysis = res.stats(compare=["causal-debate-3", "single-causal"], metrics=["sharpe"])
    assert analysis.configs == ["causal-debate-3", "single-causal"] and len(analysis.pairs) == 1
    assert "## Comparison" in analysis.markdown()
    assert (here / "results" / "rules-35" / "report.html").is_file()  # the example wrote it


@requires_shared
@pytest.mark.slow
def test_a_second_run_of_a_committed_batch_runs_nothing(readme_run):
    here, ns = readme_run
    recorded = read_manifest(here / "results" / "rules-35").runs
    again = madbench.run("configs/batches/rules-35.yaml", results_dir="results")  # the fixture's working directory
    assert (again.skipped, again.submitted, again.ok) == (105, 0, 105)
    # Where each run ran is kept (replay checks the tables against it), and what became of it.
    after = read_manifest(here / "results" / "rules-35").runs
    assert [(m.run_id, m.status, m.error, m.node_id) for m in after] == \
        [(m.run_id, m.status, m.error, m.node_id) for m in recorded] and all(m.node_id for m in recorded)
    assert madbench.estimate("configs/batches/rules-35.yaml", results_dir="results").estimate is None


def test_a_batch_file_that_does_not_exist_is_an_input_error(tmp_path):
    with pytest.raises(madbench.InputError, match="nothing.yaml"):
        madbench.run(tmp_path / "nothing.yaml", results_dir=tmp_path)


def test_a_model_without_a_provider_is_an_input_error_naming_the_option(tmp_path):
    with pytest.raises(madbench.InputError, match="--model: 'gpt' is not a model string"):
        madbench.estimate(RULES_35, model="gpt", results_dir=tmp_path, cache_dir=tmp_path)


def test_an_argument_of_the_wrong_type_is_an_input_error_naming_it(tmp_path):
    with pytest.raises(madbench.InputError, match="max_runs"):
        madbench.run(RULES_35, max_runs="many", results_dir=tmp_path)


def test_a_folder_without_a_manifest_is_not_a_results_directory(tmp_path):
    with pytest.raises(madbench.InputError, match="no manifest.json here"):
        madbench.open_results(tmp_path)


def test_a_results_directory_of_another_format_is_refused_when_opened(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"format_version": 99, "spec": {"name": "b"}, "versions": {},
                                                        "state": "finished", "updated": "now", "runs": []}))
    with pytest.raises(madbench.InputError, match="results format 99"):
        madbench.open_results(tmp_path)


def test_importing_madbench_loads_neither_ray_nor_pandas():
    code = ("import json, sys, madbench, madbench.data.paths; "
            "print(json.dumps([sorted(m for m in ('ray', 'pandas', 'pydantic') if m in sys.modules), madbench.__all__]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=os.environ | {"PYTHONPATH": str(ROOT)}, check=True).stdout
    loaded, public = json.loads(out)
    assert loaded == []
    assert {"run", "estimate", "open_results", "BatchRun", "Results", "InputError", "__version__"} <= set(public)


# -- the wheel: one top-level name, and the user's own folders never shadow ours

TREE = ("pyproject.toml", "README.md", "madbench", "runner", "debate", "scoring", "eval", "configs")


def build_wheel(dest: Path) -> Path:
    src = dest / "src"
    src.mkdir()
    for name in TREE:  # a copy, so that the build leaves nothing in the checkout
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy
        copy(ROOT / name, src / name, **({"ignore": shutil.ignore_patterns("__pycache__")} if copy is shutil.copytree else {}))
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "-w", str(dest / "wheel"), "-q"],
                   check=True, timeout=600, capture_output=True)
    return next((dest / "wheel").glob("madbench-*.whl"))


def shadowing_workdir(where: Path) -> Path:
    """A working directory with its own eval/ and scoring/ packages, which fail loudly when imported."""
    for name in ("eval", "scoring"):
        (where / name).mkdir(parents=True)
        (where / name / "__init__.py").write_text(f"raise ImportError('the user\\'s own {name}/ was imported')\n")
    return where


@requires_shared
@pytest.mark.slow
def test_the_wheel_installs_one_name_and_a_users_eval_folder_does_not_shadow_ours(tmp_path):
    wheel = build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        info = next(n for n in names if n.endswith(".dist-info/top_level.txt"))
        assert z.read(info).decode().split() == ["madbench"]
    assert all(n.startswith(("madbench/", info.split("/")[0] + "/")) for n in names)
    for module in ("runner/api.py", "runner/cli/__init__.py", "eval/report/page.py", "scoring/rescore.py", "debate/trace.py",
                   "data/paths.py", "gateway/gateway.py", "configs/batches/rules-35.yaml", "configs/scenarios/market-35.yaml"):
        assert f"madbench/{module}" in names

    work = shadowing_workdir(tmp_path / "work")
    scenarios = yaml.safe_load((ROOT / "configs/scenarios/market-35.yaml").read_text())["scenarios"]
    batch = {"name": "rules-2", "scenarios": {"file": str(ROOT / "configs/scenarios/market-35.yaml"),
                                              "ids": [s["id"] for s in scenarios[:2]]},
             "configs": [str(ROOT / "configs/debate/single-causal.yaml"), str(ROOT / "configs/debate/mean3-causal.yaml")],
             "model": "rules/auto", "replicates": 1, "results_dir": "results", "max_in_flight": 4, "workers": 1}
    (work / "rules-2.yaml").write_text(yaml.safe_dump(batch))
    code = textwrap.dedent("""
        import json, sys, madbench
        run = madbench.run("rules-2.yaml", cache_dir="cache")
        res = madbench.open_results(run.results_dir)
        print(json.dumps({"ok": run.ok, "rows": len(res.runs), "configs": sorted(set(res.runs["config"])),
                          "eval": sys.modules["madbench.eval"].__path__[0], "user_eval": "eval" in sys.modules}))
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=work, capture_output=True, text=True, timeout=600,
                         env=os.environ | {"PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.splitlines()[-1])
    assert got["ok"] == got["rows"] == 4 and got["configs"] == ["mean3-causal", "single-causal"]
    assert Path(got["eval"]).resolve() == (ROOT / "eval").resolve() and not got["user_eval"]
