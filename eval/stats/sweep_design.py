"""Multi-arm multi-stage (MAMS) sweeps: m arms against one shared control, looked at together, with the family-wise
error held in the strong sense.

Arm j's statistic at look k is the paired t on the first n_k scenario differences d_ij = arm_j − control (scenario
means; quarter-clustered where the scenarios span quarters, as ``group_sequential.take_look``). Its large-sample form
is Z_jk = S_jk/√I_k with S_j a Brownian motion in information I_k = n_k (Jennison & Turnbull 2000, §3.1), and the arms
share the control's noise: with equal allocation and equal variances, corr(Z_jk, Z_lk) = ρ = 1/2 (Dunnett 1955,
JASA 50(272): the many-to-one correlation λ_j λ_l with λ = √(n_0/(n_0 + n_j)) for independent arms; in the paired
form, corr(d_ij, d_il) = Var(control)/Var(d)), and corr(Z_jk, Z_jl) = √(I_k/I_l) for k ≤ l. So

  Z_jk = √ρ · W_k + √(1 − ρ) · V_jk,     W, V_1, …, V_m independent canonical group-sequential paths.

Efficacy is one-sided: arm j is declared better at look k when Z_jk ≥ u_k. Two rules give the u_k:

- ``mams``, the generalised Dunnett boundary of Magirr, Jaki & Whitehead (2012, Biometrika 99(2)) with a
  Lan–DeMets (1983) spending shape on the family: with M_k = max_j Z_jk under the global null,

    P_0(M_1 < u_1, …, M_{k−1} < u_{k−1}, M_k ≥ u_k) = α(t_k) − α(t_{k−1}),

  solved look by look as empirical quantiles of ``MC_PATHS`` simulated null paths (fixed seed ``MC_SEED``): each
  crossing probability is within ±2·√(α(1−α)/N) ≈ ±0.0006 of its target at α = 0.05. The correlation ρ is the design
  value (default 1/2), not estimated from the data: a true correlation above it makes the bound conservative
  (Slepian 1962), below it anti-conservative; the record shows the looks' estimated correlation beside it.
- ``bonferroni``: α/m to each arm, each spent by the same Lan–DeMets shape (the exact single-arm recursion of
  ``group_sequential``); valid whatever the correlation (Boole's inequality), a little less powerful.

Strong control: arm j's statistic depends on d_j alone, whose law does not depend on the other arms' effects, and
every stop (futility, the selection rule, another arm's decision) only removes looks. A false declaration of a null
arm j at look k implies Z_jk ≥ u_k on j's full, never-stopped path, so for any configuration of effects
P(any null arm declared better) ≤ P_0(∃ j ∈ nulls, k: Z_jk ≥ u_k) ≤ α: the global null, all m arms never stopped, is the
least favourable case (Magirr et al. 2012, §3). Futility is therefore non-binding, and so is dropping the losers.

Futility, per arm (non-binding): β-spending under the planned effect θ through the same spending shape, on arm j's
single path (``group_sequential.futility_bounds`` with the u_k as the efficacy bound), β chosen so that one arm's power
at θ is the planned power where the maximum allows more (as ``group_sequential.make_design``).

Small samples: as ``group_sequential``, every z bound is moved to the t scale at each look's df by its tail
probability, c^t_k = F_t^{−1}(Φ(c_k); ν_k).

Inference (each arm at the look that decided it):
- adjusted p: the stagewise ordering on the family's maximum (J&T §8.4; Dunnett's single-step adjusted p when
  K = 1): p_j = Σ_{l<k} (α(t_l) − α(t_{l−1})) + P_0(M_l < u_l for l < k, M_k ≥ z_jk) under ``mams``, and
  m × the single-arm stagewise p under ``bonferroni``; an arm that did not cross gets at least α, so p_j ≤ α exactly
  when it was declared better.
- simultaneous confidence interval: the repeated CI of J&T ch. 9 with the family's two-sided constants c_k,
  P_0(max_j |Z_jk| ≥ c_k first at k) = α(t_k) − α(t_{k−1}): d̄_jk ± c^t_k · SE_jk. Every arm's interval at every look
  covers its effect together with probability ≥ 1 − α, so those at the looks that decided them do too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from madbench.eval.stats.group_sequential import (
    SPENDING,
    Design,
    _advance,
    _solve,
    _upper_tail,
    design_power,
    efficacy_bounds,
    futility_bounds,
    z_to_t,
)

#: Simulated global-null paths behind a ``mams`` boundary, and their seed: the boundary is a fixed function of the
#: design (the same on every machine), each crossing probability within ±0.0006 (2 SE) of its target at α = 0.05.
MC_PATHS = 400_000
MC_SEED = 20120601
#: Paths drawn at once (memory: arms × looks × this many float64).
MC_CHUNK = 50_000
RULES = ("mams", "bonferroni")


@dataclass(frozen=True)
class SweepDesign:
    """A sweep's design: looks at ``n`` complete scenarios, one-sided efficacy bounds ``efficacy`` (z scale, the same
    for every arm), the simultaneous CI's two-sided constants ``ci``, per-arm futility bounds (or None)."""
    n: tuple[int, ...]
    arms: int
    alpha: float
    rule: str
    spending: str
    correlation: float
    efficacy: tuple[float, ...]
    ci: tuple[float, ...]
    futility: tuple[float, ...] | None = None
    #: The planned standardised effect d_z of a better arm, the power one arm has there (its futility obeyed, no
    #: selection rule), and the β its futility bound spends.
    effect: float = 0.5
    power: float = float("nan")
    beta: float = 0.0
    #: Each look's planned df of the t (None: large-sample).
    df: tuple[float, ...] | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def looks(self) -> int:
        return len(self.n)

    def bounds_t(self, df) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """(efficacy, CI constant, futility) at each look on the t scale of ``df`` (one per look, or a matrix whose
        last axis is the looks)."""
        df = np.asarray(df, float)
        fut = None if self.futility is None else z_to_t(np.asarray(self.futility), df)
        return z_to_t(np.asarray(self.efficacy), df), z_to_t(np.asarray(self.ci), df), fut

    def single_arm(self) -> Design:
        """One arm's group-sequential design: its efficacy bound u_k, its futility (``group_sequential.Design``)."""
        return Design(self.n, self.alpha, self.spending, self.efficacy, self.futility, 1, self.effect, self.beta,
                      self.power, df=self.df)


