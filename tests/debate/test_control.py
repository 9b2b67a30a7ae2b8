"""JSD against scipy, and the PID controller against hand-computed steps."""

import numpy as np
import pytest
from scipy.spatial.distance import jensenshannon
from scipy.stats import entropy

from debate.control import PIDConfig, PIDState, cash_spread, jsd, pairwise_js, pid_step, quadrant


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
    # step 1: ρ̄=0.7, JS=0.4, no previous JS → s=0; e=0.1; I=0.1; D=0; u=0.05+0.01=0.06; v=0.03; β=0.53
    s1, r1 = pid_step(s0, 0.7, 0.4, cfg)
    assert (r1.sycophancy, r1.error, r1.integral, r1.derivative) == (0, pytest.approx(0.1), pytest.approx(0.1), 0.0)
    assert r1.u == pytest.approx(0.06) and r1.beta_after == pytest.approx(0.53) and r1.quadrant == "chaotic"
    # step 2: ρ̄=0.75, JS=0.1 < 0.5·0.4 → s=1; e=0.05+0.3=0.35; I=clip(0.45)=0.15; D=0.25
    # u=0.175+0.015+0.05=0.24; v=0.5·0.03+0.5·0.24=0.135; β=0.665
    s2, r2 = pid_step(s1, 0.75, 0.1, cfg)
    assert r2.sycophancy == 1 and r2.error == pytest.approx(0.35) and r2.integral == pytest.approx(0.15)
    assert r2.derivative == pytest.approx(0.25) and r2.u == pytest.approx(0.24) and r2.beta_after == pytest.approx(0.665)
    assert r2.quadrant == "chaotic"  # JS 0.1 ≥ δ_JS (diverse), ρ̄ below ρ*
    # step 3: ρ̄=0.9, JS=0.01 (not < 0.5·0.1? 0.01 < 0.05 → s=1); e=−0.1+0.3=0.2; I=clip(0.35)=0.15; D=−0.15
    # u=0.1+0.015−0.03=0.085; v=0.5·0.135+0.5·0.085=0.11; β=0.775; |Δρ̄|=0.15 → no early stop
    s3, r3 = pid_step(s2, 0.9, 0.01, cfg)
    assert r3.u == pytest.approx(0.085) and r3.beta_after == pytest.approx(0.775) and not r3.early_stop
    assert r3.quadrant == "converged"
    # step 4: ρ̄=0.905, JS=0.015 (no sharp drop) → e=−0.105; early stop: JS < ε and |Δρ̄| = 0.005 < Δρ
    s4, r4 = pid_step(s3, 0.905, 0.015, cfg)
    assert r4.sycophancy == 0 and r4.error == pytest.approx(-0.105) and r4.early_stop


def test_beta_is_clipped_and_disabled_pid_holds_beta():
    cfg = PIDConfig(kp=10, ki=0, kd=0, momentum=0, rho_target=0.9)
    state, step = pid_step(PIDState(beta=0.5), 0.1, 0.5, cfg)
    assert step.beta_after == 1.0
    _, step = pid_step(PIDState(beta=0.5), 1.0, 0.5, cfg.model_copy(update={"rho_target": 0.0}))
    assert step.beta_after == 0.0
    _, step = pid_step(PIDState(beta=0.4), 0.1, 0.5, cfg.model_copy(update={"enabled": False}))
    assert step.beta_after == 0.4


def test_quadrants():
    cfg = PIDConfig(rho_target=0.8, delta_js=0.1)
    assert [quadrant(j, r, cfg) for j, r in ((0.2, 0.9), (0.05, 0.9), (0.2, 0.5), (0.05, 0.5))] == \
        ["healthy", "converged", "chaotic", "stuck"]
