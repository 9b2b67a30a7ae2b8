"""The type checker over the whole package, as configured in pyproject.toml (strict on madbench.data,
madbench.gateway and madbench.results, check_untyped_defs elsewhere, no module exempted).

mypy cannot follow setuptools' package-dir (``runner/`` is ``madbench.runner``), so the check lays the package out
as a wheel installs it, as links into this checkout, and names each error by its file in the checkout. The test
lays it out in a temporary directory; for a plain ``mypy``
in the checkout, lay it out once under ``build/typecheck/`` (pyproject's ``mypy_path``) with
``python -m tests.test_static_checks``.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TREE = ROOT / "build" / "typecheck"


def package_dirs() -> dict[str, str]:
    """Import name → folder in the checkout, as the wheel maps them (pyproject's ``package-dir``)."""
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]


def link_installed_layout(tree: Path) -> dict[str, str]:
    """Lay ``madbench`` out under ``tree`` as installed, every entry a link into the checkout; the link path of
    each mapped folder → its path in the checkout, to name errors by."""
    shutil.rmtree(tree, ignore_errors=True)  # removes the links, never what they point to
    top = tree / "madbench"
    top.mkdir(parents=True)
    for entry in sorted((ROOT / "madbench").iterdir()):
        if entry.name != "__pycache__":
            (top / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    renamed = {}
    for name, folder in package_dirs().items():
        link = tree / name.replace(".", "/")
        if name != "madbench" and not link.exists():
            link.symlink_to(ROOT / folder, target_is_directory=True)
        renamed[f"{os.path.relpath(link, ROOT)}/"] = renamed[f"{link}/"] = f"{folder}/"
    return renamed


def test_link_layout_names_each_folder_by_its_import_name(tmp_path):
    renamed = link_installed_layout(tmp_path / "tree")
    assert (tmp_path / "tree" / "madbench" / "runner" / "pipeline.py").resolve() == ROOT / "runner" / "pipeline.py"
    assert (tmp_path / "tree" / "madbench" / "data" / "errors.py").resolve() == ROOT / "madbench" / "data" / "errors.py"
    assert set(renamed.values()) >= {"runner/", "debate/", "scoring/", "eval/", "madbench/"}


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("mypy") is None,
                    reason="mypy is not installed (pip install -e '.[test]' installs it)")
def test_the_type_checker_finds_no_error(tmp_path):
    # The links and mypy's cache go to a temporary directory (MYPYPATH is searched before pyproject's mypy_path).
    renamed = link_installed_layout(tmp_path / "typecheck")
    env = {**os.environ, "MYPYPATH": str(tmp_path / "typecheck")}
    out = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "mypy-cache")], cwd=ROOT,
                         capture_output=True, text=True, timeout=1800, env=env)
    report = out.stdout + out.stderr
    # the longest link first: .../typecheck/madbench/runner/ before .../typecheck/madbench/
    for link in sorted(renamed, key=len, reverse=True):
        report = report.replace(link, renamed[link])
    assert out.returncode == 0, report[-6000:]
    assert "no issues found" in report


@pytest.mark.skipif(importlib.util.find_spec("ruff") is None, reason="ruff is not installed (pip install -e '.[test]' installs it)")
def test_the_linter_finds_nothing():
    """ruff with the rule set of pyproject.toml (pyflakes, isort, bugbear, pyupgrade, simplify) over the whole tree."""
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=ROOT, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, (out.stdout + out.stderr)[-6000:]


if __name__ == "__main__":  # the layout a plain `mypy` in the checkout reads
    link_installed_layout(TREE)
    print(f"laid out under {TREE}: now run mypy")
