"""The layering of ARCHITECTURE.md, checked on the source: imports go one way, none hide inside functions.

Every import counts, including those inside functions and under ``TYPE_CHECKING`` (a cycle hidden in a
function is still a cycle).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Lowest first: a package may import itself and the packages before it, never one after it. Each is
#: (import name, folder in the checkout); ``madbench`` itself (the public API) sits on top of them all.
LAYERS = (("madbench.data", "madbench/data"), ("madbench.gateway", "madbench/gateway"), ("madbench.debate", "debate"),
          ("madbench.results", "madbench/results"), ("madbench.scoring", "scoring"), ("madbench.eval", "eval"), ("madbench.runner", "runner"),
          ("madbench.sim", "madbench/sim"), ("madbench.bench", "madbench/bench"), ("madbench", "madbench"))
LAYER_NAMES = tuple(name for name, _ in LAYERS)
#: Names the checkout's folders would have without the namespace: nothing may import them.
BARE_NAMES = {"runner", "debate", "scoring", "eval", "madbench_data", "madbench_gateway"}
#: Third-party modules slow to import (measured: `madbench --help` stays fast only without them), the only
#: imports allowed inside functions.
LAZY_THIRD_PARTY = {"ray", "litellm", "openai", "llama_cpp", "uvicorn", "yfinance", "scipy", "statsmodels", "plotly", "jsonschema",
                    "playwright"}
MAX_FUNCTION_LINES = 65
IMPORT_GRAPH = ROOT.parent / "shared" / "tools" / "import_graph.py"


def layer_of(module: str) -> int:
    """The index in LAYERS of the longest layer name that ``module`` starts with."""
    matches = [i for i, name in enumerate(LAYER_NAMES) if module == name or module.startswith(name + ".")]
    return max(matches, key=lambda i: len(LAYER_NAMES[i]))


def modules():
    """(import name, path, tree) of every source module, each once, under the name it is imported by."""
    seen = set()
    for name, folder in LAYERS:
        paths = [(ROOT / folder / "__init__.py")] if name == "madbench" else sorted((ROOT / folder).rglob("*.py"))
        if name == "madbench":
            paths += [p for p in sorted((ROOT / folder).glob("*.py")) if p.name != "__init__.py"]
        for path in paths:
            if path in seen:
                continue
            seen.add(path)
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [*name.split("."), *(rel.parts[:-1] if rel.name == "__init__" else rel.parts)]
            yield ".".join(parts), path, ast.parse(path.read_text(encoding="utf-8"))


def imported(name: str, path: Path, node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if node.level:
        base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        base = base[:len(base) - (node.level - 1)]
        return [".".join(base + ([node.module] if node.module else []))]
    return [node.module or ""]


def test_every_package_is_a_declared_layer():
    top = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists() and p.name != "tests"}
    inside = {f"madbench/{p.name}" for p in (ROOT / "madbench").iterdir() if (p / "__init__.py").exists()}
    assert top | inside == {folder for _, folder in LAYERS}


def test_the_wheel_lists_every_package_folder():
    import tomllib
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setup["packages"])
    expected = {"madbench"}
    for source, folder in setup["package-dir"].items():
        for d in [ROOT / folder, *sorted(p for p in (ROOT / folder).rglob("*") if p.is_dir())]:
            if "__pycache__" in d.parts:
                continue
            if (d / "__init__.py").exists() or source == "madbench.configs":
                expected.add(".".join([source, *d.relative_to(ROOT / folder).parts]))
    assert listed == expected


def test_layers_import_one_way():
    wrong = []
    for name, path, tree in modules():
        here = layer_of(name)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in imported(name, path, node):
                    if target.split(".")[0] in BARE_NAMES:
                        wrong.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {target} (not under madbench.)")
                    elif target.split(".")[0] == "madbench" and layer_of(target) > here:
                        wrong.append(f"{path.relative_to(ROOT)}:{node.lineno} {name} imports {target} (a higher layer)")
    assert wrong == []


def test_only_slow_third_party_modules_are_imported_inside_functions():
    wrong = []
    for name, path, tree in modules():
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    for target in imported(name, path, node):
                        if target.split(".")[0] not in LAZY_THIRD_PARTY:
                            wrong.append(f"{path.relative_to(ROOT)}:{node.lineno} {fn.name} imports {target}")
    assert sorted(set(wrong)) == []


def test_no_function_is_longer_than_about_sixty_lines():
    long = [f"{path.relative_to(ROOT)}:{fn.lineno} {fn.name} ({fn.end_lineno - fn.lineno + 1} lines)"
            for _, path, tree in modules() for fn in ast.walk(tree)
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.end_lineno - fn.lineno + 1 > MAX_FUNCTION_LINES]
    assert long == []


def test_no_two_modules_share_a_name_for_different_things():
    # The CLI modules are named after their commands (runner/cli/backtest.py runs eval/backtest.py); the
    # packages' own exception modules are all called errors.py. Anything else must be unique.
    allowed = {"__init__", "__main__", "errors"}
    cli = {p.stem for p in (ROOT / "runner" / "cli").glob("*.py")} | {"cli"}
    seen: dict[str, list[str]] = {}
    for _, path, _ in modules():
        if path.parent.name != "cli":
            seen.setdefault(path.stem, []).append(str(path.relative_to(ROOT)))
    twice = {k: v for k, v in seen.items() if len(v) > 1 and k not in allowed and k not in cli}
    assert twice == {}


def test_tests_import_madbench_only_under_its_one_name():
    wrong = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and not getattr(node, "level", 0):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                wrong += [f"{path.relative_to(ROOT)}:{node.lineno} {n}" for n in names if n.split(".")[0] in BARE_NAMES]
    assert wrong == []


def installed_layout(dest: Path) -> Path:
    """The source laid out as a wheel installs it (runner/ as madbench/runner/, ...), for tools that read folders."""
    import shutil
    for name, folder in LAYERS:
        if name != "madbench":
            shutil.copytree(ROOT / folder, dest / name.replace(".", "/"), dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__"))
    for path in (ROOT / "madbench").glob("*.py"):
        shutil.copy(path, dest / "madbench" / path.name)
    return dest


@pytest.mark.skipif(not IMPORT_GRAPH.exists(), reason="../shared/tools/import_graph.py is absent beside this checkout")
def test_the_shared_import_graph_tool_finds_no_cycle(tmp_path):
    tree = installed_layout(tmp_path)
    for depth in ("2", "3"):
        out = subprocess.run([sys.executable, str(IMPORT_GRAPH), "--depth", depth], cwd=tree, capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stdout[-3000:]
        assert f"module cycles: 0; package cycles (depth {depth}): 0" in out.stdout
