"""A symbolic link planted where a trace goes is refused, and its target is never touched."""

import json

import pytest
import yaml

from madbench.data.atomic import atomic_write_text
from madbench.data.errors import InputError
from madbench.debate.events import EarlyStop
from madbench.debate.trace import TraceSymlinkError, TraceWriter, read_trace
from madbench.runner.cli import main
from tests.runner.test_batch import ROOT, TICKERS, write_batch

OUTSIDE = b'{"not": "a trace"}\n{"torn'


@pytest.fixture
def planted(tmp_path):
    outside = tmp_path / "outside" / "precious.txt"
    outside.parent.mkdir()
    outside.write_bytes(OUTSIDE)
    link = tmp_path / "results" / "traces" / "run.jsonl"
    link.parent.mkdir(parents=True)
    link.symlink_to(outside)
    return link, outside


def test_repair_refuses_a_symlink_and_leaves_its_target_alone(planted):
    link, outside = planted
    for repair in (False, True):
        with pytest.raises(TraceSymlinkError, match=f"{link}: the trace is a symbolic link"):
            read_trace(link, repair=repair)
    assert outside.read_bytes() == OUTSIDE and link.is_symlink()


def test_writer_refuses_a_symlink_even_a_dangling_one(planted, tmp_path):
    link, outside = planted
    with pytest.raises(TraceSymlinkError, match="symbolic link"):
        TraceWriter(link)
    assert outside.read_bytes() == OUTSIDE
    dangling = link.with_name("new.jsonl")
    dangling.symlink_to(tmp_path / "outside" / "created-by-writer.jsonl")
    with pytest.raises(TraceSymlinkError, match=str(dangling)):
        TraceWriter(dangling)
    assert not (tmp_path / "outside" / "created-by-writer.jsonl").exists()


def test_a_regular_trace_still_works(tmp_path):
    path = tmp_path / "t.jsonl"
    with TraceWriter(path) as t:
        t.write(EarlyStop(round=0, reason="x"))
    path.write_bytes(path.read_bytes() + b'{"torn')
    assert len(read_trace(path, repair=True).events) == 1 and read_trace(path).problems == []


def test_an_atomic_write_refuses_a_link_and_touches_neither_it_nor_its_target(planted):
    link, outside = planted
    with pytest.raises(InputError, match="is a symbolic link"):
        atomic_write_text(link, "new")
    assert link.is_symlink() and outside.read_bytes() == OUTSIDE


@pytest.mark.slow
def test_resuming_a_batch_with_a_planted_trace_link_fails_that_run_loudly(make_pack, tmp_path, capsys):
    scen = tmp_path / "one.yaml"
    scen.write_text(yaml.safe_dump({"scenarios": [{"id": "s", "invest_quarter": "2021Q3", "tickers": TICKERS,
                                                  "constraints": {"max_weight": 0.6}}]}))
    batch = write_batch(tmp_path, make_pack(tickers=tuple(TICKERS)), scenarios={"file": str(scen)},
                        configs=[str(ROOT / "configs/debate/single-causal.yaml")], replicates=1, retries=0)
    assert main(["run", str(batch), "--quiet"]) == 0
    root = tmp_path / "results" / "t"
    (stored,) = (root / "traces").glob("*.jsonl.zst")  # a committed run's trace, compressed
    run_id = stored.name.removesuffix(".jsonl.zst")
    trace = root / "traces" / f"{run_id}.jsonl"
    outside = tmp_path / "outside.txt"
    outside.write_bytes(OUTSIDE)
    # The run is lost (no result), and its trace replaced by a link to a file outside the results directory.
    (root / "runs" / f"{run_id}.json").unlink()
    stored.unlink()
    trace.symlink_to(outside)
    assert main(["run", str(batch), "--quiet"]) != 0
    assert outside.read_bytes() == OUTSIDE and trace.is_symlink()
    manifest = json.loads((root / "manifest.json").read_text())
    (run,) = [r for r in manifest["runs"] if r["run_id"] == run_id]
    assert run["status"] == "failed" and "symbolic link" in run["error"] and str(trace) in run["error"]
