"""Scenario files: the paper's format loads, bad input is named precisely, draws are seeded."""

import pytest

from madbench.data.errors import InputError
from madbench.data.market.calendar import quarter_range
from madbench.data.market.pack import load_pack
from madbench.data.scenario import load_scenarios
from madbench.data.scenario_gen import draw_scenarios, draw_stats, mean_pairwise_jaccard
from tests.conftest import SHARED_PAPER, requires_shared


def write(tmp_path, text, name="s.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


GOOD = """
scenarios:
- id: a
  invest_quarter: 2022Q2
  tickers: [AAA, BBB, CCC]
  constraints: {max_weight: 0.5, min_holdings: 2}
"""


def test_loads_and_defaults(tmp_path):
    (s,) = load_scenarios(write(tmp_path, GOOD))
    assert s.constraints.max_weight == 0.5 and s.constraints.allow_cash is False and s.constraints.fully_invested is True


@pytest.mark.parametrize("text, needle", [
    ("scenarios:\n- id: a\n  invest_quarter: 2022Q2\n  tickers: [A, B\n", "malformed YAML at line"),
    ("scenarios:\n- id: a\n  invest_quarter: 2022Q2\n  tickers: [A, B]\n  colour: red\n", "scenarios[0].colour: unknown key"),
    ("scenarios:\n- id: a\n  invest_quarter: 2022Q2\n  tickers: [A, B, A]\n", "scenarios[0].tickers: duplicate tickers ['A']"),
    ("scenarios:\n- id: a\n  invest_quarter: 2022Q2\n  tickers: [A, B, C]\n  constraints: {max_weight: 0.3}\n", "fully invested needs max_weight x holdings >= 1"),
    ("scenarios:\n- id: a\n  invest_quarter: 2022Q2\n  tickers: [A, B]\n  constraints: {min_holdings: 3}\n", "min_holdings=3 exceeds the 2 tickers"),
    ("scenarios:\n- id: a\n  invest_quarter: 2022-Q2\n  tickers: [A]\n", "scenarios[0].invest_quarter"),
    ("scenarios:\n- id: a\n  invest_quarter: 2022Q2\n  tickers: [A]\n  constraints: {allow_cash: true, fully_invested: true}\n", "contradict"),
    ("- id: a\n", "top-level `scenarios:` list"),
])
def test_bad_scenarios_name_file_and_field(tmp_path, text, needle):
    path = write(tmp_path, text)
    with pytest.raises(InputError) as err:
        load_scenarios(path)
    assert str(path) in str(err.value)
    assert needle in str(err.value)


def test_cash_allowed_relaxes_sum_constraint(tmp_path):
    (s,) = load_scenarios(write(tmp_path, "scenarios:\n- id: a\n  invest_quarter: 2022Q2\n  tickers: [A, B, C]\n  constraints: {max_weight: 0.2, allow_cash: true}\n"))
    assert s.constraints.allow_cash


@requires_shared
def test_paper_scenarios_load_as_is():
    scenarios = load_scenarios(SHARED_PAPER / "scenarios_35.yaml")
    assert len(scenarios) == 35
    assert sum(len(s.tickers) for s in scenarios) / 35 == pytest.approx(11.5, abs=0.05)
    assert all(s.constraints.fully_invested for s in scenarios)
    assert mean_pairwise_jaccard([set(s.tickers) for s in scenarios]) == pytest.approx(0.216, abs=0.002)


def test_draws_are_seeded_and_feasible(make_pack):
    pack = load_pack(make_pack(n_days=1100, tickers=("AAA", "BBB", "CCC", "DDD", "EEE"), start="2019-01-01"))
    qs = quarter_range("2021Q1:2022Q4")
    a = draw_scenarios(pack, qs, 12, 2, 5, seed=3)
    b = draw_scenarios(pack, qs, 12, 2, 5, seed=3)
    c = draw_scenarios(pack, qs, 12, 2, 5, seed=4)
    assert [s.model_dump() for s in a] == [s.model_dump() for s in b]
    assert [s.tickers for s in a] != [s.tickers for s in c]
    assert {s.invest_quarter for s in a} == {str(q) for q in qs}  # spread over every quarter
    for s in a:
        assert 2 <= len(s.tickers) <= 5 and "SPY" not in s.tickers
        assert not s.constraints.problems(len(s.tickers))
        assert len({pack.sector(t) for t in s.tickers}) == len(s.tickers)  # one per sector while sectors last
    st = draw_stats(a, pack.sector)
    assert st.n == 12 and st.size_min >= 2 and st.size_max <= 5
    assert 0 < st.mean_jaccard < 1


def test_jaccard_formula():
    assert mean_pairwise_jaccard([{"a", "b"}, {"b", "c"}, {"a", "b"}]) == pytest.approx((1 / 3 + 1 + 1 / 3) / 3)
