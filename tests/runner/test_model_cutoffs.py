"""The model-cutoff registry and the post_cutoff column of runs.parquet (true, false, or explicitly null)."""

import gzip
import json
from datetime import date
from pathlib import Path

import pandas as pd
import pytest

from madbench.data.errors import InputError
from madbench.debate.events import LLMCall, RunStart, parse_event
from madbench.runner.cli import main
from madbench.runner.cutoffs import CutoffRegistry, load_cutoffs
from madbench.runner.pipeline import RunResult
from madbench.runner.store import run_row

STORED = Path(__file__).parents[1] / "debate" / "data" / "trace-v0.1-a7.jsonl.gz"


def test_the_shipped_registry_loads_and_the_first_matching_glob_wins():
    reg = load_cutoffs()
    assert reg.cutoff_of("openai/gpt-4o-mini") == date(2023, 10, 31)  # a month reads as its last day
    assert reg.cutoff_of("gpt-4o-2024-08-06") == reg.cutoff_of("openai/gpt-4o")
    assert reg.cutoff_of("anthropic/claude-sonnet-4-5-20250929") == date(2025, 7, 31)  # not claude-sonnet-4*'s date
    assert reg.cutoff_of("anthropic/claude-sonnet-4-20250514") == date(2025, 3, 31)
    assert reg.cutoff_of("local/gemma3-270m") is not None
    assert reg.cutoff_of("openai/madbench-sim") is None


def test_post_cutoff_is_three_valued():
    reg = CutoffRegistry(cutoffs={"old*": "2022-06", "new*": date(2024, 1, 15)})
    assert reg.post_cutoff("2022Q3", ["old-model"]) is True  # starts 2022-07-01, after June 30
    assert reg.post_cutoff("2022Q2", ["old-model"]) is False  # the model read part of the quarter
    assert reg.post_cutoff("2023Q1", ["old-model", "new-model"]) is False
    assert reg.post_cutoff("2024Q2", ["old-model", "unlisted"]) is None  # unknown is never read as False
    assert reg.post_cutoff("2022Q1", ["new-model", "unlisted"]) is False  # a known late cutoff settles it
    assert reg.post_cutoff("2020Q1", []) is True  # rule-based answers only: nothing was trained on the quarter


def test_a_bad_registry_is_one_clear_error(tmp_path):
    bad = tmp_path / "cutoffs.yaml"
    bad.write_text("cutoffs:\n  gpt-x: 2024-13\n")
    with pytest.raises(InputError, match="month 13"):
        load_cutoffs(bad)
    bad.write_text("cutoff:\n  gpt-x: 2024-01\n")
    with pytest.raises(InputError, match="cutoffs"):
        load_cutoffs(bad)
    # the models at the top level, without `cutoffs:`: the fix shows the layout, not "fix the listed fields"
    bad.write_text("madbench-sim: 2024-01\n")
    with pytest.raises(InputError) as err:
        load_cutoffs(bad)
    text = str(err.value)
    assert "cutoffs: Field required" in text and "madbench-sim: unknown key" in text and "fix the listed fields" not in text
    assert "cutoffs: {model-glob: YYYY-MM}" in text and 'e.g. cutoffs: {"gpt-4o*": 2023-10' in text
    good = tmp_path / "good.yaml"  # the layout the fix shows loads
    good.write_text('cutoffs: {"gpt-4o*": 2023-10, "claude-3-5-haiku*": 2024-07}\n')
    assert load_cutoffs(good).cutoff_of("openai/gpt-4o-mini") == date(2023, 10, 31)


def stored_run():
    events = [parse_event(json.loads(line)) for line in gzip.decompress(STORED.read_bytes()).splitlines()]
    start = next(e for e in events if isinstance(e, RunStart))
    result = RunResult(run_id=start.run_id, status="ok", scenario_id=start.scenario["id"], config_name=start.config["name"],
                       invest_quarter=start.scenario["invest_quarter"], sample_index=start.sample_index)
    return result, start, events


def with_model(events, model: str):
    return [e.model_copy(update={"model_used": model, "is_llm": True}) if isinstance(e, LLMCall) else e for e in events]


def test_run_rows_get_post_cutoff_true_false_or_null(tmp_path, capsys):
    result, start, events = stored_run()
    row = lambda evs: run_row("b", result, start.config, start.scenario, evs, "node")  # noqa: E731
    assert start.scenario["invest_quarter"] == "2025Q2"
    assert row(events)["post_cutoff"] is True  # the stored run is rule-based: no model can remember 2025Q2
    assert row(with_model(events, "openai/gpt-4o-mini"))["post_cutoff"] is True  # cutoff 2023-10
    assert row(with_model(events, "anthropic/claude-sonnet-4-5-20250929"))["post_cutoff"] is False  # cutoff 2025-07
    assert row(with_model(events, "openai/some-new-model"))["post_cutoff"] is None
    assert row([e for e in events if not isinstance(e, LLMCall)])["post_cutoff"] is None  # no call answered

    # `madbench stats --by post_cutoff` keeps the three apart, null included
    rows = []
    for i, (model, sharpe) in enumerate([("openai/gpt-4o-mini", 1.0), ("claude-sonnet-4-5", 0.5), ("openai/x", 0.2)] * 2):
        r = row(with_model(events, model)) | {"scenario_id": f"s{i}", "run_id": f"r{i}", "sharpe": sharpe + i / 10}
        rows.append(r)
    runs = tmp_path / "runs.parquet"
    pd.DataFrame(rows).to_parquet(runs, index=False)
    assert pd.read_parquet(runs)["post_cutoff"].tolist() == [True, False, None] * 2
    assert main(["stats", "--from-parquet", str(runs), "--metric", "sharpe", "--by", "post_cutoff"]) == 0
    out = capsys.readouterr().out
    assert "Split by post_cutoff: True 2 runs, False 2 runs, null 2 runs" in out  # post-cutoff first: the primary result
    assert out.index("# post_cutoff = True") < out.index("# post_cutoff = False")
    assert "# post_cutoff = null (2 runs)" in out
    assert (tmp_path / "runs-stats" / "post_cutoff=null" / "summary.csv").exists()
    assert main(["stats", "--from-parquet", str(runs), "--metric", "sharpe", "--by", "no_such_column"]) == 2
    assert "no column 'no_such_column'" in capsys.readouterr().err
