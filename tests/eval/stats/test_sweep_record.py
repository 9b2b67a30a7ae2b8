"""What a sweep's summary says: a bonferroni sweep is not said to assume a correlation, the runs a `--continue` ran
anyway are not called saved, and each arm's line carries its dollars saved when a run's cost is known."""

import pandas as pd
import pytest

from madbench.data.errors import InputError
from madbench.eval.stats.sequential_record import Continuation
from madbench.eval.stats.sweep_record import ArmResult, SweepDesignRecord, SweepLook, SweepRecord, path_of, read_record, summary


def record(rule: str, continued: bool = False) -> SweepRecord:
    design = SweepDesignRecord(n=[2, 4], arms=2, alpha=0.05, rule=rule, spending="pocock", correlation=0.5,
                               efficacy=[3.0, 2.0], ci=[3.2, 2.2], futility=None, effect=0.5, power=0.85, beta=0.15)
    looks = [SweepLook(look=1, n=2, planned_n=2, scenarios=["s1", "s2"], arms=[], correlation=0.1, at="t")]
    return SweepRecord(control="c", arms=["a", "b"], metric="sharpe", better="higher", design=design,
                       order=["s1", "s2", "s3", "s4"], looks=looks, decided=True, results={"a": ArmResult(
                           arm="a", decision="futility", look=1, n=2, diff=-0.1, adjusted_p=0.9, ci_low=-1.0,
                           ci_high=0.8, ci_look=1, naive_p=0.6, naive_ci_low=-0.5, naive_ci_high=0.3)},
                       not_needed={"a": ["a/s3", "a/s4"], "c": ["c/s3"]},
                       continued=[Continuation(at="t", after_look=1, decision="final")] if continued else [])


def test_a_bonferroni_sweep_is_not_said_to_assume_a_correlation():
    lines = summary(record("bonferroni"), None)["lines"]
    corr = [x for x in lines if "correlate" in x]
    assert corr and "assumes" not in corr[0] and "any correlation" in corr[0]
    mams = [x for x in summary(record("mams"), None)["lines"] if "correlate" in x]
    assert "assumes 0.5" in mams[0] and "prefer rule bonferroni" in mams[0]


def test_runs_a_continue_ran_are_not_called_saved():
    saved = [x for x in summary(record("mams", continued=True), None)["lines"] if x.startswith("saved")]
    assert "nothing, --continue went past the decisions" in saved[0]
    assert "--continue went past" not in "".join(summary(record("mams"), None)["lines"])


def test_each_arm_line_carries_its_dollars_saved():
    runs = pd.DataFrame({"config": ["c", "a", "b"], "cost_usd": [0.5, 0.5, 0.5]})
    out = summary(record("mams"), runs)
    assert out["arms"][0]["dollars_saved"] == 1.0
    assert any(x.startswith("a:") and "2 run(s) not needed ($1.00)" in x for x in out["lines"])


@pytest.mark.parametrize("damage", [b"\xff\xfe\x00garbage", b'{"control": "c", "arms": [', b"", b"[1, 2]"])
def test_a_damaged_sweep_record_is_an_input_error_naming_it(tmp_path, damage):
    path = path_of(tmp_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(damage)
    with pytest.raises(InputError) as err:
        read_record(tmp_path)
    assert "sweep.json" in str(err.value) and "not a sweep record" in str(err.value)


def _record(**kw):
    from madbench.eval.stats.sweep_record import SweepDesignRecord, SweepRecord
    design = SweepDesignRecord(n=[2, 4], arms=2, alpha=0.05, rule="mams", spending="pocock", correlation=0.5,
                               efficacy=[2.5, 2.4], ci=[2.7, 2.6], futility=None, effect=0.5, power=0.8, beta=0.2)
    return SweepRecord(control="c", arms=["a", "b"], metric="sharpe", better="higher", design=design,
                       order=["s1", "s2", "s3", "s4"], decided=True,
                       not_needed={"a": [f"a{i}" for i in range(4)], "b": [f"b{i}" for i in range(4)]}, **kw)


def test_the_runs_saved_are_counted_against_the_whole_grid_with_its_replicates():
    from madbench.eval.stats.sweep_record import summary
    line = next(x for x in summary(_record(replicates=2), None)["lines"] if x.startswith("saved"))
    assert "8 of its 24 runs not needed" in line  # 3 configs x 4 scenarios x 2 replicates


def test_after_continue_no_run_is_said_to_be_saved():
    from madbench.eval.stats.sequential_record import Continuation
    from madbench.eval.stats.sweep_record import summary
    record = _record(replicates=1, continued=[Continuation(at="2026-12-05T00:00:00Z", after_look=1, decision="final")])
    line = next(x for x in summary(record, None)["lines"] if x.startswith("saved"))
    assert line.startswith("saved against the fixed grid: nothing") and "ran the 8 of its 12 runs" in line
