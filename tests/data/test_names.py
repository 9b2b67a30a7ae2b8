"""Names that become paths: one rule (``madbench.data.names``) for a batch's name, a debate config's name and a scenario
id where they are loaded, and one containment check for every path built from a name."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from madbench.data.errors import InputError
from madbench.data.names import NAME_FORM, check_name, inside, name_problem, safe_name_text
from madbench.data.paths import CONFIGS_DIR, MAX_NAME_LENGTH
from madbench.runner.cli import main
from tests.conftest import errors_only
from tests.runner.test_batch import ROOT, TICKERS, write_batch

#: Names that would leave their folder, hide, read as an option, or are not one path component.
BAD = ["../x", "a/b", "/abs/x", ".", "..", "", ".hidden", "-opt", "a\\b", "a b", "n\0ul", "x" * (MAX_NAME_LENGTH + 1)]


def shipped_names() -> list[tuple[str, str]]:
    """(file, name) of every name the shipped configs give: configs' and batches' `name`, scenario ids, routing
    profiles (their file names)."""
    out = []
    for path in sorted(CONFIGS_DIR.rglob("*.y*ml")):
        data = yaml.safe_load(path.read_text())
        if isinstance(data, dict) and isinstance(data.get("name"), str):
            out.append((str(path), data["name"]))
        for s in data.get("scenarios", []) if isinstance(data, dict) and isinstance(data.get("scenarios"), list) else []:
            out.append((str(path), s["id"]))
    out += [(str(p), p.stem) for p in sorted((CONFIGS_DIR / "routing").glob("*.yaml"))]
    return out


def test_every_shipped_name_is_a_plain_name():
    names = shipped_names()
    assert len(names) > 90  # configs, batches, 35 scenarios, routing profiles: the walk found them
    assert [(f, n, name_problem(n)) for f, n in names if name_problem(n) is not None] == []


@pytest.mark.parametrize("name", BAD)
def test_a_name_that_is_not_one_plain_path_component_is_refused_with_the_allowed_form(name):
    assert name_problem(name) is not None
    with pytest.raises(InputError) as err:
        check_name(name, "batch.yaml: name", "batch name")
    assert err.value.where == "batch.yaml: name" and err.value.fix == f"give a batch name of {NAME_FORM}"


def test_a_grid_cells_name_keeps_only_a_names_characters():
    assert safe_name_text("+pid={'kp': 1}") == "+pid=__kp___1_"
    assert name_problem("causal-debate-3" + safe_name_text("+critique_targets={'a': ['b/c']}")) is None


@pytest.mark.parametrize("name", ["../x", "../../victim/PWNED", "/tmp/abs", "a/b", ".", "..", ""])
def test_a_path_built_from_a_name_never_leaves_its_root(tmp_path, name):
    with pytest.raises(InputError, match="would make a path outside"):
        inside(tmp_path / "out", name, "runs.parquet", "config name", ".json")


def test_a_name_from_older_results_still_names_its_own_file(tmp_path):
    # containment, not the form: a grid name written before the form was enforced still exports to its own file
    assert inside(tmp_path, "cfg+x={'a': 1}", "w", suffix=".json") == tmp_path / "cfg+x={'a': 1}.json"
    assert inside(tmp_path, "single-causal", "w", suffix=".json") == tmp_path / "single-causal.json"


def _one_error(capsys) -> str:
    err = errors_only(capsys.readouterr().err)
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("where,name", [("batch", "../../victim"), ("config", "../../../../victim/PWNED"),
                                        ("config", "/tmp/PWNED"), ("scenario", "../x")])
def test_a_batch_config_or_scenario_named_like_a_path_is_one_line_before_anything_is_written(
        make_pack, tmp_path, capsys, where, name):
    batch = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)), replicates=1)
    spec = yaml.safe_load(batch.read_text())
    if where == "batch":
        spec["name"] = name
    elif where == "config":
        config = yaml.safe_load((ROOT / "configs/debate/single-causal.yaml").read_text()) | {"name": name}
        (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
        spec["configs"] = [str(tmp_path / "config.yaml")]
    else:
        scenarios = Path(spec["scenarios"]["file"])
        data = yaml.safe_load(scenarios.read_text())
        data["scenarios"][0]["id"] = name
        scenarios.write_text(yaml.safe_dump(data))
    batch.write_text(yaml.safe_dump(spec))
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert main(["run", str(batch)]) == 2
    err = _one_error(capsys)
    assert f"{name!r} holds a path separator: a name is {NAME_FORM}" in err, err
    assert ("name:" if where != "scenario" else "id:") in err
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # nothing written, no results dir
    assert not (tmp_path.parent / "victim").exists() and not Path("/tmp/PWNED").exists()
