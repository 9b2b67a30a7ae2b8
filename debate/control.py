"""Divergence and control: pure functions with small state objects (PAPER_NOTES §3).

* Generalised Jensen–Shannon divergence of n allocations (base 2, in [0, 1]):
      JSD(P_1..P_n) = H(mean_i P_i) − mean_i H(P_i),   H(P) = −Σ_k p_k log2 p_k
  which for n = 2 equals scipy's ``jensenshannon(p, q, base=2) ** 2``.
* PID on reasoning quality (RAudit):
      e_t = (ρ* − ρ̄_t) + μ·s_t                      s_t = 1 on a sharp JS drop (sycophancy)
      I_t = clip(I_{t−1} + e_t, −I_max, I_max)
      u_t = Kp·e_t + Ki·I_t + Kd·(e_t − e_{t−1})
      v_t = m·v_{t−1} + (1 − m)·u_t                  (momentum)
      β_{t+1} = clip(β_t + v_t, β_min, β_max)
  Quality below target (e > 0) raises β: critiques become more contentious.
* Quadrant: div = JS_t ≥ δ_JS, qual = ρ̄_t ≥ ρ*; healthy (div, qual), converged
  (¬div, qual), chaotic (div, ¬qual), stuck (¬div, ¬qual).
* Early stop: JS_t < ε and |ρ̄_t − ρ̄_{t−1}| < Δρ.
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
    model_config = ConfigDict(extra="forbid")
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
    #: A JS drop to below this fraction of the previous value flags sycophancy (s_t = 1).
    sycophancy_ratio: float = Field(0.5, gt=0, le=1)
    delta_js: float = Field(0.10, ge=0, description="δ_JS: divergence above which agents count as diverse")
    epsilon: float = Field(0.02, ge=0, description="ε: early stop when JS falls below it …")
    delta_rho: float = Field(0.01, ge=0, description="Δρ: … and ρ̄ moved less than this")


class PIDState(BaseModel):
    model_config = ConfigDict(extra="forbid")
    beta: float
    integral: float = 0.0
    prev_error: float | None = None
    velocity: float = 0.0
    prev_rho: float | None = None
    prev_js: float | None = None


class PIDStep(BaseModel):
    """Everything one controller step computed (stored in the trace)."""

    rho_bar: float
    js: float
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


def sycophancy_flag(js: float, prev_js: float | None, cfg: PIDConfig) -> int:
    return int(prev_js is not None and prev_js > 0 and js < cfg.sycophancy_ratio * prev_js)


def pid_step(state: PIDState, rho_bar: float, js: float, cfg: PIDConfig) -> tuple[PIDState, PIDStep]:
    """One controller update; returns the new state and the record of the step."""
    s = sycophancy_flag(js, state.prev_js, cfg)
    e = (cfg.rho_target - rho_bar) + cfg.mu * s
    integral = min(cfg.integral_clamp, max(-cfg.integral_clamp, state.integral + e))
    derivative = 0.0 if state.prev_error is None else e - state.prev_error
    u = cfg.kp * e + cfg.ki * integral + cfg.kd * derivative
    velocity = cfg.momentum * state.velocity + (1 - cfg.momentum) * u
    beta = min(cfg.beta_max, max(cfg.beta_min, state.beta + velocity)) if cfg.enabled else state.beta
    stop = (state.prev_rho is not None and js < cfg.epsilon and abs(rho_bar - state.prev_rho) < cfg.delta_rho)
    step = PIDStep(rho_bar=rho_bar, js=js, sycophancy=s, error=e, integral=integral, derivative=derivative, u=u,
                   beta_before=state.beta, beta_after=beta, quadrant=quadrant(js, rho_bar, cfg), early_stop=stop)
    new = PIDState(beta=beta, integral=integral, prev_error=e, velocity=velocity, prev_rho=rho_bar, prev_js=js)
    return new, step

