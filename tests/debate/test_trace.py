"""The append-only trace: hash chain, torn tails, edits, and its typed events."""

import gzip
import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from madbench.debate.events import Crit, EarlyStop, LLMCall, RunStart, last_attempt, parse_event
from madbench.debate.trace import TraceWriter, read_trace

OLD_TRACES = sorted((Path(__file__).parent / "data").glob("trace-v0.1-*.jsonl.gz"))


def write(path, n=3):
    with TraceWriter(path) as t:
        for i in range(n):
            t.write(EarlyStop(round=i, reason=f"step {i}"))


def test_events_chain_and_append_across_writers(tmp_path):
    path = tmp_path / "trace.jsonl"
    write(path, 2)
    write(path, 2)  # a second writer continues the chain
    r = read_trace(path)
    assert r.problems == [] and [e["seq"] for e in r.events] == [0, 1, 2, 3]
    typed = r.typed()
    assert [type(e) for e in typed] == [EarlyStop] * 4 and [e.round for e in typed] == [0, 1, 0, 1]


def test_torn_tail_is_reported_and_repaired(tmp_path):
    path = tmp_path / "trace.jsonl"
    write(path, 3)
    path.write_bytes(path.read_bytes() + b'{"seq": 3, "half')
    r = read_trace(path)
    assert len(r.events) == 3 and "torn last line" in r.problems[0]
    with pytest.raises(RuntimeError, match="needs repair"):
        TraceWriter(path)
    read_trace(path, repair=True)
    write(path, 1)
    assert [e["seq"] for e in read_trace(path).events] == [0, 1, 2, 3]


def test_flipped_bytes_in_last_line_are_detected(tmp_path):
    path = tmp_path / "trace.jsonl"
    write(path, 3)
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF
    path.write_bytes(bytes(data))
    r = read_trace(path, repair=True)
    assert len(r.events) == 2 and r.problems
    assert len(path.read_bytes().splitlines()) == 2


def test_an_edited_middle_event_breaks_the_chain(tmp_path):
    path = tmp_path / "trace.jsonl"
    write(path, 3)
    lines = path.read_bytes().splitlines(keepends=True)
    event = json.loads(lines[1])
    event["round"] = 99
    lines[1] = (json.dumps(event, sort_keys=True, separators=(",", ":")) + "\n").encode()
    path.write_bytes(b"".join(lines))
    r = read_trace(path)
    assert len(r.events) == 2 and "hash chain" in r.problems[0]


def test_an_event_that_matches_no_model_is_an_error():
    with pytest.raises(ValidationError):
        parse_event({"event": "early_stop", "round": 1})  # no reason
    with pytest.raises(ValidationError):
        parse_event({"event": "early_stop", "round": 1, "reason": "x", "surprise": 1})  # unknown field
    with pytest.raises(ValidationError):
        parse_event({"event": "no_such_event"})


@pytest.mark.parametrize("old", OLD_TRACES, ids=lambda p: p.name)
def test_a_trace_written_by_version_0_1_still_reads_as_typed_events(tmp_path, old):
    path = tmp_path / "trace.jsonl"
    path.write_bytes(gzip.decompress(old.read_bytes()))
    r = read_trace(path)
    assert r.problems == []
    events = last_attempt(r.typed())
    assert isinstance(events[0], RunStart) and events[-1].event == "run_end"
    assert any(isinstance(e, LLMCall) for e in events)
    # every field of the old lines survives the typed round trip
    for raw, typed in zip(r.events, r.typed(), strict=True):
        assert typed.model_dump(mode="json", exclude_unset=True) == raw
    crits = [e for e in events if isinstance(e, Crit)]
    assert all(0 <= c.score.rho <= 1 for c in crits)


def test_old_traces_cover_the_events_of_every_protocol():
    assert len(OLD_TRACES) == 4  # paper debate with RCA and JS collapse, desks, tradingagents
