"""Intervention trigger logic on fixtures."""

import pytest
from pydantic import ValidationError

from madbench.debate.interventions import crit_causal, js_collapse, rca


def test_js_collapse_triggers_below_threshold_only_with_enough_divergence():
    p = js_collapse.Params(threshold=0.8, min_js_prop=0.10)
    assert js_collapse.triggered(0.40, 0.20, p)[0]          # ratio 0.5 < 0.8
    assert not js_collapse.triggered(0.40, 0.36, p)[0]      # ratio 0.9
    fired, reason = js_collapse.triggered(0.05, 0.0, p)     # nothing to collapse
    assert not fired and "nothing to collapse" in reason
    assert "0.500 < 0.8" in js_collapse.triggered(0.40, 0.20, p)[1]


def test_js_collapse_revision_limits():
    p = js_collapse.Params(max_changed_tickers=2, max_change_pts=10)
    before = {"A": 0.4, "B": 0.3, "C": 0.3, "D": 0.0}
    assert js_collapse.limit_violations(before, {"A": 0.35, "B": 0.35, "C": 0.3, "D": 0.0}, p) == []
    three = js_collapse.limit_violations(before, {"A": 0.3, "B": 0.35, "C": 0.25, "D": 0.1}, p)
    assert len(three) == 1 and "at most 2 tickers" in three[0]
    big = js_collapse.limit_violations(before, {"A": 0.2, "B": 0.5, "C": 0.3, "D": 0.0}, p)
    assert "more than 10 points" in big[0] and "A -20.0" in big[0] and "B +20.0" in big[0]


def test_js_collapse_role_nudges_with_override():
    p = js_collapse.Params(nudges={"macro": "custom"})
    assert js_collapse.nudge("macro", p) == "custom"
    assert "dissent" in js_collapse.nudge("devils_advocate", p)
    assert js_collapse.nudge("unknown-role", p) == js_collapse.GENERIC_NUDGE


def test_crit_causal_targets_agents_below_p4_threshold():
    p = crit_causal.Params(p4_threshold=0.8)
    assert crit_causal.targets({"macro": 0.9, "technical": 0.55, "value": 0.8}, p) == ["technical"]


def test_rca_feedback_escalates_with_beta_and_ends_with_optimisation():
    p = rca.Params(max_retries=3)
    soft, firm, hard = (rca.feedback(1, b, "fix X", p) for b in (0.1, 0.5, 0.9))
    assert soft.startswith("Please reconsider") and firm.startswith("This is inconsistent") and hard.startswith("Your answer contradicts")
    assert rca.OPTIMISATION_FRAMING in rca.feedback(3, 0.1, "fix X", p) and rca.OPTIMISATION_FRAMING not in soft


def test_params_reject_unknown_keys():
    with pytest.raises(ValidationError, match="treshold"):
        js_collapse.Params(treshold=0.8)


@pytest.mark.parametrize("phases", [["propose"], ["propose", "revise"], [], ["revise", "revise"]])
def test_rca_checks_revise_turns_only_and_says_so(phases):
    """The paper ran RCA on revisions (§2.4, §3.4.1); a proposal check is refused, not accepted and skipped."""
    with pytest.raises(ValidationError) as err:
        rca.Params(phases=phases)
    assert "RCA checks revise turns only" in str(err.value) and "phases: [revise]" in str(err.value)
    assert rca.Params().phases == rca.Params(phases=["revise"]).phases == ["revise"]
