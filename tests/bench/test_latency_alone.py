"""What the latency distribution alone allows a batch (bench hedging's model): the slowest run's critical path over
the median run's, by simulation."""

import pandas as pd

from madbench.bench.tail_latency import expected_path_ratio, step_shape


def test_without_spread_every_run_takes_the_median_path():
    ratio = expected_path_ratio([2, 2, 1], runs=30, median_s=8.0, sigma=1e-9, quantile=None, max_share=0.0, draws=20)
    assert ratio == {"median": 1.0, "p10": 1.0, "p90": 1.0}


def test_the_slowest_of_more_runs_lies_further_out_and_hedging_brings_it_in():
    few = expected_path_ratio([2, 2, 2, 2, 1], runs=5, median_s=8.0, sigma=0.5, quantile=None, max_share=0.0)
    many = expected_path_ratio([2, 2, 2, 2, 1], runs=70, median_s=8.0, sigma=0.5, quantile=None, max_share=0.0)
    hedged = expected_path_ratio([2, 2, 2, 2, 1], runs=70, median_s=8.0, sigma=0.5, quantile=0.9, max_share=0.25)
    assert 1.0 < few["median"] < many["median"]
    assert hedged["median"] < many["median"] and hedged["p90"] < many["p90"]


def test_a_runs_steps_are_read_from_its_calls_in_order():
    calls = pd.DataFrame({"run_id": ["a"] * 5 + ["b"] * 5, "round": [0, 0, 1, 1, 1] * 2,
                          "phase": ["propose", "propose", "critique", "critique", "judge"] * 2,
                          "label": ["propose", "propose", "critique", "critique", "judge"] * 2,
                          "call_id": [None] * 10})
    assert step_shape(calls) == [2, 2, 1]
