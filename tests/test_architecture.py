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
#: Lowest first: a package may import itself and the packages before it, never one after it.
LAYERS = ("madbench_data", "madbench_gateway", "debate", "scoring", "eval", "runner")
#: Third-party modules slow to import (measured: `madbench --help` stays fast only without them), the only
#: imports allowed inside functions.
LAZY_THIRD_PARTY = {"ray", "litellm", "llama_cpp", "uvicorn", "yfinance", "scipy", "statsmodels", "plotly", "jsonschema",
                    "playwright"}
MAX_FUNCTION_LINES = 65
IMPORT_GRAPH = ROOT.parent / "shared" / "tools" / "import_graph.py"


def modules():
    for pkg in LAYERS:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).with_suffix("")
            parts = list(rel.parts[:-1]) if rel.name == "__init__" else list(rel.parts)
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
    found = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists() and p.name != "tests"}
    assert found == set(LAYERS)


def test_layers_import_one_way():
    wrong = []
    for name, path, tree in modules():
        here = LAYERS.index(name.split(".")[0])
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in imported(name, path, node):
                    top = target.split(".")[0]
                    if top in LAYERS and LAYERS.index(top) > here:
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
    cli = {p.stem for p in (ROOT / "runner" / "cli").glob("*.py")}
    seen: dict[str, list[str]] = {}
    for _, path, _ in modules():
        if path.parent.name != "cli":
            seen.setdefault(path.stem, []).append(str(path.relative_to(ROOT)))
    twice = {k: v for k, v in seen.items() if len(v) > 1 and k not in allowed and k not in cli}
    assert twice == {}


@pytest.mark.skipif(not IMPORT_GRAPH.exists(), reason="../shared/tools/import_graph.py is absent beside this checkout")
def test_the_shared_import_graph_tool_finds_no_cycle():
    for depth in ("1", "2"):
        out = subprocess.run([sys.executable, str(IMPORT_GRAPH), "--depth", depth], cwd=ROOT, capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stdout[-3000:]
        assert "module cycles: 0; package cycles" in out.stdout