def _increments(n) -> np.ndarray:
    info = np.asarray(n, float)
    return np.diff(np.concatenate([[0.0], info]))


@lru_cache(maxsize=32)
def _null_maxima(n: tuple[int, ...], arms: int, correlation: float) -> tuple[np.ndarray, np.ndarray]:
    """(max_j Z_jk, max_j |Z_jk|) for ``MC_PATHS`` global-null paths (rows) at each look (columns), float32."""
    rng = np.random.default_rng(MC_SEED)
    info, step = np.asarray(n, float), np.sqrt(_increments(n))
    up = np.empty((MC_PATHS, len(n)), np.float32)
    both = np.empty((MC_PATHS, len(n)), np.float32)
    a, b = math.sqrt(correlation), math.sqrt(1.0 - correlation)
    for lo in range(0, MC_PATHS, MC_CHUNK):
        size = min(MC_CHUNK, MC_PATHS - lo)
        shared = np.cumsum(rng.standard_normal((size, 1, len(n))) * step, -1)
        own = np.cumsum(rng.standard_normal((size, arms, len(n))) * step, -1)
        z = (a * shared + b * own) / np.sqrt(info)
        up[lo:lo + size] = z.max(1)
        both[lo:lo + size] = np.abs(z).max(1)
    return up, both


