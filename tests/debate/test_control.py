"""JSD against scipy, and the PID controller against hand-computed steps."""

import asyncio
from types import SimpleNamespace

import numpy as np
import pytest
from scipy.spatial.distance import jensenshannon
from scipy.stats import entropy

from madbench.debate.control import (
    PIDConfig,
    PIDState,
    cash_spread,
    converged_stop,
    jsd,
    pairwise_js,
    pid_step,
    quadrant,
    sycophancy_flag,
)
from madbench.debate.protocols.paper import PaperDebate
from madbench.runner.pipeline import run_debate
from madbench.runner.wiring import build_gateway
from tests.debate.test_engine import config, events, world  # noqa: F401  (fixture)


@pytest.mark.parametrize("seed", range(5))
def test_two_way_jsd_matches_scipy(seed):
    rng = np.random.default_rng(seed)
    p, q = rng.dirichlet(np.ones(6)), rng.dirichlet(np.ones(6))
    a = {f"T{i}": p[i] for i in range(6)}
    b = {f"T{i}": q[i] for i in range(6)}
    assert jsd([a, b]) == pytest.approx(jensenshannon(p, q, base=2) ** 2, abs=1e-12)


def test_n_way_jsd_is_entropy_of_mean_minus_mean_entropy():
    rng = np.random.default_rng(9)
    m = rng.dirichlet(np.ones(5), size=4)
    allocs = [{f"T{i}": row[i] for i in range(5)} for row in m]
    expected = entropy(m.mean(axis=0), base=2) - np.mean([entropy(r, base=2) for r in m])
    assert jsd(allocs) == pytest.approx(expected, abs=1e-12)


def test_jsd_bounds_and_disjoint_tickers():
    assert jsd([{"A": 1.0}, {"A": 1.0}]) == 0.0
    assert jsd([{"A": 1.0}, {"B": 1.0}]) == pytest.approx(1.0)  # disjoint supports: the maximum for two
    assert jsd([{"A": 0.5, "B": 0.5}, {"A": 0.5, "B": 0.5}], cash=[0.0, 0.0]) == 0.0
    assert jsd([{"A": 0.5}, {"A": 0.5}], cash=[0.5, 0.0]) > 0  # cash counts as a position
    assert set(pairwise_js({"x": {"A": 1}, "y": {"B": 1}, "z": {"A": 1}})) == {"x|y", "x|z", "y|z"}
    assert cash_spread([0.1, 0.5, 0.3]) == pytest.approx(0.4)


def test_pid_steps_by_hand():
    cfg = PIDConfig(kp=0.5, ki=0.1, kd=0.2, rho_target=0.8, mu=0.3, integral_clamp=0.15, momentum=0.5,
                    beta0=0.5, sycophancy_ratio=0.5, delta_js=0.1, epsilon=0.02, delta_rho=0.01)
    s0 = PIDState(beta=0.5)
    # step 1: ρ̄=0.7, JS=0.4 after proposals at JS_0=0.5 (0.4 ≥ 0.5·0.5) → s=0; e=0.1; I=0.1; D=0; u=0.05+0.01=0.06
    # v=0.03; β=0.53
    s1, r1 = pid_step(s0, 0.7, 0.4, cfg, js_before=0.5)
    assert (r1.sycophancy, r1.error, r1.integral, r1.derivative) == (0, pytest.approx(0.1), pytest.approx(0.1), 0.0)
    assert r1.u == pytest.approx(0.06) and r1.beta_after == pytest.approx(0.53) and r1.quadrant == "chaotic"
    assert r1.js_before == 0.5
    # step 2: ρ̄=0.75, JS=0.1 < 0.5·0.4 → s=1; e=0.05+0.3=0.35; I=clip(0.45)=0.15; D=0.25
    # u=0.175+0.015+0.05=0.24; v=0.5·0.03+0.5·0.24=0.135; β=0.665
    s2, r2 = pid_step(s1, 0.75, 0.1, cfg, js_before=0.4)
    assert r2.sycophancy == 1 and r2.error == pytest.approx(0.35) and r2.integral == pytest.approx(0.15)
    assert r2.derivative == pytest.approx(0.25) and r2.u == pytest.approx(0.24) and r2.beta_after == pytest.approx(0.665)
    assert r2.quadrant == "chaotic"  # JS 0.1 ≥ δ_JS (diverse), ρ̄ below ρ*
    # step 3: ρ̄=0.9, JS=0.01 (not < 0.5·0.1? 0.01 < 0.05 → s=1); e=−0.1+0.3=0.2; I=clip(0.35)=0.15; D=−0.15
    # u=0.1+0.015−0.03=0.085; v=0.5·0.135+0.5·0.085=0.11; β=0.775; |Δρ̄|=0.15 → no early stop
    s3, r3 = pid_step(s2, 0.9, 0.01, cfg, js_before=0.1)
    assert r3.u == pytest.approx(0.085) and r3.beta_after == pytest.approx(0.775) and not r3.early_stop
    assert r3.quadrant == "converged"
    # step 4: ρ̄=0.905, JS=0.015 (no sharp drop) → e=−0.105; early stop: converged, JS < ε and |Δρ̄| = 0.005 < Δρ
    s4, r4 = pid_step(s3, 0.905, 0.015, cfg, js_before=0.01)
    assert r4.sycophancy == 0 and r4.error == pytest.approx(-0.105) and r4.early_stop


