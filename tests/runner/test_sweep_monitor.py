"""The sweep monitor without Ray: runs committed as lines of a row log, looks taken on complete scenarios, arms
dropped and their runs never wanted again, the record's guard against a sweep changed after looking, and --continue."""

from pathlib import Path
from types import SimpleNamespace

import pytest

from madbench.data.errors import InputError
from madbench.eval.stats.sweep_record import read_record
from madbench.results import SPECS, BatchDirs, ManifestRun
from madbench.results.rowlog import Entry, RowLog, logs, read_log
from madbench.runner.sweep import SweepMonitor, SweepSpec

SCENARIOS = [f"s{i}" for i in range(12)]
ARMS = ("good", "flat", "bad")


class Layout:
    def __init__(self, root: Path):
        self.root = root
        self.rows = RowLog(BatchDirs(root))
        # the runs an earlier monitor on this directory committed: their lines in the row logs
        self.logged = {e.run_id for p in logs(BatchDirs(root)) for e in read_log(p)[0]}


def _spec(**sweep):
    return SimpleNamespace(sweep=SweepSpec(**({"control": "c", "looks": 3, "effect": 0.5} | sweep)))


def _runs():
    return [SimpleNamespace(run_id=f"{s}-{c}", scenario=SimpleNamespace(id=s, invest_quarter=s),
                            config=SimpleNamespace(name=c), sample_index=0) for s in SCENARIOS for c in ("c", *ARMS)]


def _value(config: str, i: int) -> float:
    # the control's scenario effect cancels in every difference; "good" is far better, "bad" far worse
    noise = 0.05 * ((i * 7) % 5 - 2)
    return {"c": 0.0, "good": 2.0 + noise, "flat": noise, "bad": -2.0 + noise}[config] + 0.3 * i


def _monitor(tmp_path: Path, spec, upto: int, continue_past: bool = False) -> tuple[SweepMonitor, dict]:
    """A monitor with the runs of the first ``upto`` scenarios of the schedule committed, where it still wants them."""
    layout, runs = Layout(tmp_path), _runs()
    manifest = {r.run_id: ManifestRun(run_id=r.run_id, scenario_id=r.scenario.id, config=r.config.name, replicate=0,
                                      status="pending") for r in runs}
    m = SweepMonitor(spec, runs, layout, manifest, continue_past)
    for r in runs:  # what a resumed driver does (runner/execute.py): the committed runs read, the looks due taken
        if r.run_id in layout.logged:
            manifest[r.run_id].status = "ok"
            m.seen(r)
    m.update()
    for s in m.order[:upto]:
        for r in runs:
            if r.scenario.id == s and m.needed(r) and manifest[r.run_id].status == "pending":
                row = dict.fromkeys(SPECS["runs"].schema.names) | {
                    "run_id": r.run_id, "status": "ok", "sharpe": _value(r.config.name, SCENARIOS.index(s)),
                    "total_return_pct": 0.0}
                layout.rows.append(Entry(r.run_id, 1, {"runs": [row], "rounds": [], "calls": []}))
                layout.logged.add(r.run_id)
                manifest[r.run_id].status = "ok"
                m.seen(r)
                m.settled(r, True)
    return m, manifest


def test_a_look_drops_the_losing_arm_and_its_later_runs_are_not_needed(tmp_path):
    m, manifest = _monitor(tmp_path, _spec(), 4)
    record = read_record(tmp_path)
    assert [x.n for x in record.looks] == [4] and record.looks[0].scenarios == m.order[:4]
    assert record.results["bad"].decision == "futility" and record.results["good"].decision == "efficacy"
    assert record.results["good"].adjusted_p <= 0.05 < record.results["bad"].adjusted_p
    low, high = record.results["good"].ci_low, record.results["good"].ci_high
    assert low < record.results["good"].diff < high and low > 0
    assert "flat" not in record.results and m.sampled() == ["flat"]
    later = [r for r in _runs() if r.scenario.id == m.order[9]]  # looks at 4, 8 and 12 scenarios
    assert [m.needed(r) for r in later] == [True, False, True, False]  # the control and the arm still racing
    assert m.waits(later[0])  # past the next look: held until it is taken


