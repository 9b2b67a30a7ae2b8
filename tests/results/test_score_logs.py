"""Re-scoring's rows through its writers' row logs: one table and one failure file per label after a compaction, a
graded run never graded twice nor lost (a torn line, a compaction cut short), readers merging the unfolded lines, and
an older directory's file per run read and folded in."""

import json
import os
import shutil

import pyarrow.parquet as pq
import pytest

from madbench.data.errors import InputError
from madbench.results import SPECS, ScoreDirs, read_scores, scorelog
from madbench.results.table_schemas import write_rows


def rows(run_id: str, label: str = "sim", turns: int = 2) -> list[dict]:
    return [dict.fromkeys(SPECS["scores"].schema.names) | {"run_id": run_id, "label": label, "round": 1,
                                                           "agent_id": f"agent{k}", "rho": 0.1 * k}
            for k in range(turns)]


def failure(run_id: str, reason: str = "GatewayFailure: answer still invalid") -> dict:
    return {"run_id": run_id, "label": "sim", "reason": reason, "failed_turns": [{"agent_id": "agent0", "reason": reason}]}


def test_a_pass_folds_into_one_table_and_one_failure_file_and_a_retry_grades_a_failed_run(tmp_path):
    dirs = ScoreDirs(tmp_path)
    log = scorelog.LabelLog(tmp_path, "sim", "w1")
    log.graded("c", 1, rows("c"))
    log.failed("b", 1, failure("b"))
    log.graded("a", 1, rows("a", turns=3))
    log.close()
    assert scorelog.compact(dirs, "sim") == 5
    assert sorted(p.name for p in dirs.label("sim").iterdir()) == ["failed.jsonl", "scores.parquet"]  # no log left
    assert pq.read_table(dirs.table("sim")).column("run_id").to_pylist() == ["a", "a", "a", "c", "c"]
    [line] = dirs.failed_log("sim").read_text().splitlines()  # a record a line, readable as it is
    assert json.loads(line) == failure("b") | {"attempts": 1}
    done = scorelog.index(dirs, "sim")
    assert done.graded == {"a", "c"} and done.failed == {"b": 1} and done.attempt("b") == 2

    again = scorelog.LabelLog(tmp_path, "sim", "w2")  # the next pass grades b
    again.graded("b", done.attempt("b"), rows("b"))
    again.close()
    assert scorelog.failures(dirs, "sim") == {} and scorelog.index(dirs, "sim").graded == {"a", "b", "c"}
    assert scorelog.compact(dirs, "sim") == 7
    assert not dirs.failed_log("sim").exists()  # no run left failed
    assert pq.read_table(dirs.table("sim")).column("run_id").to_pylist() == ["a"] * 3 + ["b"] * 2 + ["c"] * 2
    before = dirs.table("sim").stat().st_mtime_ns
    assert scorelog.compact(dirs, "sim") == 7 and dirs.table("sim").stat().st_mtime_ns == before  # nothing to fold


def test_readers_merge_the_table_with_lines_not_yet_folded(tmp_path):
    dirs = ScoreDirs(tmp_path)
    log = scorelog.LabelLog(tmp_path, "sim", "w1")
    log.graded("a", 1, rows("a"))
    log.close()
    scorelog.compact(dirs, "sim")
    later = scorelog.LabelLog(tmp_path, "sim", "w2")  # a pass killed before its compaction
    later.graded("b", 1, rows("b"))
    later.failed("c", 1, failure("c"))
    later.close()
    frame = read_scores(tmp_path)
    assert sorted(frame.run_id) == ["a", "a", "b", "b"] and set(frame.label) == {"sim"}
    assert list(scorelog.failures(dirs, "sim")) == ["c"]
    only_failed = scorelog.LabelLog(tmp_path, "none-graded", "w1")
    only_failed.failed("a", 1, failure("a"))
    only_failed.close()
    assert scorelog.labels(tmp_path) == ["sim"]  # a label whose every run failed holds no rows


