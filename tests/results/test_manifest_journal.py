"""The manifest as a snapshot and a journal of the runs changed since: read applied in order, a torn last line
ignored, a snapshot superseding the journal, and a crash between the two giving the same manifest."""

import pytest

from madbench.data.errors import InputError
from madbench.results import ManifestRun, read_manifest, write_manifest
from madbench.results.layout import MANIFEST_JOURNAL
from madbench.results.records import ManifestJournal


def runs(status: str = "pending") -> list[ManifestRun]:
    return [ManifestRun(run_id=r, scenario_id="s", config="c", replicate=0, status=status) for r in ("a", "b", "c")]


def test_the_journal_applies_over_the_snapshot_in_order_and_a_torn_line_is_not_a_change(tmp_path):
    write_manifest(tmp_path, {"name": "t"}, runs(), "running")
    journal = ManifestJournal(tmp_path)
    a, b = runs()[:2]
    journal.append([a.model_copy(update={"attempts": 1, "in_flight_since": "now"})], "running")
    journal.append([a.model_copy(update={"status": "ok", "attempts": 1}), b.model_copy(update={"attempts": 1})], "running")
    manifest = read_manifest(tmp_path)
    assert [(m.run_id, m.status, m.attempts, m.in_flight_since) for m in manifest.runs] == [
        ("a", "ok", 1, None), ("b", "pending", 1, None), ("c", "pending", 0, None)]
    path = tmp_path / MANIFEST_JOURNAL
    path.write_bytes(path.read_bytes() + b'{"updated": "x", "state": "runn')  # a line a crash tore
    assert read_manifest(tmp_path) == manifest
    path.write_bytes(b"[]\n" + path.read_bytes())
    with pytest.raises(InputError, match="manifest-journal.jsonl: line 1 is not a change of the manifest"):
        read_manifest(tmp_path)


def test_a_snapshot_supersedes_the_journal_and_a_crash_between_them_reads_the_same(tmp_path):
    write_manifest(tmp_path, {"name": "t"}, runs(), "running")
    done = runs("ok")
    ManifestJournal(tmp_path).append(done[:1], "running")
    ManifestJournal(tmp_path).append(done[1:], "running")
    kept = (tmp_path / MANIFEST_JOURNAL).read_bytes()
    write_manifest(tmp_path, {"name": "t"}, done, "running")
    assert not (tmp_path / MANIFEST_JOURNAL).exists()
    snapshot = read_manifest(tmp_path)
    (tmp_path / MANIFEST_JOURNAL).write_bytes(kept)  # killed after the snapshot, before the journal was removed
    again = read_manifest(tmp_path)
    assert [(m.run_id, m.status) for m in again.runs] == [(m.run_id, m.status) for m in snapshot.runs]
    assert {m.status for m in again.runs} == {"ok"}


def test_a_journal_line_changing_a_run_the_snapshot_does_not_list_is_refused_naming_the_line(tmp_path):
    write_manifest(tmp_path, {"name": "t"}, runs(), "running")
    journal = ManifestJournal(tmp_path)
    journal.append([runs("ok")[0]], "running")
    stranger = ManifestRun(run_id="z", scenario_id="s", config="c", replicate=0, status="ok")
    journal.append([stranger], "finished")  # another batch's journal, or one beside a replaced manifest
    with pytest.raises(InputError, match="manifest-journal.jsonl: line 2 changes run z, which the manifest does not list"):
        read_manifest(tmp_path)
