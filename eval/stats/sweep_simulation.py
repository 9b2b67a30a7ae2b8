"""Sweeps simulated, no LLM call: what a design does under given arm effects (``madbench bench sweep``, and the dry
run's expected runs).

Scenario s gives arm j the paired difference d_sj = δ_j + √ρ·u_s + √(1 − ρ)·e_sj, u and e independent N(0, 1): each
arm's differences have variance 1 (δ_j is its standardised effect d_z), and two arms' differences correlate ρ through
the shared control (ρ = 1/2 for equal noise in every config). With ``icc`` and each scenario's quarter, a quarter
effect common to every arm's difference is added, x = δ + √icc·q_g + √(1 − icc)·(…), and the looks take the
quarter-clustered t, as the runner does. Each sweep runs the runner's rules look by look
(``sweep_design.decide``) on the t of every arm still sampled, then reports what the runner reports.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from madbench.eval.stats.clustered import cr2_se_df
from madbench.eval.stats.group_sequential import look_df, t_to_z, z_to_t
from madbench.eval.stats.sweep_design import SweepDesign, adjusted_p, decide, simultaneous_ci


@dataclass(frozen=True)
class Rules:
    """What the sweep does beside its bounds: the selection margin (d_z behind the leader; None: no selection drop)
    and whether an arm declared better stops (``stop``) or goes on while others race (``continue``)."""
    margin: float | None = None
    on_efficacy: str = "stop"


def draw(sweeps: int, n_max: int, effects: np.ndarray, correlation: float, rng: np.random.Generator,
         clusters=None, icc: float = 0.0) -> np.ndarray:
    """Scenario differences of every arm, shape (sweeps, arms, scenarios) (module docstring)."""
    effects = np.asarray(effects, float)
    arms = len(effects)
    shared = rng.standard_normal((sweeps, 1, n_max))
    own = rng.standard_normal((sweeps, arms, n_max))
    x = math.sqrt(correlation) * shared + math.sqrt(1.0 - correlation) * own
    if clusters is not None and icc > 0:
        _, codes = np.unique(np.asarray(clusters)[:n_max], return_inverse=True)
        quarter = rng.standard_normal((sweeps, 1, int(codes.max()) + 1))[:, :, codes]
        x = math.sqrt(icc) * quarter + math.sqrt(1.0 - icc) * x
    return x + effects[None, :, None]


def look_stats(x: np.ndarray, size: int, clusters=None) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """(d̄, SE, sd, df) of every (sweep, arm) on the first ``size`` scenarios: the ordinary paired t's, or the
    quarter-clustered CR2 one where ``clusters`` span two quarters (as ``group_sequential.take_look``)."""
    part = x[..., :size]
    mean, sd = part.mean(-1), part.std(-1, ddof=1)
    labels = None if clusters is None else np.asarray(clusters)[:size]
    if labels is None or len(set(labels.tolist())) < 2:
        return mean, sd / math.sqrt(size), sd, float(size - 1)
    _, se, df, _ = cr2_se_df(part.reshape(-1, size), labels)
    return mean, se.reshape(mean.shape), sd, float(df)


@dataclass
class _Race:
    """What the looks of ``sweeps`` simulated sweeps decided: each arm's decision code and look, whether it was
    declared better, the last look it was sampled at, and every look's (d̄, SE, t) and df."""
    declared: np.ndarray
    decided_at: np.ndarray
    last: np.ndarray
    means: np.ndarray
    ses: np.ndarray
    ts: np.ndarray
    dfs: np.ndarray


def _race(d: SweepDesign, x: np.ndarray, rules: Rules, clusters=None) -> _Race:
    """The runner's rules look by look (``sweep_design.decide``) on every sweep's arms at once."""
    sweeps, arms, _ = x.shape
    racing = np.ones((sweeps, arms), bool)
    running = racing.copy()
    declared = np.zeros((sweeps, arms), bool)
    decided_at = np.full((sweeps, arms), d.looks - 1)
    last = np.zeros((sweeps, arms), int)
    stats_at = []
    for k in range(d.looks):
        mean, se, sd, df = look_stats(x, int(d.n[k]), clusters)
        with np.errstate(divide="ignore", invalid="ignore"):
            t = mean / se
            es = mean / sd
        stats_at.append((mean, se, t, df))
        last[running] = k
        dec = decide(d, k + 1, t, df, es, racing & running, rules.margin, declared)
        new = dec > 0
        decided_at[new] = k
        declared |= dec == 1
        racing &= ~new
        running &= ~(np.isin(dec, (2, 3, 4)) | ((dec == 1) & (rules.on_efficacy == "stop")))
        running &= racing.any(1, keepdims=True)  # no arm racing: the sweep ends, the continuing arms with it
    means, ses, ts = (np.stack([s[i] for s in stats_at], -1) for i in range(3))
    return _Race(declared, decided_at, last, means, ses, ts, np.array([s[3] for s in stats_at]))