def test_round_one_sycophancy_compares_the_first_revision_with_the_proposals():
    """s_1 = 1 when the first revisions' JS falls below r·JS of the proposals: the paper's sharpest drop (§3.5.1)."""
    cfg = PIDConfig(rho_target=0.8, mu=0.3, sycophancy_ratio=0.5)
    _, first = pid_step(PIDState(beta=0.5), 0.8, 0.1, cfg, js_before=0.4)  # round 1: proposals 0.4 → revisions 0.1
    assert first.sycophancy == 1 and first.error == pytest.approx(0.3) and first.js_before == 0.4
    _, mild = pid_step(PIDState(beta=0.5), 0.8, 0.3, cfg, js_before=0.4)
    assert mild.sycophancy == 0 and mild.error == pytest.approx(0.0)
    assert sycophancy_flag(0.0, 0.0, cfg) == 0  # nothing to collapse (one agent, or identical proposals)
    assert sycophancy_flag(0.19, 0.4, cfg) == 1 and sycophancy_flag(0.2, 0.4, cfg) == 0  # strictly below r·JS_{t−1}


def test_early_stop_on_convergence_only_never_when_stuck():
    cfg = PIDConfig(rho_target=0.8, delta_js=0.10, epsilon=0.02, delta_rho=0.01)
    steady = PIDState(beta=0.5, prev_rho=0.5)
    # low divergence, ρ̄ steady, but quality below ρ*: the stuck quadrant keeps debating
    _, stuck = pid_step(steady, 0.5, 0.005, cfg, js_before=0.006)
    assert stuck.quadrant == "stuck" and not stuck.early_stop
    assert not converged_stop(0.005, 0.5, 0.5, cfg)
    # converged: ρ̄ ≥ ρ*, JS < ε (and < δ_JS), |Δρ̄| < Δρ
    _, done = pid_step(steady.model_copy(update={"prev_rho": 0.855}), 0.86, 0.005, cfg, js_before=0.006)
    assert done.quadrant == "converged" and done.early_stop
    # converged but ρ̄ still moving, or JS not yet under ε, or no ρ̄_{t−1} (round 1): no stop
    assert not converged_stop(0.005, 0.86, 0.80, cfg)
    assert not converged_stop(0.05, 0.86, 0.86, cfg)
    assert not converged_stop(0.005, 0.86, None, cfg)
    # with ε above δ_JS, a JS under ε that is still diverse (healthy) does not stop either
    wide = cfg.model_copy(update={"epsilon": 0.2})
    assert quadrant(0.15, 0.9, wide) == "healthy" and not converged_stop(0.15, 0.9, 0.9, wide)


def test_beta_is_clipped_and_disabled_pid_holds_beta():
    cfg = PIDConfig(kp=10, ki=0, kd=0, momentum=0, rho_target=0.9)
    state, step = pid_step(PIDState(beta=0.5), 0.1, 0.5, cfg, js_before=0.5)
    assert step.beta_after == 1.0
    _, step = pid_step(PIDState(beta=0.5), 1.0, 0.5, cfg.model_copy(update={"rho_target": 0.0}), js_before=0.5)
    assert step.beta_after == 0.0
    _, step = pid_step(PIDState(beta=0.4), 0.1, 0.5, cfg.model_copy(update={"enabled": False}), js_before=0.5)
    assert step.beta_after == 0.4


def test_quadrants():
    cfg = PIDConfig(rho_target=0.8, delta_js=0.1)
    assert [quadrant(j, r, cfg) for j, r in ((0.2, 0.9), (0.05, 0.9), (0.2, 0.5), (0.05, 0.5))] == \
        ["healthy", "converged", "chaotic", "stuck"]


def test_the_paper_debate_feeds_round_one_the_proposals_divergence(world, tmp_path):  # noqa: F811
    """In a run, s_1 is computed against the proposals' JS, and s_t (t > 1) against the previous round's revisions."""
    pack, scenario = world
    result = asyncio.run(run_debate(scenario, pack, config(interventions=[]), build_gateway(), tmp_path))
    assert result.status == "ok" and result.rounds_run == 2
    div = events(tmp_path / result.run_id, "divergence")
    steps = [e["step"] for e in events(tmp_path / result.run_id, "controller")]
    assert [d["phase"] for d in div] == ["propose", "revise", "revise"]
    assert steps[0]["js_before"] == pytest.approx(div[0]["jsd"]) and steps[0]["js"] == pytest.approx(div[1]["jsd"])
    assert steps[1]["js_before"] == pytest.approx(div[1]["jsd"]) and steps[1]["js"] == pytest.approx(div[2]["jsd"])
    cfg = config().pid
    assert [s["sycophancy"] for s in steps] == [sycophancy_flag(s["js"], s["js_before"], cfg) for s in steps]


def test_a_sycophantic_first_revision_flags_in_round_one():
    """The controller step of round 1 compares the first revisions (JS 0.05) with the proposals (JS 0.40)."""
    written = []
    cfg = config(interventions=[])
    debate = PaperDebate(SimpleNamespace(config=cfg, trace=SimpleNamespace(write=written.append)))
    debate.js_in, debate.js_rev = 0.40, 0.05  # the round's proposals, then its first revisions
    step = debate.controller_step(1, {a.agent_id: SimpleNamespace(rho=0.9) for a in cfg.agents})
    assert step.sycophancy == 1 and step.js_before == 0.40
    assert step.error == pytest.approx(cfg.pid.rho_target - 0.9 + cfg.pid.mu)
    assert written[0].step["sycophancy"] == 1
