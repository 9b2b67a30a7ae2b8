"""A batch's rows through the writers' row logs: a torn last line holds no run, a run's rows are those of its latest
attempt, compaction folds the logs into one file per table (and does nothing when nothing changed), and an
unfinished batch reads its committed runs' rows without a file per run."""

import json

import pyarrow.parquet as pq
import pytest

from madbench.data.errors import InputError
from madbench.results import SPECS, BatchDirs, ManifestRun, ResultsDir, write_manifest
from madbench.results.rowlog import Entry, RowLog, latest, logs, read_log
from madbench.runner.store import compact


def entry(run_id: str, attempts: int = 1, status: str = "ok", rounds: int = 1) -> Entry:
    def row(table: str, **values) -> dict:
        return dict.fromkeys(SPECS[table].schema.names) | {"run_id": run_id} | values

    return Entry(run_id, attempts, {"runs": [row("runs", status=status, replicate=attempts)],
                                    "rounds": [row("rounds", round=k) for k in range(rounds)],
                                    "calls": [row("calls", seq=0, orphaned=False)]})


def commit(dirs: BatchDirs, *run_ids: str) -> None:
    dirs.commits.mkdir(parents=True, exist_ok=True)
    for r in run_ids:
        dirs.result_path(r).write_text("{}")


def test_a_torn_last_line_holds_no_run_and_a_broken_middle_line_is_named(tmp_path):
    dirs = BatchDirs(tmp_path)
    log = RowLog(dirs, "w1")
    log.append(entry("a"))
    log.append(entry("b"))
    whole = log.path.read_bytes()
    log.path.write_bytes(whole[:-7])  # the second write torn by a crash
    entries, end = read_log(log.path)
    assert [e.run_id for e in entries] == ["a"] and end == whole.index(b"\n") + 1
    log.path.write_bytes(b"{not json}\n" + whole)
    with pytest.raises(InputError, match="rows-w1.jsonl: line 1 after byte 0 is not a run's rows"):
        read_log(log.path)


def test_a_runs_rows_are_those_of_its_latest_attempt_whichever_log_holds_them():
    found = latest([entry("a", 2, "ok"), entry("a", 1, "failed"), entry("b", 1, "failed"), entry("b", 2, "ok")])
    assert {r: (e.attempts, e.tables["runs"][0]["status"]) for r, e in found.items()} == {"a": (2, "ok"), "b": (2, "ok")}


def test_compaction_folds_the_logs_in_run_order_replaces_a_retried_run_and_skips_when_nothing_changed(tmp_path):
    dirs = BatchDirs(tmp_path)
    commit(dirs, "a", "b", "c")
    RowLog(dirs, "w1").append(entry("c", rounds=2))
    RowLog(dirs, "w2").append(entry("b", status="failed"))
    RowLog(dirs, "w2").append(entry("a"))
    assert compact(dirs) == {"runs": 3, "rounds": 4, "calls": 3}
    assert logs(dirs) == []  # folded in and removed
    runs = pq.read_table(dirs.table("runs")).to_pydict()
    assert runs["run_id"] == ["a", "b", "c"] and runs["status"] == ["ok", "failed", "ok"]
    assert pq.read_table(dirs.table("rounds")).column("round").to_pylist() == [0, 0, 0, 1]  # c's rows in their order
    stamps = {t: dirs.table(t).stat().st_mtime_ns for t in ("runs", "rounds", "calls")}
    assert compact(dirs) == {"runs": 3, "rounds": 4, "calls": 3}
    assert {t: dirs.table(t).stat().st_mtime_ns for t in stamps} == stamps  # nothing to fold: nothing written
    RowLog(dirs, "w3").append(entry("b", attempts=2))  # the failed run tried again and committed ok
    assert compact(dirs)["runs"] == 3
    assert pq.read_table(dirs.table("runs")).column("status").to_pylist() == ["ok", "ok", "ok"]
    dirs.result_path("c").unlink()  # its commit point deleted (to run it again): the tables drop its rows
    assert compact(dirs) == {"runs": 2, "rounds": 2, "calls": 2}


def test_an_unfinished_batch_reads_its_committed_runs_from_the_logs_and_the_tables(tmp_path):
    dirs = BatchDirs(tmp_path)
    commit(dirs, "a")
    RowLog(dirs, "w1").append(entry("a"))
    compact(dirs)  # an earlier invocation's tables
    commit(dirs, "b")
    RowLog(dirs, "w2").append(entry("b"))
    RowLog(dirs, "w2").append(entry("x"))  # rows whose commit point is gone: no run of the batch
    write_manifest(tmp_path, {"name": "t"}, [ManifestRun(run_id=r, scenario_id="s", config="c", replicate=0,
                                                         status="pending") for r in "abx"], "running")
    results = ResultsDir(tmp_path)
    assert results.unfinished and list(results.runs.run_id) == ["a", "b"] and list(results.calls.run_id) == ["a", "b"]
    assert json.loads(dirs.manifest.read_text())["state"] == "running"


def test_a_logged_row_leaves_out_its_empty_declared_columns_and_reads_back_whole(tmp_path):
    log = RowLog(BatchDirs(tmp_path), "w")
    written = entry("a")
    log.append(written)
    line = log.path.read_text()
    assert '"sharpe"' not in line and '"status":"ok"' in line  # a declared column without a value costs nothing
    assert read_log(log.path)[0] == [written]
    with pytest.raises(InputError, match="a runs row lacks the declared column"):
        log.append(Entry("b", 1, {"runs": [{"run_id": "b"}], "rounds": [], "calls": []}))


def test_folding_a_few_runs_at_a_time_gives_the_tables_folding_them_all_at_once_gives(tmp_path, monkeypatch):
    import madbench.results.rowlog as rowlog

    def with_metric(run_id: str, attempts: int, value) -> Entry:
        e = entry(run_id, attempts)
        e.tables["runs"][0]["x_metric_share"] = value  # an open column: None in some chunks, numbers in others
        return e

    def folded(chunk: int, root) -> dict:
        monkeypatch.setattr(rowlog, "FOLD_CHUNK", chunk)
        dirs = BatchDirs(root)
        ids = [f"r{k:02d}" for k in range(9)]
        commit(dirs, *ids)
        first, second = RowLog(dirs, "w1"), RowLog(dirs, "w2")
        for k, r in enumerate(ids):
            (first if k % 2 else second).append(with_metric(r, 1, None if k < 5 else k / 2))
        second.append(with_metric("r03", 2, 9.5))  # retried and committed again: its later line replaces the first
        second.append(with_metric("r04", 1, 7.0))  # as many attempts, later in its log: the same trace's rows
        compact(dirs)
        return {t: pq.read_table(dirs.table(t)).to_pydict() for t in ("runs", "rounds", "calls")}

    one_by_one, all_at_once = folded(1, tmp_path / "a"), folded(1_000, tmp_path / "b")
    assert one_by_one == all_at_once
    shares = dict(zip(all_at_once["runs"]["run_id"], all_at_once["runs"]["x_metric_share"], strict=True))
    assert shares["r03"] == 9.5 and shares["r04"] == 7.0 and shares["r00"] is None and shares["r08"] == 4.0
    assert len(all_at_once["runs"]["run_id"]) == 9
