"""docs/python-api.md's example runs as written: a batch built in Python, offline, through real Ray."""

import os
import re
from pathlib import Path

import pytest

from tests.conftest import requires_shared

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "python-api.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)


@requires_shared
@pytest.mark.slow
def test_the_python_api_page_runs_as_written(tmp_path, monkeypatch, capsys):
    import ray
    blocks = python_blocks()
    assert blocks, f"{PAGE} holds no python block"
    if ray.is_initialized():  # the example starts its own Ray, with this test's cache setting
        ray.shutdown()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MADBENCH_CACHE_DIR", str(tmp_path / "cache"))
    namespace: dict = {}
    try:
        for block in blocks:
            exec(compile(block, str(PAGE), "exec"), namespace)
    finally:
        if ray.is_initialized():
            ray.shutdown()
    run = namespace["run"]
    assert (run.ok, run.failed, run.tables.runs) == (4, 0, 4)  # what the page says it prints
    assert Path(os.fspath(run.results_dir)).resolve() == (tmp_path / "results" / "rules-2").resolve()
    out = capsys.readouterr().out
    assert out.startswith("4 0 4\n") and "## Comparison (paired on scenario means)" in out
