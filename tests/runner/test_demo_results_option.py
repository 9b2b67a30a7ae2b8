"""`madbench demo --results` is checked before anything runs (runner/cli/demo.py)."""

import pytest

from madbench.runner.cli import demo as demo_cli
from madbench.runner.cli import main


@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_demo_results_folder_is_refused_before_any_batch_runs(value, monkeypatch, capsys):
    monkeypatch.setattr(demo_cli, "run_demo", lambda *a, **k: pytest.fail("the demo ran"))
    assert main(["demo", "--no-local", "--results", value]) == 2
    assert "--results: is empty" in capsys.readouterr().err
