"""The package tree is finite, and the same however madbench is reached: from a checkout on PYTHONPATH uninstalled
(a Ray working_dir upload, a worktree), from an editable install, and from a wheel.

Each case runs in an interpreter of a fresh virtual environment that has madbench's dependencies (this
interpreter's site-packages, added by a ``.pth`` line, so none of their ``.pth`` files runs: the environment's own
editable install of madbench does not either) and reaches madbench only the one way under test.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from madbench.checkout import ENTRY_NAME, CheckoutPackages, checkout_root
from tests.test_api import TREE, build_wheel
from tests.test_static_checks import package_dirs

ROOT = Path(__file__).resolve().parents[1]

#: In the interpreter under test: how madbench was found, then every module pkgutil walks from madbench.__path__.
WALK = """
import importlib, json, pkgutil, sys
import madbench, madbench.runner.api
names = [m.name for m in pkgutil.walk_packages(madbench.__path__, "madbench.")]
refused = []
for name in ("madbench.madbench", "madbench.tests"):
    try:
        importlib.import_module(name)
    except ModuleNotFoundError:
        refused.append(name)
finders = sorted(getattr(f, "__module__", "") for f in sys.meta_path if "editable" in getattr(f, "__module__", ""))
print(json.dumps({"names": names, "refused": refused, "finders": finders, "init": madbench.__file__,
                  "runner": madbench.runner.api.__file__}))
"""


def environment(where: Path) -> Path:
    """A virtual environment without madbench whose interpreter imports this one's dependencies; its python."""
    venv.create(where, with_pip=False)
    python = where / "bin" / "python"
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], capture_output=True,
                          text=True, check=True).stdout.strip()
    deps = [p for p in sys.path if p.endswith(("site-packages", "dist-packages")) and Path(p).is_dir()]
    (Path(site) / "zz-madbench-deps.pth").write_text("\n".join(deps) + "\n")  # after the environment's own entries
    return python


def walk(python: Path, cwd: Path, pythonpath: str = "") -> dict:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": pythonpath, "HOME": str(cwd)}
    out = subprocess.run([str(python), "-c", WALK], cwd=cwd, capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1])


def assert_finite_tree(got: dict) -> None:
    names = got["names"]
    assert len(names) == len(set(names)), "a module listed twice"
    assert not [n for n in names if n.startswith(("madbench.madbench", "madbench.tests"))]
    assert got["refused"] == ["madbench.madbench", "madbench.tests"]
    tops = {n for n in names if n.count(".") == 1}
    assert {"madbench.runner", "madbench.debate", "madbench.scoring", "madbench.eval", "madbench.data"} <= tops
    assert {"madbench.runner.api", "madbench.runner.cli.run", "madbench.debate.protocols.paper"} <= set(names)


def source_modules() -> set[str]:
    """The modules of the checkout's source under the names a wheel installs them by (pyproject's package-dir):
    every .py file whose folders, up to its mapped one, are packages."""
    names = set()
    for name, folder in package_dirs().items():
        top = ROOT / folder
        for path in top.rglob("*.py"):
            folders = path.parent.relative_to(top).parts
            if all((top.joinpath(*folders[:i]) / "__init__.py").is_file() for i in range(len(folders) + 1)):
                names.add(".".join([name, *folders, *([] if path.stem == "__init__" else [path.stem])]))
    return names - {"madbench"}


def copy_checkout(dest: Path) -> Path:
    """The checkout's files a build reads, copied, so that a build leaves nothing in the checkout."""
    dest.mkdir(parents=True)
    for name in TREE:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(ROOT / name, dest / name)
    return dest


def test_the_source_modules_are_what_a_wheel_lists():
    names = source_modules()
    assert {"madbench.runner.api", "madbench.data.paths", "madbench.checkout", "madbench.eval.stats"} <= names
    assert not any(".configs" in n or "__pycache__" in n for n in names)


def test_the_path_hook_answers_only_its_own_entry_and_names(tmp_path):
    with pytest.raises(ImportError):
        CheckoutPackages(str(tmp_path))
    finder = CheckoutPackages(str(ROOT / ENTRY_NAME))
    assert finder.root == ROOT and checkout_root(ROOT / "madbench") == ROOT
    assert finder.find_spec("madbench.tests") is None and finder.find_spec("madbench.madbench") is None
    assert finder.find_spec("madbench.runner").origin == str(ROOT / "runner" / "__init__.py")
    assert [name for name, _ in finder.iter_modules("madbench.")] == ["madbench.debate", "madbench.eval", "madbench.runner",
                                                                     "madbench.scoring"]
    assert checkout_root(tmp_path / "madbench") is None  # an installed package: no entry


@pytest.mark.slow
def test_the_checkout_on_pythonpath_uninstalled_walks_each_module_once(tmp_path):
    got = walk(environment(tmp_path / "venv"), tmp_path, pythonpath=str(ROOT))
    assert got["finders"] == []  # nothing but the checkout's own entry can have found madbench.runner
    assert Path(got["runner"]) == ROOT / "runner" / "api.py"
    assert_finite_tree(got)
    assert set(got["names"]) == source_modules()


@pytest.mark.slow
def test_an_editable_install_walks_each_module_once(tmp_path):
    src = copy_checkout(tmp_path / "src")
    python = environment(tmp_path / "venv")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-cache-dir", "-q",
                    "-e", str(src)], check=True, timeout=600, capture_output=True)
    got = walk(python, tmp_path)
    assert got["finders"] == ["__editable___madbench_0_1_0_finder"]  # setuptools' finder, mapping runner/ and the rest
    assert Path(got["runner"]) == src / "runner" / "api.py"
    assert_finite_tree(got)
    assert set(got["names"]) == source_modules()


@pytest.mark.slow
def test_a_wheel_walks_each_module_once(tmp_path):
    wheel = build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as z:
        z.extractall(tmp_path / "site")
    got = walk(environment(tmp_path / "venv"), tmp_path, pythonpath=str(tmp_path / "site"))
    assert Path(got["runner"]) == tmp_path / "site" / "madbench" / "runner" / "api.py"
    assert_finite_tree(got)
    assert set(got["names"]) == source_modules()
