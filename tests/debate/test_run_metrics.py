"""Run metrics: what a metric returns becomes the run's extras (runs.parquet's x_metric_… columns), read back by the
statistics under the metric's own name."""

from __future__ import annotations

import pandas as pd
import pytest

from madbench.data.errors import InputError
from madbench.debate.config import DebateConfig
from madbench.debate.run_metrics import RunView, concentration, metric_columns, metric_extras, named_metric_columns

CFG = DebateConfig(name="t", agents=[{"role": "macro"}])


def view(weights: dict[str, float], cash: float = 0.0) -> RunView:
    return RunView(events=[], weights=weights, cash=cash, backtest={}, extras={}, config=CFG)


def test_concentration_is_the_sum_of_squared_weights_cash_included():
    assert concentration(view({"A": 0.25, "B": 0.25, "C": 0.25, "D": 0.25})) == pytest.approx(0.25)
    assert concentration(view({"A": 0.6, "B": 0.0}, cash=0.4)) == pytest.approx(0.36 + 0.16)


def test_a_metric_of_several_values_gives_one_extra_each(monkeypatch):
    import madbench.debate.run_metrics as rm
    monkeypatch.setitem(rm.BUILTIN, "spread", "tests.debate.test_run_metrics:_spread")
    out = metric_extras(["concentration", "spread"], view({"A": 0.5, "B": 0.5}), "config t")
    assert out == {"metric_concentration": pytest.approx(0.5), "metric_spread_max": 0.5, "metric_spread_min": 0.5}


def test_a_metric_returning_text_is_refused(monkeypatch):
    import madbench.debate.run_metrics as rm
    monkeypatch.setitem(rm.BUILTIN, "wordy", "tests.debate.test_run_metrics:_wordy")
    with pytest.raises(InputError, match="config t: metrics: run metric wordy returned 'high' for metric_wordy"):
        metric_extras(["wordy"], view({"A": 1.0}), "config t")


def test_a_metric_that_raises_is_named_in_one_line_with_the_way_out(monkeypatch):
    import madbench.debate.run_metrics as rm
    monkeypatch.setitem(rm.BUILTIN, "boom", "tests.debate.test_run_metrics:_boom")
    with pytest.raises(InputError) as err:
        metric_extras(["concentration", "boom"], view({"A": 1.0}), "config t")
    text = str(err.value)
    assert text.startswith("config t: metrics: run metric boom raised ZeroDivisionError: division by zero")
    assert "--retry-failed" in text and "\n" not in text


def test_the_statistics_read_a_metric_column_under_its_name():
    runs = pd.DataFrame({"config": ["a"], "sharpe": [1.0], "x_metric_spread": [0.2], "x_metric_note": ["text"],
                         "x_metric_sharpe": [9.0], "x_winner": ["P1"]})
    named = named_metric_columns(runs)
    assert list(named.columns) == ["config", "sharpe", "spread", "note", "x_metric_sharpe", "x_winner"]
    assert metric_columns(runs) == ["spread"]  # numeric, and not shadowing a column of the table's own


def _spread(run: RunView) -> dict[str, float]:
    return {"max": max(run.weights.values()), "min": min(run.weights.values())}


def _wordy(run: RunView) -> str:
    return "high"


def _boom(run: RunView) -> float:
    return 1 / 0