def simulate(d: SweepDesign, effects, sweeps: int, rng: np.random.Generator, correlation: float = 0.5,
             rules: Rules = Rules(), clusters=None, icc: float = 0.0) -> dict:
    """``sweeps`` sweeps of design ``d`` on arms of standardised effects ``effects`` (module docstring): the
    family-wise error (any arm with δ ≤ 0 declared better), each better arm's power, the chance of selecting the best
    arm, the runs used against the fixed grid's, the simultaneous CIs' joint coverage, and the naive figures (each arm's
    unadjusted one-sided t-test at α at the look that stopped it, and its unadjusted 1 − α interval)."""
    effects = np.asarray(effects, float)
    n = np.asarray(d.n)
    r = _race(d, draw(sweeps, int(n[-1]), effects, correlation, rng, clusters, icc), rules, clusters)
    return _report(d, effects, r)


def _report(d: SweepDesign, effects: np.ndarray, r: _Race) -> dict:
    """``simulate``'s figures from what the looks decided: the adjusted p at each arm's deciding look, the
    simultaneous CI at the last look it was sampled, and the naive figures beside them."""
    from scipy.stats import t as student
    sweeps, arms = r.declared.shape
    n = np.asarray(d.n)
    rows, cols = np.arange(sweeps)[:, None], np.arange(arms)[None, :]
    t_dec = r.ts[rows, cols, r.decided_at]
    p_adj = np.ones((sweeps, arms))
    m_last, se_last = r.means[rows, cols, r.last], r.ses[rows, cols, r.last]
    low, high = np.empty_like(m_last), np.empty_like(m_last)
    for k in range(d.looks):
        if (sel := r.decided_at == k).any():
            p_adj[sel] = adjusted_p(d, k + 1, t_to_z(t_dec[sel], r.dfs[k]))
        sel = r.last == k
        low[sel], high[sel] = simultaneous_ci(d, m_last[sel], se_last[sel], r.dfs[k], k + 1)
    naive_half = student.ppf(1 - d.alpha / 2, r.dfs[r.last]) * se_last
    naive_covers = ((m_last - naive_half <= effects) & (effects <= m_last + naive_half)).all(1)
    naive_reject = student.sf(t_dec, r.dfs[r.decided_at]) < d.alpha
    control = n[r.last.max(1)]
    runs = n[r.last].sum(1) + control
    fixed = (arms + 1) * n[-1]
    null, declared = effects <= 0, r.declared
    better = ~null
    out = {"fwer": float((declared & null).any(1).mean()) if null.any() else math.nan,
           "naive_fwer": float((naive_reject & null).any(1).mean()) if null.any() else math.nan,
           "power_per_better_arm": float(declared[:, better].mean()) if better.any() else math.nan,
           "any_better_declared": float((declared & better).any(1).mean()) if better.any() else math.nan,
           "runs": float(runs.mean()), "fixed_runs": int(fixed), "share_of_fixed": float(runs.mean() / fixed),
           "scenarios_control": float(control.mean()),
           "ci_covers_all": float(((low <= effects) & (effects <= high)).all(1).mean()),
           "naive_ci_covers_all": float(naive_covers.mean()),
           "adjusted_p_agrees": float(((p_adj <= d.alpha) == declared).mean()),
           "decided_by_look": [float((r.decided_at == k).mean()) for k in range(d.looks)]}
    if better.any():
        pick = np.where(declared, m_last, -np.inf).argmax(1)
        out["select_best"] = float((declared.any(1) & np.isin(pick, np.flatnonzero(effects == effects.max()))).mean())
        out["power_by_effect"] = {f"{e:g}": float(declared[:, effects == e].mean()) for e in sorted(set(effects[better]))}
    return out


def expected_runs(d: SweepDesign, effects, sweeps: int = 2000, seed: int = 0, correlation: float = 0.5,
                  rules: Rules = Rules(), clusters=None) -> dict:
    """The runs a sweep uses on average (per replicate) under ``effects``, by ``simulate`` with a fixed seed."""
    out = simulate(d, effects, sweeps, np.random.default_rng(seed), correlation, rules, clusters)
    return {k: out[k] for k in ("runs", "fixed_runs", "share_of_fixed", "fwer", "power_per_better_arm")}


def planned_df(n, clusters=None) -> list[float]:
    """Each look's df: n_k − 1, or the quarter-clustered t's on the first n_k scenarios' ``clusters``."""
    return [float(k - 1) if clusters is None else look_df(list(clusters)[:k]) for k in n]


__all__ = ["Rules", "draw", "expected_runs", "look_stats", "planned_df", "simulate", "z_to_t"]
