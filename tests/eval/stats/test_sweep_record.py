"""What a sweep's summary says: a bonferroni sweep is not said to assume a correlation, the runs a `--continue` ran
anyway are not called saved, and each arm's line carries its dollars saved when a run's cost is known."""

import pandas as pd

from madbench.eval.stats.sequential_record import Continuation
from madbench.eval.stats.sweep_record import ArmResult, SweepDesignRecord, SweepLook, SweepRecord, summary


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
    assert "none was saved" in saved[0]
    assert "none was saved" not in "".join(summary(record("mams"), None)["lines"])


def test_each_arm_line_carries_its_dollars_saved():
    runs = pd.DataFrame({"config": ["c", "a", "b"], "cost_usd": [0.5, 0.5, 0.5]})
    out = summary(record("mams"), runs)
    assert out["arms"][0]["dollars_saved"] == 1.0
    assert any(x.startswith("a:") and "2 run(s) not needed ($1.00)" in x for x in out["lines"])
