"""Replay, diff and export on broken input: a damaged trace, an output path that is a file, calls in another order."""

from __future__ import annotations

import pytest

from madbench.data.errors import InputError
from madbench.debate.events import LLMCall
from madbench.results import read_committed_history
from madbench.runner.diff import turns
from madbench.runner.export import _writable


def test_a_committed_runs_damaged_or_missing_trace_is_an_error_not_a_shorter_run(tmp_path):
    with pytest.raises(InputError, match="is missing"):
        read_committed_history(tmp_path / "gone.jsonl")
    torn = tmp_path / "torn.jsonl"
    torn.write_text('{"seq": 0')  # no newline: a torn line
    with pytest.raises(InputError, match="damaged: torn last line"):
        read_committed_history(torn)


def _call(agent: str, seq: int) -> LLMCall:
    return LLMCall(seq=seq, agent=agent, phase="propose", round=0, label="propose", key=f"k-{agent}",
                   model_requested="m", model_used="m", is_llm=True, cached=False, latency_s=0.0)


def test_calls_pair_by_turn_not_by_trace_order():
    a = turns([_call("macro", 1), _call("value", 2)])
    b = turns([_call("value", 1), _call("macro", 2)])  # the same calls, answered in the other order
    assert set(a) == set(b) and all(a[t].key == b[t].key for t in a)


def test_export_to_a_path_that_is_a_file_is_one_clear_error(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(InputError, match="is a file, not a directory"):
        _writable(tmp_path / "f", True)
    with pytest.raises(InputError, match="cannot create the export directory"):
        _writable(tmp_path / "f" / "sub", True)
