import pytest

from madbench.data.errors import InputError
from madbench.eval.stats.sweep_record import path_of, read_record


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
