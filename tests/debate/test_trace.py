"""The append-only trace: hash chain, torn tails, edits."""

import json

import pytest

from debate.trace import TraceWriter, read_trace


def write(path, n=3):
    with TraceWriter(path) as t:
        for i in range(n):
            t.emit("step", i=i)


def test_events_chain_and_append_across_writers(tmp_path):
    path = tmp_path / "trace.jsonl"
    write(path, 2)
    write(path, 2)  # a second writer continues the chain
    r = read_trace(path)
    assert r.problems == [] and [e["seq"] for e in r.events] == [0, 1, 2, 3]


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
    event["i"] = 99
    lines[1] = (json.dumps(event, sort_keys=True, separators=(",", ":")) + "\n").encode()
    path.write_bytes(b"".join(lines))
    r = read_trace(path)
    assert len(r.events) == 2 and "hash chain" in r.problems[0]