def _quantile_bounds(maxima: np.ndarray, spend: np.ndarray) -> np.ndarray:
    """Bounds c_k with P̂(M_l < c_l for l < k, M_k ≥ c_k) = spend_k − spend_{k−1} on the simulated maxima (the
    midpoint between the simulated values either side of the target count)."""
    going = np.ones(len(maxima), bool)
    out = np.zeros(maxima.shape[1])
    for k in range(maxima.shape[1]):
        target = spend[k] - (spend[k - 1] if k else 0.0)
        alive = np.sort(maxima[going, k])[::-1].astype(float)
        count = int(round(target * len(maxima)))
        if not len(alive) or count >= len(alive):
            raise ValueError("the spending leaves no simulated path to spend on: too many looks for MC_PATHS")
        out[k] = alive[0] + 1e-6 if count == 0 else 0.5 * (alive[count - 1] + alive[count])
        going &= maxima[:, k] < out[k]
    return out


def family_bounds(n, arms: int, alpha: float, rule: str, spending: str, correlation: float) -> tuple[np.ndarray, np.ndarray]:
    """(one-sided efficacy u_k, two-sided simultaneous constants c_k) on the z scale (module docstring)."""
    n = tuple(int(x) for x in n)
    t = np.asarray(n, float) / n[-1]
    if rule == "bonferroni":
        return efficacy_bounds(np.asarray(n, float), 2 * alpha / arms, spending), efficacy_bounds(
            np.asarray(n, float), alpha / arms, spending)
    if rule != "mams":
        raise ValueError(f"unknown rule {rule!r} (one of {', '.join(RULES)})")
    up, both = _null_maxima(n, arms, round(float(correlation), 6))
    spend = SPENDING[spending](t, alpha)
    return _quantile_bounds(up, spend), _quantile_bounds(both, spend)


def make_sweep(n: list[int], arms: int, alpha: float = 0.05, rule: str = "mams", spending: str = "pocock",
               correlation: float = 0.5, futility: bool = True, effect: float = 0.5, power: float = 0.8,
               df=None) -> SweepDesign:
    """The sweep's design: ``family_bounds`` and, with ``futility``, per-arm non-binding β-spending futility bounds for
    ``effect`` whose β makes one arm's power there ``power`` (or β = 1 − power where the maximum gives less)."""
    if arms < 1:
        raise ValueError("a sweep needs at least one arm")
    u, c = family_bounds(n, arms, alpha, rule, spending, correlation)
    df_t = None if df is None else tuple(float(x) for x in df)
    base = SweepDesign(tuple(int(x) for x in n), arms, alpha, rule, spending, correlation, tuple(float(x) for x in u),
                       tuple(float(x) for x in c), None, effect, df=df_t)
    plain = design_power(base.single_arm(), effect)[0]
    if not futility:
        return SweepDesign(**{**base.__dict__, "power": plain})
    info = np.asarray(n, float)

    def with_beta(beta: float) -> SweepDesign:
        f = futility_bounds(info, u, effect, beta, spending)
        d = SweepDesign(**{**base.__dict__, "futility": tuple(float(x) for x in f), "beta": beta})
        return SweepDesign(**{**d.__dict__, "power": design_power(d.single_arm(), effect)[0]})
    if plain <= power:
        note = (f"one arm has power {plain:.3f} at d_z = {effect:g} even without futility stops, short of {power:g}: "
                f"futility spends β = {1 - power:g}")
        return SweepDesign(**{**with_beta(1.0 - power).__dict__, "notes": (note,)})
    beta = _solve(lambda b: with_beta(b).power - power, 1e-6, 0.999)
    return with_beta(beta)


