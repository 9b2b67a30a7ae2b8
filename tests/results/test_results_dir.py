"""The results directory through madbench.results: results written before the format was versioned still read the
same, the declared schemas refuse a bad table loudly, and a newer format is refused by name."""

import json
import shutil
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from madbench.data.errors import InputError
from madbench.results import (
    FORMAT_VERSION,
    SPECS,
    TABLES,
    BatchDirs,
    ManifestRun,
    ResultsDir,
    read_history,
    read_manifest,
    write_manifest,
    write_rows,
)
from madbench.results.table_schemas import VERSION_KEY, added_since, read_table, to_table

#: Two runs of `madbench run configs/batches/rules-35.yaml` (single-causal, mean3-causal) written by the code before
#: FORMAT_VERSION was recorded: its manifest, traces, results and parts as written; its tables compacted as it did.
UNVERSIONED = Path(__file__).parent / "data" / "rules-2-unversioned"
RUN_IDS = ["76a2595a93925ea1", "8c7280a865df26d6"]


@pytest.fixture
def old(tmp_path) -> Path:
    return Path(shutil.copytree(UNVERSIONED, tmp_path / "old"))


def same_values(a: pd.DataFrame, b: pd.DataFrame) -> None:
    assert list(a.columns) == list(b.columns)
    pd.testing.assert_frame_equal(a.astype(object).where(a.notna(), None), b.astype(object).where(b.notna(), None))


def test_unversioned_results_read_as_the_current_format(old):
    results = ResultsDir(old)
    assert results.manifest.format_version is None and [r.run_id for r in results.manifest.runs] == list(reversed(RUN_IDS))
    assert results.manifest.runs[0].status == "ok" and results.manifest.runs[0].attempts == 1
    for name in TABLES:
        same_values(results.table(name), pd.read_parquet(old / f"{name}.parquet"))
    assert len(results.runs) == 2 and len(results.rounds) == 4 and len(results.calls) == 8
    assert [r.run_id for r in results.results()] == RUN_IDS
    history = results.trace(RUN_IDS[0])
    assert history[0].event == "run_start" and history[0].format_version is None


def test_compacting_unversioned_parts_gives_the_tables_they_gave_before(old):
    from madbench.runner.store import compact

    before = {name: pd.read_parquet(old / f"{name}.parquet") for name in TABLES}
    assert compact(BatchDirs(old)) == {"runs": 2, "rounds": 4, "calls": 8}
    for name in TABLES:
        written = pq.read_table(old / f"{name}.parquet")
        assert written.schema.metadata[VERSION_KEY] == str(FORMAT_VERSION).encode()
        assert written.schema.equals(SPECS[name].schema, check_metadata=False)
        added = [c for c in written.column_names if c not in before[name].columns]  # declared by later formats
        assert set(added) <= added_since(0, name) and written.select(added).to_pandas().isna().all().all()
        same_values(written.to_pandas().drop(columns=added), before[name])


def test_scores_are_every_labelled_part_or_the_declared_empty_frame(old):
    from madbench.scoring.rescore import extract_original, find_runs

    empty = ResultsDir(old).scores
    assert empty.empty and list(empty.columns) == SPECS["scores"].schema.names
    runs, skipped = find_runs(old)  # unversioned traces and results
    assert sorted(r.run_id for r in runs) == RUN_IDS and skipped == []
    assert extract_original(runs, BatchDirs(old).scores) == 2
    scores = ResultsDir(old).scores
    assert set(scores["label"]) == {"original"} and set(scores["run_id"]) == set(RUN_IDS)
    assert len(scores) == len(ResultsDir(old).rounds)  # one CRIT score per agent and round


def test_a_newer_manifest_is_refused_by_name(old):
    body = json.loads((old / "manifest.json").read_text()) | {"format_version": FORMAT_VERSION + 1}
    (old / "manifest.json").write_text(json.dumps(body))
    with pytest.raises(InputError, match=f"manifest.json: the manifest is in results format {FORMAT_VERSION + 1}"):
        _ = ResultsDir(old).manifest


def test_a_newer_trace_is_refused_by_name(tmp_path):
    from madbench.debate.events import RunStart
    from madbench.debate.trace import TraceWriter

    path = tmp_path / "t.jsonl"
    with TraceWriter(path) as w:
        w.write(RunStart(run_id="r", attempt=1, resumed=False, scenario={}, config={}, config_hash="h", sample_index=0,
                         format_version=FORMAT_VERSION + 1))
    with pytest.raises(InputError, match=f"t.jsonl: attempt 1 of run r is in results format {FORMAT_VERSION + 1}"):
        read_history(path)


