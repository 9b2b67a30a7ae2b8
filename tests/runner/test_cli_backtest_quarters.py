"""`madbench backtest-quarters`: consecutive quarterly allocations from a file, held and rebalanced (eval/multiquarter.py)."""

import json

import pytest

from madbench.data.market.pack import load_pack
from madbench.eval.multiquarter import QuarterAllocation, backtest_sequence
from madbench.runner.cli import main

STEPS = [{"quarter": "2022Q1", "weights": {"AAA": 1.0}}, {"quarter": "2022Q2", "weights": {"BBB": 0.5, "CCC": 0.5}}]


def test_the_command_prints_the_same_result_as_the_sequence_backtest(make_pack, tmp_path, capsys):
    pack = make_pack()
    steps = tmp_path / "steps.json"
    steps.write_text(json.dumps(STEPS))
    assert main(["backtest-quarters", "--steps", str(steps), "--cost-bps", "25", "--rf", "0", "--pack", str(pack), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    expected = backtest_sequence(load_pack(pack), [QuarterAllocation(**s) for s in STEPS], rf="0", cost_bps=25)
    assert printed == json.loads(expected.model_dump_json())
    assert printed["costs_usd"] > 0 and printed["quarters"] == ["2022Q1", "2022Q2"]
    assert main(["backtest-quarters", "--steps", str(steps), "--pack", str(pack)]) == 0
    assert "2022Q1..2022Q2: rebalanced" in capsys.readouterr().out


@pytest.mark.parametrize("steps, field", [
    ([{"quarter": "2022Q1", "weight": {"AAA": 1.0}}], "[0].weight: unknown key"),  # a misspelt key
    ([STEPS[0], {"quarter": "2022Q3", "weights": {"AAA": 1.0}}], "[1].quarter"),  # not the next quarter
])
def test_a_bad_steps_file_is_one_line_naming_the_file_and_field(make_pack, tmp_path, capsys, steps, field):
    path = tmp_path / "steps.json"
    path.write_text(json.dumps(steps))
    assert main(["backtest-quarters", "--steps", str(path), "--pack", str(make_pack())]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0] and field in err[0], err