def _single_p(d: SweepDesign, look: int, z: np.ndarray) -> np.ndarray:
    """One arm's one-sided stagewise p at ``look`` (1-based) with statistic ``z``: the efficacy crossings before it
    plus P_0(no crossing before, Z_k ≥ z), continuation regions Z_l < u_l (the AMR recursion)."""
    info, u = np.asarray(d.n, float), np.asarray(d.efficacy)
    prev, earlier = None, 0.0
    for k in range(look - 1):
        earlier += float(_upper_tail(prev, info[k], 0.0, u[k] * math.sqrt(info[k])))
        prev = _advance(prev, info[k], 0.0, -12.0, u[k])
    i = info[look - 1]
    return earlier + _upper_tail(prev, i, 0.0, np.asarray(z, float) * math.sqrt(i))


def adjusted_p(d: SweepDesign, look: int, z) -> np.ndarray:
    """The family-adjusted one-sided p of an arm decided at ``look`` (1-based) with z-scale statistic ``z`` (module
    docstring); at least α where ``z`` is below the efficacy bound. Vectorised over ``z``."""
    z = np.asarray(z, float)
    if d.rule == "bonferroni":
        p = np.minimum(1.0, d.arms * _single_p(d, look, z))
    else:
        up, _ = _null_maxima(d.n, d.arms, round(float(d.correlation), 6))
        u = np.asarray(d.efficacy)
        going = np.ones(len(up), bool)
        for k in range(look - 1):
            going &= up[:, k] < u[k]
        earlier = 1.0 - going.mean()
        alive = np.sort(up[going, look - 1])
        p = earlier + (len(alive) - np.searchsorted(alive, z, side="left")) / len(up)
    return np.where(z >= d.efficacy[look - 1], p, np.maximum(p, np.nextafter(d.alpha, 1.0)))


def simultaneous_ci(d: SweepDesign, diff, se, df, look: int) -> tuple[np.ndarray, np.ndarray]:
    """The simultaneous repeated CI d̄ ± c^t_k · SE at ``look`` (1-based), c^t the family's two-sided constant moved
    to the t scale at ``df`` (module docstring)."""
    c = z_to_t(d.ci[look - 1], np.asarray(df, float))
    half = c * np.asarray(se, float)
    return np.asarray(diff, float) - half, np.asarray(diff, float) + half


#: What a look decides for an arm still in the race.
DECISIONS = ("racing", "efficacy", "futility", "dropped", "final")


def decide(d: SweepDesign, look: int, t: np.ndarray, df_k: float, effect_size: np.ndarray, racing: np.ndarray,
           select_margin: float | None, declared: np.ndarray | None = None) -> np.ndarray:
    """Each arm's decision code (index in ``DECISIONS``) at ``look`` (1-based), the t's of every arm on the last axis
    (leading axes: independent sweeps), ``df_k`` the look's df: for arms ``racing``, ``efficacy`` when t ≥ u^t_k; else
    ``futility`` when t < f^t_k (not at the last look); else, with a selection margin, ``dropped`` when the arm's
    estimated d_z (``effect_size``) is more than the margin below the leader's among the arms racing or declared
    better (``declared``); else ``final`` at the last look, ``racing`` (0) before it. Arms not racing get 0."""
    k = look - 1
    eff_k = float(z_to_t(d.efficacy[k], df_k))
    out = np.zeros(t.shape, int)
    crossed = racing & (t >= eff_k)
    out[crossed] = 1
    last = look == d.looks
    if d.futility is not None and not last:
        out[racing & ~crossed & (t < float(z_to_t(d.futility[k], df_k)))] = 2
    if select_margin is not None and not last:
        pool = racing | (declared if declared is not None else np.zeros_like(racing))
        lead = np.where(pool, effect_size, -np.inf).max(-1, keepdims=True)
        with np.errstate(invalid="ignore"):  # an infinite d_z (no spread) behind an infinite leader is not behind
            behind = np.nan_to_num(lead - effect_size, nan=0.0) > select_margin
        out[racing & (out == 0) & behind] = 3
    if last:
        out[racing & (out == 0)] = 4
    return out
