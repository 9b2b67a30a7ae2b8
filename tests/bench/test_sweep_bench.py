"""`madbench bench sweep` measures what the shipped default sweep design is for (8 arms and a control, 70 scenarios,
5 looks): the family-wise error held under the global and a partial null, the power to find an arm at d = 0.5, the
runs saved against the fixed grid, and the simultaneous intervals' coverage; and it prints every cell as JSON."""

import json

import numpy as np
import pytest

from madbench.bench.sweep_designs import CELLS, effects_of
from madbench.eval.stats.group_sequential import planned_looks
from madbench.eval.stats.sweep_design import make_sweep
from madbench.eval.stats.sweep_simulation import Rules, planned_df, simulate
from madbench.runner.cli import main
from madbench.runner.sweep import SweepSpec

#: 4,000 sweeps a cell: an error rate of 0.05 has a standard error of 0.0034, a power of 0.85 one of 0.006.
SWEEPS = 4000


@pytest.fixture(scope="module")
def default_design():
    s = SweepSpec(control="c")  # the defaults a batch gets
    n = planned_looks(70, s.looks)
    return make_sweep(n, 8, s.alpha, s.rule, s.spending, s.correlation, s.futility == "non-binding", s.effect, s.power,
                      df=planned_df(n))


def test_the_default_design_holds_the_error_and_saves_runs(default_design):
    rng = np.random.default_rng(7)
    null = simulate(default_design, effects_of(CELLS["global null"], 8), SWEEPS, rng)
    partial = simulate(default_design, effects_of(CELLS["partial null"], 8), SWEEPS, rng)
    one = simulate(default_design, effects_of(CELLS["one better"], 8), SWEEPS, rng)
    assert null["fwer"] <= 0.057 and partial["fwer"] <= 0.057
    assert one["power_by_effect"]["0.5"] >= 0.8
    assert null["share_of_fixed"] <= 0.60 and partial["share_of_fixed"] <= 0.75
    assert min(null["ci_covers_all"], partial["ci_covers_all"], one["ci_covers_all"]) >= 0.94


def test_a_misspecified_correlation_is_what_bonferroni_is_for(default_design):
    # arms whose differences correlate less than the design's 1/2 raise the mams error; Bonferroni's holds regardless
    n = list(default_design.n)
    bonf = make_sweep(n, 8, 0.05, "bonferroni", "pocock", 0.5, True, 0.5, 0.85, df=planned_df(n))
    low_mams = simulate(default_design, np.zeros(8), SWEEPS, np.random.default_rng(3), correlation=0.0)
    low_bonf = simulate(bonf, np.zeros(8), SWEEPS, np.random.default_rng(3), correlation=0.0)  # the same draws
    assert low_bonf["fwer"] <= 0.05 + 3 * 0.0034
    assert low_mams["fwer"] > low_bonf["fwer"]


def test_bench_sweep_prints_every_design_and_cell_as_json(capsys):
    assert main(["bench", "sweep", "--json", "--sweeps", "300", "--arms", "4", "--max-scenarios", "20", "--looks", "2",
                 "--rule", "bonferroni", "--margin", "0.4"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {(r["design"].split()[0], r["cell"]) for r in rows} == {(d, c) for d in ("bonferroni", "fixed") for c in CELLS}
    for r in rows:
        assert 0 <= r["fwer"] <= 1 and r["runs"] <= r["fixed_runs"] == 5 * 20 and r["margin"] == 0.4


def test_a_selection_margin_drops_only_when_declared():
    assert Rules().margin is None and SweepSpec(control="c").margin_or_none is None
    assert SweepSpec(control="c", select="best", margin=0.3).margin_or_none == 0.3


def test_bench_sweep_json_is_strict_json_with_null_for_no_power(capsys):
    assert main(["bench", "sweep", "--json", "--sweeps", "200", "--arms", "3", "--max-scenarios", "12", "--looks", "2"]) == 0
    out = capsys.readouterr().out
    rows = json.loads(out, parse_constant=lambda c: pytest.fail(f"non-standard JSON token {c}"))
    null = [r for r in rows if r["cell"] == "global null"]
    assert null and all(r["power_per_better_arm"] is None for r in null)
@pytest.mark.parametrize(("option", "flag"), [
    (["--looks", "0"], "--looks"), (["--looks", "-1"], "--looks"), (["--looks", "21"], "--looks"),
    (["--max-scenarios", "1", "--looks", "1"], "--max-scenarios"), (["--max-scenarios", "-5", "--looks", "1"], "--max-scenarios"),
    (["--effect", "0"], "--effect"), (["--effect", "-0.5"], "--effect"), (["--icc", "-3"], "--icc")])
def test_bench_sweep_refuses_an_option_out_of_range_before_simulating(capsys, option, flag):
    assert main(["bench", "sweep", "--sweeps", "100", *option]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and flag in err[0] and "out of range" in err[0]
