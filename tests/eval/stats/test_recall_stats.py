"""The recall statistics (eval/stats/recall.py) against hand-computed values."""

import math

import numpy as np
import pandas as pd
import pytest

from madbench.eval.stats.recall import SUMMARY_COLUMNS, bucket_index, chance_rate, recall_table, recall_test
from madbench.eval.stats.split import split_by

EDGES = [-10, -3, 3, 10]


def test_buckets_are_half_open_with_the_lower_edge_included():
    returns = [-25.0, -10.0, -9.99, -3.0, 0.0, 2.99, 3.0, 10.0, 40.0]
    assert bucket_index(returns, EDGES).tolist() == [0, 1, 1, 2, 2, 2, 3, 4, 4]
    with pytest.raises(ValueError, match="increase"):
        bucket_index([0.0], [3, -3])
    with pytest.raises(ValueError, match="finite"):
        bucket_index([float("nan")], EDGES)


def test_chance_rate_is_the_sum_of_answer_share_times_realised_share_not_one_over_k():
    answers = np.array([2, 2, 2, 2])  # always "flat"
    truth = np.array([2, 2, 2, 0])  # three of four were flat
    assert chance_rate(answers, truth, 5) == pytest.approx(0.75)  # q_flat = 1, p_flat = 3/4
    r = recall_test(answers, truth, 5)
    # a constant "flat" scores 3/4 hits, exactly its chance: no recall, kappa 0, nothing significant
    assert r["hit_rate"] == 0.75 and r["excess"] == pytest.approx(0.0) and r["kappa"] == pytest.approx(0.0)
    assert r["p_value"] == pytest.approx(0.75 ** 4 + 4 * 0.75 ** 3 * 0.25)  # P(X >= 3), X ~ Bin(4, 0.75)


def test_recall_test_against_the_binomial_tail_by_hand():
    truth = np.array([0, 1, 2, 3, 4, 0, 1, 2, 3, 4])
    answers = np.array([0, 1, 2, 3, 4, 0, 1, 2, 0, 0])  # 8 hits of 10
    q = np.bincount(answers, minlength=5) / 10
    p = np.bincount(truth, minlength=5) / 10
    pe = float(q @ p)  # every realised share is 0.2, so p_e = 0.2 whatever the answers
    r = recall_test(answers, truth, 5)
    tail = sum(math.comb(10, k) * pe ** k * (1 - pe) ** (10 - k) for k in range(8, 11))
    assert (r["n"], r["hits"]) == (10, 8)
    assert r["chance_rate"] == pytest.approx(pe) == pytest.approx(0.2)
    assert r["kappa"] == pytest.approx((0.8 - pe) / (1 - pe))
    assert r["modal_rate"] == pytest.approx(0.2)
    assert r["p_value"] == pytest.approx(tail)


def test_degenerate_groups_are_undefined_not_zero():
    empty = recall_test([], [], 5)
    assert empty["n"] == 0 and math.isnan(empty["hit_rate"]) and math.isnan(empty["p_value"])
    same = recall_test([2, 2, 2], [2, 2, 2], 5)  # one bucket only: chance is 1, kappa undefined, no evidence
    assert same["chance_rate"] == 1.0 and math.isnan(same["kappa"]) and same["p_value"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="0..4"):
        recall_test([5], [0], 5)


def test_recall_table_has_one_row_per_group_in_order_of_appearance():
    obs = pd.DataFrame({"model": ["m"] * 6, "quarter": ["2023Q2"] * 3 + ["2022Q1"] * 3,
                        "answer_index": [0, 1, 2, 4, 4, 4], "realised_index": [0, 1, 2, 0, 1, 2]})
    table = recall_table(obs, ["model", "quarter"], 5)
    assert list(table.columns) == ["model", "quarter", *SUMMARY_COLUMNS]
    assert table["quarter"].tolist() == ["2023Q2", "2022Q1"]
    assert table["hits"].tolist() == [3, 0] and table["chance_rate"].tolist() == pytest.approx([1 / 3, 0.0])


def test_split_keeps_null_apart_from_false():
    runs = pd.DataFrame({"config": ["a"] * 4, "post_cutoff": [True, False, None, False]})
    parts = split_by(runs, "post_cutoff", "--by")
    # post-cutoff first (the primary part: a model cannot remember what came after its training), null last
    assert [(label, len(rows)) for label, rows in parts] == [("True", 1), ("False", 2), ("null", 1)]