def test_a_torn_last_line_is_no_graded_run_and_a_damaged_line_is_named(tmp_path):
    dirs = ScoreDirs(tmp_path)
    log = scorelog.LabelLog(tmp_path, "sim", "w1")
    log.graded("a", 1, rows("a"))
    log.graded("b", 1, rows("b"))
    log.close()
    whole = log.path.read_bytes()
    log.path.write_bytes(whole[:-9])  # kill -9 mid-write of b's line
    assert scorelog.index(dirs, "sim").graded == {"a"}  # b is graded again by the next pass, once
    nxt = scorelog.LabelLog(tmp_path, "sim", "w2")
    nxt.graded("b", 1, rows("b"))
    nxt.close()
    assert scorelog.compact(dirs, "sim") == 4
    assert pq.read_table(dirs.table("sim")).column("run_id").to_pylist() == ["a", "a", "b", "b"]
    broken = dirs.label("sim") / "rows-w3.jsonl"
    broken.write_bytes(b"{not json}\n")
    with pytest.raises(InputError, match="rows-w3.jsonl: line 1 after byte 0 .*run the same `madbench rescore` again"):
        scorelog.index(dirs, "sim")


def test_a_compaction_cut_short_before_removing_its_logs_folds_again_to_the_same_table(tmp_path):
    dirs = ScoreDirs(tmp_path)
    log = scorelog.LabelLog(tmp_path, "sim", "w1")
    for run in ("b", "a"):
        log.graded(run, 1, rows(run))
    log.failed("c", 1, failure("c"))
    log.close()
    kept = tmp_path / "kept.jsonl"
    shutil.copy(log.path, kept)
    scorelog.compact(dirs, "sim")
    table, failed = dirs.table("sim").read_bytes(), dirs.failed_log("sim").read_bytes()
    shutil.copy(kept, log.path)  # the tables were written, the log not yet removed
    assert scorelog.compact(dirs, "sim") == 4
    assert dirs.table("sim").read_bytes() == table and dirs.failed_log("sim").read_bytes() == failed


def test_an_older_directorys_part_and_failure_record_per_run_are_read_then_folded_in(tmp_path):
    dirs = ScoreDirs(tmp_path)
    for run in ("a", "b"):
        write_rows(dirs.part("sim", run), rows(run), "scores")
    dirs.failure("sim", "c").parent.mkdir()
    dirs.failure("sim", "c").write_text(json.dumps(failure("c"), indent=1))
    assert scorelog.labels(tmp_path) == ["sim"] and sorted(read_scores(tmp_path, "sim").run_id) == ["a", "a", "b", "b"]
    done = scorelog.index(dirs, "sim")
    assert done.graded == {"a", "b"} and done.failed == {"c": 1}
    assert scorelog.failures(dirs, "sim")["c"]["reason"] == failure("c")["reason"]
    log = scorelog.LabelLog(tmp_path, "sim", "w1")
    log.graded("d", 1, rows("d"))
    log.close()
    assert scorelog.compact(dirs, "sim") == 6
    assert sorted(os.listdir(dirs.label("sim"))) == ["failed.jsonl", "scores.parquet"]  # no file per run left
    assert pq.read_table(dirs.table("sim")).column("run_id").to_pylist() == ["a", "a", "b", "b", "d", "d"]
    assert json.loads(dirs.failed_log("sim").read_text()) == failure("c") | {"attempts": 1}


@pytest.mark.parametrize("attempts", ["two", None, 0, 1.5, True])
def test_a_failure_record_whose_attempts_is_no_count_is_named_not_a_traceback(tmp_path, attempts):
    dirs = ScoreDirs(tmp_path)
    dirs.label("sim").mkdir(parents=True)
    dirs.failed_log("sim").write_text(json.dumps(failure("b") | {"attempts": attempts}) + "\n")
    for read in (scorelog.index, scorelog.failures):  # (compact, with no log to fold, reads nothing)
        with pytest.raises(InputError, match=r"failed\.jsonl, line 1: not a failure record \(attempts"):
            read(dirs, "sim")
