"""`madbench export --format jsonl` of a batch where no run ended yet: an empty file, every line of which parses."""

import json
from types import SimpleNamespace

from madbench.runner import export


def test_jsonl_of_a_batch_without_ended_runs_is_an_empty_file_not_a_blank_line(tmp_path, monkeypatch):
    monkeypatch.setattr(export, "_runs", lambda results: [])
    [path] = export.jsonl_records(SimpleNamespace(manifest=None), tmp_path / "out")
    assert path.read_text() == ""
    assert [json.loads(line) for line in path.open()] == []