def test_a_version_1_table_reads_the_columns_added_since_as_null(tmp_path):
    rows = [dict.fromkeys(SPECS["rounds"].schema.names) | {"run_id": "r", "round": 1, "new_evidence": 2}]
    v1 = to_table(rows, "rounds", "x").drop_columns(sorted(added_since(1, "rounds")))
    pq.write_table(v1.replace_schema_metadata({VERSION_KEY: b"1"}), tmp_path / "rounds.parquet")
    back = read_table(tmp_path / "rounds.parquet", "rounds")
    assert back.schema.names == SPECS["rounds"].schema.names and back.column("new_evidence").to_pylist() == [2]
    assert back.column("adopted_evidence_ids").null_count == 1
    # a version-1 file lacking a column version 1 had is still refused
    pq.write_table(v1.drop_columns(["new_evidence"]).replace_schema_metadata({VERSION_KEY: b"1"}), tmp_path / "rounds.parquet")
    with pytest.raises(InputError, match="lacks the declared rounds column"):
        read_table(tmp_path / "rounds.parquet", "rounds")


def test_a_newer_table_is_refused_by_name(old):
    table = pq.read_table(old / "runs.parquet").replace_schema_metadata({VERSION_KEY: str(FORMAT_VERSION + 1).encode()})
    pq.write_table(table, old / "runs.parquet")
    with pytest.raises(InputError, match="runs.parquet: the runs table is in results format"):
        _ = ResultsDir(old).runs


def test_numbers_stored_as_text_are_refused_not_read_as_numbers(old):
    table = pq.read_table(old / "runs.parquet")
    i = table.schema.get_field_index("sharpe")
    as_text = pa.array([None if v is None else str(v) for v in table.column("sharpe").to_pylist()], pa.string())
    pq.write_table(table.set_column(i, "sharpe", as_text), old / "runs.parquet")
    with pytest.raises(InputError, match="runs column sharpe is string, declared double"):
        _ = ResultsDir(old).runs


def _call_row(**over) -> dict:
    row = dict.fromkeys(SPECS["calls"].schema.names)
    return row | {"run_id": "r", "seq": 3, "cached": False} | over


def test_writing_a_row_without_a_declared_column_is_an_error(tmp_path):
    row = _call_row()
    del row["provider"]
    with pytest.raises(InputError, match="a calls row lacks the declared column\\(s\\) provider"):
        write_rows(tmp_path / "c.parquet", [row], "calls")
    assert not (tmp_path / "c.parquet").exists()


def test_writing_a_value_of_the_wrong_type_names_the_column(tmp_path):
    with pytest.raises(InputError, match="calls column seq: .*declared int64"):
        write_rows(tmp_path / "c.parquet", [_call_row(seq="three")], "calls")


def test_an_undeclared_column_is_an_error_but_a_protocols_extras_are_open():
    with pytest.raises(InputError, match="undeclared column\\(s\\) surprise"):
        to_table([_call_row(surprise=1)], "calls", "c.parquet")
    row = dict.fromkeys(SPECS["runs"].schema.names) | {"x_cio_decision": "hold", "x_stop_loss_pct": 5.0}
    table = to_table([row], "runs", "r.parquet")
    assert table.schema.names[-2:] == ["x_cio_decision", "x_stop_loss_pct"]
    assert table.schema.field("x_stop_loss_pct").type == pa.float64()


def test_a_versioned_table_missing_a_declared_column_is_refused(tmp_path):
    table = to_table([_call_row()], "calls", "c.parquet").drop_columns(["provider"])
    pq.write_table(table, tmp_path / "c.parquet")
    with pytest.raises(InputError, match="lacks the declared calls column\\(s\\) provider"):
        read_table(tmp_path / "c.parquet", "calls")


def test_the_manifest_round_trips_typed_with_its_version(tmp_path):
    runs = [ManifestRun(run_id="r1", scenario_id="s", config="c", replicate=0, status="pending")]
    runs[0].attempts += 1
    write_manifest(tmp_path, {"name": "b"}, runs, "running")
    back = read_manifest(tmp_path)
    assert back.format_version == FORMAT_VERSION and back.runs == runs and back.spec == {"name": "b"}
    body = json.loads((tmp_path / "manifest.json").read_text())
    body["runs"][0]["statsu"] = "ok"
    (tmp_path / "manifest.json").write_text(json.dumps(body))
    with pytest.raises(InputError, match="manifest.json: not a valid manifest.*statsu"):
        read_manifest(tmp_path)