def test_the_sweep_ends_when_every_arm_is_decided_and_the_rest_are_not_needed(tmp_path):
    m, manifest = _monitor(tmp_path, _spec(), 12)
    record = read_record(tmp_path)
    assert record.decided and m.enough() and set(record.results) == set(ARMS)
    idle = m.finish()
    record = read_record(tmp_path)
    assert idle and all(manifest[r].status == "not_needed" for r in idle)
    assert sum(len(v) for v in record.not_needed.values()) == len(idle)
    assert set(record.not_needed) <= {"c", *ARMS} and "good" in record.not_needed and "bad" in record.not_needed
    assert not any(m.needed(r) for r in _runs())  # a rerun starts none of them

    again, _ = _monitor(tmp_path, _spec(), 0)  # resumed: the decisions stand
    assert again.enough() and again.record.results == record.results
    cont, _ = _monitor(tmp_path, _spec(), 0, continue_past=True)  # --continue: every run wanted again, recorded
    assert all(cont.needed(r) for r in _runs()) and len(read_record(tmp_path).continued) == 1


def test_a_sweep_changed_after_a_look_is_refused(tmp_path):
    _monitor(tmp_path, _spec(), 4)
    for change in ({"metric": "total_return_pct"}, {"rule": "bonferroni"}, {"seed": 3}):
        with pytest.raises(InputError) as err:
            _monitor(tmp_path, _spec(**change), 0)
        assert "sweep.json" in str(err.value) and "another sweep" in str(err.value)


def test_a_sweep_whose_selection_or_efficacy_rule_changed_after_a_look_is_refused(tmp_path):
    _monitor(tmp_path, _spec(select="best", margin=0.5), 4)
    for change, field in (({"select": "all"}, "select"), ({"select": "best", "margin": 3.0}, "margin"),
                          ({"select": "best", "margin": 0.5, "on_efficacy": "continue"}, "on_efficacy")):
        with pytest.raises(InputError) as err:
            _monitor(tmp_path, _spec(**change), 0)
        assert "another sweep" in str(err.value) and field in str(err.value)
    again, _ = _monitor(tmp_path, _spec(select="best", margin=0.5), 0)  # the same rules: resumed
    assert again.record.select == "best" and again.record.margin == 0.5 and len(again.record.looks) == 1


def test_a_sweep_interrupted_between_looks_resumes_to_the_same_decisions(tmp_path):
    straight, _ = _monitor(tmp_path / "straight", _spec(), 12)
    _monitor(tmp_path / "resumed", _spec(), 6)  # the driver dies with look 2's scenarios half in
    resumed, _ = _monitor(tmp_path / "resumed", _spec(), 12)
    a, b = read_record(tmp_path / "straight"), read_record(tmp_path / "resumed")
    assert [x.scenarios for x in a.looks] == [x.scenarios for x in b.looks]
    assert {k: (v.decision, v.look, v.adjusted_p) for k, v in a.results.items()} == {
        k: (v.decision, v.look, v.adjusted_p) for k, v in b.results.items()}
    assert sorted(straight.finish()) == sorted(resumed.finish())


def test_an_arm_identical_to_the_control_does_not_lead_the_selection(tmp_path):
    # "copy" scores exactly as the control (no spread, mean 0): its d_z is 0, not an infinite leader that drops "mid"
    layout, spec = Layout(tmp_path), _spec(select="best", margin=0.5, futility="none")
    runs = [SimpleNamespace(run_id=f"{s}-{c}", scenario=SimpleNamespace(id=s, invest_quarter=s),
                            config=SimpleNamespace(name=c), sample_index=0) for s in SCENARIOS for c in ("c", "mid", "copy")]
    manifest = {r.run_id: ManifestRun(run_id=r.run_id, scenario_id=r.scenario.id, config=r.config.name, replicate=0,
                                      status="pending") for r in runs}
    m = SweepMonitor(spec, runs, layout, manifest)
    for s in m.order[:4]:
        i = SCENARIOS.index(s)
        for r in [r for r in runs if r.scenario.id == s]:
            value = 0.3 * i + (0.05 + 0.05 * ((i * 7) % 5 - 2) if r.config.name == "mid" else 0.0)
            row = dict.fromkeys(SPECS["runs"].schema.names) | {
                "run_id": r.run_id, "status": "ok", "sharpe": value, "total_return_pct": 0.0}
            layout.rows.append(Entry(r.run_id, 1, {"runs": [row], "rounds": [], "calls": []}))
            layout.logged.add(r.run_id)
            manifest[r.run_id].status = "ok"
            m.settled(r, True)
    look = read_record(tmp_path).looks[0]
    by_arm = {a.arm: a for a in look.arms}
    assert by_arm["copy"].effect_size == 0.0 and by_arm["mid"].effect_size > 0.5
    assert by_arm["mid"].decision == "racing" and by_arm["copy"].decision == "dropped"
