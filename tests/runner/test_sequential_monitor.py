"""The sequential Monitor without Ray: runs committed as lines of a row log, the looks taken from them, and the
record's guard against a design changed after looking."""

from pathlib import Path
from types import SimpleNamespace

import pytest

from madbench.data.errors import InputError
from madbench.eval.stats.sequential_record import read_record
from madbench.results import SPECS, BatchDirs, ManifestRun
from madbench.results.rowlog import Entry, RowLog
from madbench.runner.sequential import Monitor, SequentialSpec

SCENARIOS = [f"s{i}" for i in range(8)]


class Layout:
    def __init__(self, root: Path):
        self.root = root
        self.rows = RowLog(BatchDirs(root))


def _spec(**seq):
    design = {"pair": "t", "metric": "sharpe", "effect": 1.0, "looks": 2} | seq
    return SimpleNamespace(sequential=SequentialSpec(**design), pairs=[SimpleNamespace(control="c", treatment="t")])


def _runs():
    # each scenario its own quarter: the looks' clustered t is the ordinary paired t
    return [SimpleNamespace(run_id=f"{s}-{c}", scenario=SimpleNamespace(id=s, invest_quarter=s),
                            config=SimpleNamespace(name=c), sample_index=0) for s in SCENARIOS for c in ("c", "t")]


def _commit(layout: Layout, run, value: float, manifest: dict) -> None:
    row = dict.fromkeys(SPECS["runs"].schema.names) | {"run_id": run.run_id, "scenario_id": run.scenario.id,
                                                      "status": "ok", "sharpe": value, "total_return_pct": value}
    layout.rows.append(Entry(run.run_id, 1, {"runs": [row], "rounds": [], "calls": []}))
    manifest[run.run_id].status = "ok"


def _monitor(tmp_path: Path, spec, values: dict[str, float]) -> Monitor:
    """A Monitor on the batch in ``tmp_path`` with the runs of ``values`` (scenario → treatment − control) committed."""
    layout, runs = Layout(tmp_path), _runs()
    manifest = {r.run_id: ManifestRun(run_id=r.run_id, scenario_id=r.scenario.id, config=r.config.name, replicate=0,
                                      status="pending") for r in runs}
    for r in runs:
        if r.scenario.id in values:
            _commit(layout, r, values[r.scenario.id] if r.config.name == "t" else 0.0, manifest)
    monitor = Monitor(spec, runs, layout, manifest)
    for r in runs:
        if manifest[r.run_id].status == "ok":
            monitor.seen(r)
    monitor.update()
    return monitor


def test_a_design_changed_after_a_look_is_refused_and_one_before_any_look_replaced(tmp_path):
    spread = {s: 0.1 * (i % 3) for i, s in enumerate(SCENARIOS)}  # a small, varied difference: look 1 goes on
    first = _monitor(tmp_path, _spec(), {s: spread[s] for s in SCENARIOS[:4]})
    assert [x.n for x in first.record.looks] == [4]
    for change in ({"metric": "total_return_pct"}, {"spending": "pocock"}, {"seed": 5}):
        with pytest.raises(InputError) as err:
            _monitor(tmp_path, _spec(**change), {})
        assert "sequential.json" in str(err.value) and "another design" in str(err.value)
    assert [x.n for x in read_record(tmp_path).looks] == [4]  # the refused runs left the record as it was

    fresh = tmp_path / "fresh"
    _monitor(fresh, _spec(), {})  # a record without looks ...
    assert read_record(fresh).metric == "sharpe"
    _monitor(fresh, _spec(metric="total_return_pct"), {})  # ... a new design replaces it
    assert read_record(fresh).metric == "total_return_pct"


def test_a_scenario_without_a_finite_metric_counts_as_failed_and_releases_the_next_one(tmp_path):
    m = _monitor(tmp_path, _spec(), {})
    first = m.order[:4]
    values = {s: 0.1 * i for i, s in enumerate(first)} | {first[0]: float("nan")}
    m = _monitor(tmp_path, _spec(), values)
    assert not m.record.looks and first[0] in m.failed
    fifth = next(r for r in _runs() if r.scenario.id == m.order[4])
    assert not m.waits(fifth)  # released in place of the scenario that cannot complete
    m = _monitor(tmp_path, _spec(), values | {m.order[4]: 0.5})
    assert [x.scenarios for x in m.record.looks] == [m.order[1:5]]


def test_a_hand_edited_decision_is_no_record(tmp_path):
    m = _monitor(tmp_path, _spec(), {})
    path = tmp_path / "sequential.json"
    path.write_text(path.read_text().replace('"decision": null', '"decision": "banana"'))
    assert '"banana"' in path.read_text()
    with pytest.raises(InputError, match="sequential.json"):
        read_record(m.layout.root)


def test_status_after_continue_does_not_call_the_runs_it_ran_not_needed(tmp_path):
    from madbench.runner.batch_view import look_lines
    m = _monitor(tmp_path, _spec(futility="non-binding"), {})
    m = _monitor(tmp_path, _spec(futility="non-binding"), dict(zip(m.order[:4], (0.3, -0.3, 0.1, -0.2), strict=True)))  # t near 0: futility
    assert m.record.decision == "futility"
    assert m.finish() and look_lines(read_record(tmp_path))[-1].endswith(f"{len(m.record.not_needed)} not_needed")
    runs = _runs()
    manifest = {r.run_id: ManifestRun(run_id=r.run_id, scenario_id=r.scenario.id, config=r.config.name, replicate=0,
                                      status="pending") for r in runs}
    Monitor(_spec(futility="non-binding"), runs, m.layout, manifest, continue_past=True)
    last = look_lines(read_record(tmp_path))[-1]
    assert "continued past it" in last and "were run" in last
