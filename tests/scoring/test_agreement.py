"""ICC(2,1) against Shrout & Fleiss (1979), and scorer-vs-audit agreement."""

import numpy as np
import pandas as pd
import pytest

from madbench.scoring.agreement import audit_agreement, icc2_1, pillar_agreement

# Shrout & Fleiss (1979), Table 2: 6 targets rated by 4 judges; they report ICC(2,1) = 0.29.
SHROUT_FLEISS = np.array([[9, 2, 5, 8], [6, 1, 3, 2], [8, 4, 6, 8], [7, 1, 2, 6], [10, 5, 6, 9], [6, 2, 4, 7]], dtype=float)


def test_icc_matches_the_published_example():
    assert icc2_1(SHROUT_FLEISS) == pytest.approx(0.2898, abs=5e-4)


def test_icc_of_identical_raters_is_one_and_constant_is_undefined():
    x = np.array([0.2, 0.5, 0.9, 0.4])
    assert icc2_1(np.column_stack([x, x])) == pytest.approx(1.0)
    assert np.isnan(icc2_1(np.ones((5, 2))))


def test_pillar_agreement_and_audit_agreement():
    keys = {"run_id": ["r"] * 4, "round": [1] * 4, "agent_id": list("abcd")}
    a = pd.DataFrame({**keys, "p": [0.1, 0.4, 0.6, 0.9]})
    b = pd.DataFrame({**keys, "p": [0.2, 0.35, 0.7, 0.8]})
    row = pillar_agreement(a, b, ["p"]).iloc[0]
    assert row.n == 4 and row.spearman == pytest.approx(1.0) and 0.9 < row.pearson < 1 and 0.8 < row.icc2_1 < 1
    scores = pd.DataFrame({"diag_unsupported_claims": [1, 0, 2], "audit_claims_without_valid_evidence": [1, 0, 0],
                           "audit_unknown_evidence_ids": [0, 0, 0], "diag_ignored_critiques": [0, 0, 0],
                           "audit_unanswered_critiques": [0, 1, 0], "diag_orphaned_positions": [0, 0, 0],
                           "audit_orphaned_positions": [0, 0, 0]})
    agree = audit_agreement(scores).set_index("failure")["agreement"]
    assert agree["unsupported_claims"] == pytest.approx(2 / 3) and agree["ignored_critiques"] == pytest.approx(2 / 3)
    assert agree["orphaned_positions"] == 1.0
