"""Divergence and control: pure functions with small state objects (PAPER_NOTES §3, paper §2.4 and §3.5.1).

* Generalised Jensen–Shannon divergence of n allocations (base 2, in [0, 1]):
      JSD(P_1..P_n) = H(mean_i P_i) − mean_i H(P_i),   H(P) = −Σ_k p_k log2 p_k
  which for n = 2 equals scipy's ``jensenshannon(p, q, base=2) ** 2``.
* PID on reasoning quality (RAudit; PAPER_NOTES §3 "PID"):
      e_t = (ρ* − ρ̄_t) + μ·s_t
      I_t = clip(I_{t−1} + e_t, −I_max, I_max)
      u_t = Kp·e_t + Ki·I_t + Kd·(e_t − e_{t−1})
      v_t = m·v_{t−1} + (1 − m)·u_t                  (momentum)
      β_{t+1} = clip(β_t + v_t, β_min, β_max)
  Quality below target (e > 0) raises β: critiques become more contentious.
* Sycophancy flag s_t, "a sharp JS drop" (PAPER_NOTES §3) over round t's critique → revise step:
      s_t = 1  if  JS_{t−1} > 0  and  JS_t < r·JS_{t−1},  else 0        (r = ``sycophancy_ratio``)
  where JS_t is the divergence of round t's revisions and JS_{t−1} that of the allocations they revised:
  JS_0 is the divergence of the proposals, so s_1 compares the first revision with the proposals. That is
  where the paper sees the drop: "The largest JSD drop occurs between the initial proposal and the first
  revision" (paper §3.5.1).
* Quadrant: div = JS_t ≥ δ_JS, qual = ρ̄_t ≥ ρ*; healthy (div, qual), converged
  (¬div, qual), chaotic (div, ¬qual), stuck (¬div, ¬qual).
* Early stop on convergence only (paper §2.4: 'PID early stop is triggered ("converged" quadrant with high
  reasoning quality and low diversity, JSD_t < ε and |ρ̄_t − ρ̄_{t−1}| < Δρ)'):
      stop_t = [quadrant_t = converged] ∧ JS_t < ε ∧ |ρ̄_t − ρ̄_{t−1}| < Δρ
  so low divergence with quality below ρ* (stuck) never stops the debate, and round 1 (no ρ̄_0) never does.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field


def _as_distributions(allocations: Sequence[dict[str, float]], cash: Sequence[float] | None = None) -> np.ndarray:
    """Rows over the union of tickers (plus a cash column when any cash is held), each summing to 1."""
    keys = sorted({k for a in allocations for k in a})
    m = np.array([[a.get(k, 0.0) for k in keys] for a in allocations], dtype=float)
    if cash is not None and any(c > 0 for c in cash):
        m = np.column_stack([m, np.asarray(cash, dtype=float)])
    if (m < -1e-12).any():
        raise ValueError("allocations must be non-negative")
    sums = m.sum(axis=1, keepdims=True)
    if (sums <= 0).any():
        raise ValueError("every allocation needs positive total weight")
    return np.clip(m, 0.0, None) / sums


def entropy2(p: np.ndarray) -> float:
    p = p[p > 0]
    return float(-(p * np.log2(p)).sum())


def jsd(allocations: Sequence[dict[str, float]], cash: Sequence[float] | None = None) -> float:
    """Generalised JSD, base 2, in [0, 1] for two distributions (≤ log2 n for n)."""
    if len(allocations) < 2:
        return 0.0
    m = _as_distributions(allocations, cash)
    return max(0.0, entropy2(m.mean(axis=0)) - float(np.mean([entropy2(row) for row in m])))


def pairwise_js(allocations: dict[str, dict[str, float]]) -> dict[str, float]:
    """JSD of every pair of agents, keyed "a|b" (sorted)."""
    return {f"{a}|{b}": jsd([allocations[a], allocations[b]]) for a, b in combinations(sorted(allocations), 2)}


def cash_spread(cash: Sequence[float]) -> float:
    """Cash convergence: the range of cash weights across agents (0 when all hold the same cash)."""
    return float(max(cash) - min(cash)) if cash else 0.0


class PIDConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    enabled: bool = True
    kp: float = 0.8
    ki: float = 0.1
    kd: float = 0.2
    rho_target: float = Field(0.85, ge=0, le=1, description="ρ*")
    mu: float = Field(0.2, ge=0, description="weight of the sycophancy flag in the error")
    integral_clamp: float = Field(1.0, gt=0)
    momentum: float = Field(0.5, ge=0, lt=1)
    beta0: float = Field(0.5, ge=0, le=1)
    beta_min: float = Field(0.0, ge=0, le=1)
    beta_max: float = Field(1.0, ge=0, le=1)
    #: r: revisions whose JS falls below this fraction of the JS of what they revised flag sycophancy (s_t = 1).
    sycophancy_ratio: float = Field(0.5, gt=0, le=1)
    delta_js: float = Field(0.10, ge=0, description="δ_JS: divergence above which agents count as diverse")
    epsilon: float = Field(0.02, ge=0, description="ε: early stop when converged, JS falls below it …")
    delta_rho: float = Field(0.01, ge=0, description="Δρ: … and ρ̄ moved less than this")


class PIDState(BaseModel):
    model_config = ConfigDict(extra="forbid")
    beta: float
    integral: float = 0.0
    prev_error: float | None = None
    velocity: float = 0.0
    prev_rho: float | None = None


class PIDStep(BaseModel):
    """Everything one controller step computed (stored in the trace)."""

    rho_bar: float
    js: float
    #: JS_{t−1}: the divergence of the allocations this round revised (the proposals in round 1).
    js_before: float
    sycophancy: int
    error: float
    integral: float
    derivative: float
    u: float
    beta_before: float
    beta_after: float
    quadrant: str
    early_stop: bool


def quadrant(js: float, rho_bar: float, cfg: PIDConfig) -> str:
    div, qual = js >= cfg.delta_js, rho_bar >= cfg.rho_target
    return {(True, True): "healthy", (False, True): "converged", (True, False): "chaotic", (False, False): "stuck"}[(div, qual)]


def sycophancy_flag(js: float, js_before: float, cfg: PIDConfig) -> int:
    """s_t = 1 when JS_t < r·JS_{t−1} (and JS_{t−1} > 0): round t's revisions (``js``) against what they revised
    (``js_before``: the proposals in round 1, the previous round's revisions after)."""
    return int(js_before > 0 and js < cfg.sycophancy_ratio * js_before)


def converged_stop(js: float, rho_bar: float, prev_rho: float | None, cfg: PIDConfig) -> bool:
    """stop_t = [converged quadrant] ∧ JS_t < ε ∧ |ρ̄_t − ρ̄_{t−1}| < Δρ (paper §2.4); never without a ρ̄_{t−1}."""
    return (quadrant(js, rho_bar, cfg) == "converged" and js < cfg.epsilon
            and prev_rho is not None and abs(rho_bar - prev_rho) < cfg.delta_rho)


def pid_step(state: PIDState, rho_bar: float, js: float, cfg: PIDConfig, *, js_before: float) -> tuple[PIDState, PIDStep]:
    """One controller update after round t; returns the new state and the record of the step.

    ``js`` is JS_t, the divergence of round t's revisions; ``js_before`` is JS_{t−1}, the divergence of the
    allocations those revisions revised (the proposals in round 1)."""
    s = sycophancy_flag(js, js_before, cfg)
    e = (cfg.rho_target - rho_bar) + cfg.mu * s
    integral = min(cfg.integral_clamp, max(-cfg.integral_clamp, state.integral + e))
    derivative = 0.0 if state.prev_error is None else e - state.prev_error
    u = cfg.kp * e + cfg.ki * integral + cfg.kd * derivative
    velocity = cfg.momentum * state.velocity + (1 - cfg.momentum) * u
    beta = min(cfg.beta_max, max(cfg.beta_min, state.beta + velocity)) if cfg.enabled else state.beta
    step = PIDStep(rho_bar=rho_bar, js=js, js_before=js_before, sycophancy=s, error=e, integral=integral,
                   derivative=derivative, u=u, beta_before=state.beta, beta_after=beta,
                   quadrant=quadrant(js, rho_bar, cfg), early_stop=converged_stop(js, rho_bar, state.prev_rho, cfg))
    new = PIDState(beta=beta, integral=integral, prev_error=e, velocity=velocity, prev_rho=rho_bar)
    return new, step
