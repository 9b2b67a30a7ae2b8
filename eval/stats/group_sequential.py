"""Group-sequential paired tests: boundaries, their crossing probabilities, and inference after an early stop.

The paired statistic at look k is the t on the first n_k scenario differences d_i (replicates averaged, as
everywhere: ``madbench.eval.stats.units``). Its large-sample form is the canonical joint distribution (Jennison &
Turnbull 2000, *Group Sequential Methods with Applications to Clinical Trials*, §3.1): with information I_k = n_k
and standardised effect θ = δ/σ_d,

  Z_k = S_k / √I_k,   S_k − S_{k−1} ~ N(θ·Δ_k, Δ_k) independently,   Δ_k = I_k − I_{k−1}.

Boundary crossing probabilities are computed by the recursive numerical integration of Armitage, McPherson & Rowe
(1969, JRSS A 132(2)), in J&T's form (ch. 19): the sub-density of S_k over the paths still going,

  g_1(s) = φ((s − θI_1)/√I_1)/√I_1,   g_k(s) = ∫_{C_{k−1}} g_{k−1}(u) φ((s − u − θΔ_k)/√Δ_k)/√Δ_k du,

integrated by Simpson's rule over each continuation region C_k = {s : a_k√I_k < s < b_k√I_k}.

Efficacy boundaries are two-sided and symmetric, each side spending one-sided α/2 through a Lan–DeMets (1983,
Biometrika 70(3)) spending function α(t) of the information fraction t = I_k/I_K:

  O'Brien–Fleming type  α(t) = 2 − 2Φ(z_{1−α/2}/√t)        (here α is the one-sided level)
  Pocock type           α(t) = α·log(1 + (e − 1)·t)

Futility (one-sided, against the declared effect's direction) is non-binding: the efficacy boundaries are computed
as if it did not exist, so ignoring a futility stop never raises the type I error. Its bounds spend β through the
same spending family under the alternative (β-spending, Pampallona & Tsiatis 1994, J&T §7.3) and meet the efficacy
bound at the last look.

Small samples: the statistic is a t with ν_k degrees of freedom (n_k − 1 for the ordinary paired t; the
Satterthwaite df of the quarter-clustered CR2 t, ``madbench.eval.stats.clustered``, where the scenarios share
quarters), so every boundary is moved to the t scale by its tail probability, c^t_k = F_t^{−1}(Φ(c_k); ν_k) (J&T
§3.8's "significance level" approach), and an observed t is read back as z = Φ^{−1}(F_t(t; ν_k)). That keeps the
type I error; under the alternative the t's estimated variance costs power, which a design planned on the t scale
(one that carries its ν_k) counts: each bound b_k is moved to the b'_k at which the normal Z_k ~ N(θ√I_k, 1) crosses
it with the probability the noncentral t crosses b^t_k, Φ(b'_k − θ√I_k) = F_{ν_k, θ√I_k}(b^t_k), and the looks'
correlation is kept canonical: exact at each look alone, within 0.01–0.02 of simulation over five. Clustered
scenarios with intra-quarter correlation ρ carry information I_k = n_k / deff_k, deff_k = 1 + (Σ_g n_g²/n_k − 1)·ρ
(Kish's design effect for the look's quarter sizes).

After a stop, the inference accounts for the looks (J&T ch. 8 and 9): the stagewise-ordering p-value and the
repeated confidence interval.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from madbench.eval.stats.clustered import cr2_se_df

#: Simpson nodes per continuation region: bounds agree with J&T's tables to 1e-4 well before this.
NODES = 401
#: Where a bound search gives up: a z beyond this is no boundary anyone can cross.
Z_MAX = 12.0


def _norm():
    from scipy.stats import norm
    return norm


def ld_obrien_fleming(t: np.ndarray, alpha: float) -> np.ndarray:
    """Lan–DeMets O'Brien–Fleming-type spending, α(t) = 2 − 2Φ(z_{1−α/2}/√t) (one-sided level α; α(0) = 0)."""
    norm = _norm()
    t = np.asarray(t, float)
    with np.errstate(divide="ignore"):
        out = 2.0 - 2.0 * norm.cdf(norm.ppf(1.0 - alpha / 2.0) / np.sqrt(t))
    return np.where(t > 0, out, 0.0)


def ld_pocock(t: np.ndarray, alpha: float) -> np.ndarray:
    """Lan–DeMets Pocock-type spending, α(t) = α·log(1 + (e − 1)·t)."""
    return alpha * np.log1p((math.e - 1.0) * np.asarray(t, float))


#: The spending families a design may name.
SPENDING: dict[str, Callable[[np.ndarray, float], np.ndarray]] = {
    "obrien-fleming": ld_obrien_fleming,
    "pocock": ld_pocock,
}


def _simpson(a: float, b: float, m: int = NODES) -> tuple[np.ndarray, np.ndarray]:
    """Simpson's rule on [a, b]: m (odd) nodes and their weights."""
    x = np.linspace(a, b, m)
    w = np.ones(m)
    w[1:-1:2], w[2:-1:2] = 4.0, 2.0
    return x, w * (b - a) / (3.0 * (m - 1))


@dataclass(frozen=True)
class _Step:
    """The paths still going after look k: Simpson nodes on the S scale and node weight × sub-density g_k."""
    info: float
    #: E[S_k] under the effect the step was advanced at.
    mean: float
    s: np.ndarray
    mass: np.ndarray


def _upper_tail(prev: _Step | None, info: float, mean: float, x: np.ndarray) -> np.ndarray:
    """P(reach look k, S_k > x) for each x (S scale), E[S_k] = ``mean``, the paths still going after look k − 1 being
    ``prev``."""
    norm = _norm()
    x = np.asarray(x, float)
    if prev is None:
        return norm.sf((x - mean) / math.sqrt(info))
    delta = info - prev.info
    z = (x[..., None] - prev.s - (mean - prev.mean)) / math.sqrt(delta)
    return (prev.mass * norm.sf(z)).sum(-1)


def _reach(prev: _Step | None) -> float:
    return 1.0 if prev is None else float(prev.mass.sum())


def _advance(prev: _Step | None, info: float, mean: float, lo: float, hi: float) -> _Step:
    """The paths still going after look k, whose continuation region is lo < Z_k < hi, E[S_k] = ``mean`` (AMR
    recursion)."""
    norm = _norm()
    root = math.sqrt(info)
    s, w = _simpson(lo * root, hi * root)
    if prev is None:
        dens = norm.pdf((s - mean) / root) / root
    else:
        delta = info - prev.info
        dens = (prev.mass * norm.pdf((s[:, None] - prev.s - (mean - prev.mean)) / math.sqrt(delta))).sum(-1) / math.sqrt(delta)
    return _Step(info, mean, s, w * dens)


def _check_info(info) -> np.ndarray:
    info = np.asarray(info, float)
    if info.ndim != 1 or not len(info) or (info <= 0).any() or (np.diff(info) <= 0).any():
        raise ValueError(f"information levels must be positive and increasing, got {info.tolist()}")
    return info


def stopping_probabilities(info, lower, upper, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """(P(stop at k with Z_k ≥ upper_k), P(stop at k with Z_k ≤ lower_k)) for each look k of a design that goes on
    while lower_k < Z_k < upper_k and stops at the last look whatever Z_K is (its last ``lower``, ``upper`` should
    meet); AMR recursion (module docstring), E[S_k] = θ·I_k."""
    info = _check_info(info)
    mean = theta * info
    up, down = np.zeros(len(info)), np.zeros(len(info))
    prev = None
    for k, i in enumerate(info):
        root = math.sqrt(i)
        reach = _reach(prev)
        up[k] = float(_upper_tail(prev, i, mean[k], upper[k] * root))
        down[k] = reach - float(_upper_tail(prev, i, mean[k], lower[k] * root))
        if k < len(info) - 1:
            prev = _advance(prev, i, mean[k], lower[k], upper[k])
    return up, down


def _solve(f: Callable[[float], float], lo: float, hi: float) -> float:
    from scipy.optimize import brentq
    flo, fhi = f(lo), f(hi)
    if flo * fhi > 0:
        return lo if abs(flo) < abs(fhi) else hi
    return float(brentq(f, lo, hi, xtol=1e-10))


def efficacy_bounds(info, alpha: float = 0.05, spending: str = "obrien-fleming") -> np.ndarray:
    """Two-sided symmetric Lan–DeMets boundaries c_k (reject when |Z_k| ≥ c_k) at two-sided level ``alpha``: each
    side spends α_1(t_k) − α_1(t_{k−1}) of one-sided α/2 at look k, t_k = I_k/I_K,

      P_0(|Z_j| < c_j for j < k, Z_k ≥ c_k) = α_1(t_k) − α_1(t_{k−1}),

    solved look by look with the AMR recursion (Lan & DeMets 1983; J&T §7.2)."""
    info = _check_info(info)
    spend = SPENDING[spending](info / info[-1], alpha / 2.0)
    bounds = np.zeros(len(info))
    prev = None
    for k, i in enumerate(info):
        target = spend[k] - (spend[k - 1] if k else 0.0)
        root = math.sqrt(i)

        def excess(c: float, p: Any = prev, i: float = i, root: float = root, target: float = target) -> float:
            return float(_upper_tail(p, i, 0.0, np.asarray(c * root))) - target

        bounds[k] = _solve(excess, 0.0, Z_MAX)
        prev = _advance(prev, i, 0.0, -bounds[k], bounds[k])
    return bounds


def classic_constant(looks: int, alpha: float = 0.05, kind: str = "obrien-fleming") -> float:
    """The constant C of the classic two-sided tests with ``looks`` equally spaced looks (J&T Tables 2.1 and 2.3):
    Pocock (1977) rejects when |Z_k| ≥ C_P, O'Brien & Fleming (1979) when |Z_k| ≥ C_B·√(K/k), C solving
    P_0(reject at some look) = α."""
    info = np.arange(1, looks + 1, dtype=float)
    shape = np.sqrt(looks / info) if kind == "obrien-fleming" else np.ones(looks)

    def excess(c: float) -> float:
        up, down = stopping_probabilities(info, -c * shape, c * shape, 0.0)
        return float(up.sum() + down.sum()) - alpha  # the last look's "stop" is its rejection region here
    return _solve(excess, 1.0, Z_MAX)


def futility_bounds(info, efficacy: np.ndarray, theta: float, beta: float, spending: str) -> np.ndarray:
    """Non-binding futility bounds f_k on the effect's side (stop when Z_k < f_k), β-spending under the alternative
    θ: P_θ(go on to k, −c_k ≤ Z_k < f_k) = β(t_k) − β(t_{k−1}) with β(t) of the spending family at level β, the
    earlier looks' continuation regions max(−c_j, f_j) < Z_j < c_j; f_K = c_K (Pampallona & Tsiatis 1994)."""
    info = _check_info(info)
    means = theta * info
    spend = SPENDING[spending](info / info[-1], beta)
    f = np.zeros(len(info))
    prev = None
    for k, i in enumerate(info):
        c = efficacy[k]
        if k == len(info) - 1:
            f[k] = c
            break
        root = math.sqrt(i)
        target = spend[k] - (spend[k - 1] if k else 0.0)
        p, mean = prev, float(means[k])
        above_lo = float(_upper_tail(p, i, mean, -c * root))

        def mass(x: float, p=p, i=i, root=root, above_lo=above_lo, target=target, mean=mean) -> float:
            return above_lo - float(_upper_tail(p, i, mean, x * root)) - target
        f[k] = _solve(mass, -c, c)
        prev = _advance(prev, i, mean, max(-c, f[k]), c)
    return f


@dataclass(frozen=True)
class Design:
    """A group-sequential paired design: the planned complete pairs at each look and its boundaries (z scale)."""
    n: tuple[int, ...]
    alpha: float
    spending: str
    #: Two-sided efficacy bound c_k: stop when |Z_k| ≥ c_k.
    efficacy: tuple[float, ...]
    #: Non-binding futility bound f_k on the effect's side (stop when sign·Z_k < f_k); None: no futility stop.
    futility: tuple[float, ...] | None = None
    #: The effect's direction (+1: treatment above control) and its standardised size d_z (0: none declared).
    sign: int = 1
    effect: float = 0.0
    #: The β spent by the futility bounds, and the power the design has at ``effect`` (with its futility).
    beta: float = 0.0
    power: float = float("nan")
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: Each look's planned degrees of freedom of its t (None: the large-sample design, its Z_k normal): the planned
    #: power then counts what the t's estimated variance costs (module docstring).
    df: tuple[float, ...] | None = None
    #: Each look's planned design effect of the scenarios' clustering (information n_k / deff_k; None: independent).
    deff: tuple[float, ...] | None = None
    #: The effect d_z at which the design (without futility stops) has the power planned for (NaN: not computed).
    detectable: float = float("nan")

    @property
    def looks(self) -> int:
        return len(self.n)

    def lower(self) -> np.ndarray:
        """The continuation region's lower end on the effect's side (z scale, oriented)."""
        c = np.asarray(self.efficacy)
        return c * -1.0 if self.futility is None else np.maximum(-c, np.asarray(self.futility))

    def information(self) -> np.ndarray:
        """I_k = n_k / deff_k."""
        return np.asarray(self.n, float) / (1.0 if self.deff is None else np.asarray(self.deff, float))

    def at_effect(self, bounds, theta: float) -> np.ndarray:
        """z-scale ``bounds`` (one a look) as the normal Z_k ~ N(θ√I_k, 1) must see them for its crossings to keep
        the t's at effect ``theta``: b' = θ√I_k + Φ^{−1}(F_{ν_k, θ√I_k}(b^t_k)), F the noncentral t's distribution
        function (module docstring); unchanged for a large-sample design, and at θ = 0."""
        b = np.asarray(bounds, float)
        if self.df is None or theta == 0:
            return b
        from scipy.stats import nct
        shift, df = theta * np.sqrt(self.information()), np.asarray(self.df, float)
        bt = z_to_t(b, df)
        cdf = nct.cdf(bt, df, shift)
        cdf = np.where(np.isnan(cdf), (bt > shift).astype(float), cdf)  # scipy's NaN far in a tail
        # 8 SD past the mean no path is left: clipped there, the integration grid stays fine
        return shift + np.clip(_norm().ppf(cdf), -8.0, 8.0)


def design_power(d: Design, theta: float) -> tuple[float, float]:
    """(P(reject towards the effect), E[scenarios]) at standardised effect ``theta`` (oriented), futility obeyed."""
    c, n = np.asarray(d.efficacy), np.asarray(d.n, float)
    up, down = stopping_probabilities(d.information(), d.at_effect(d.lower(), theta), d.at_effect(c, theta), theta)
    stop = (up + down)[:-1]  # whatever is still going at the last look stops there
    return float(up.sum()), float(n[-1] - np.dot(n[-1] - n[:-1], stop))


def detectable_effect(d: Design, power: float) -> float:
    """The standardised effect d_z at which ``d``'s efficacy bounds alone (no futility stop) reject towards it with
    probability ``power``."""
    plain = Design(**{**d.__dict__, "futility": None})
    return _solve(lambda theta: design_power(plain, theta)[0] - power, 1e-6, 5.0)


def make_design(n: list[int], alpha: float = 0.05, spending: str = "obrien-fleming", futility: bool = False,
                effect: float = 0.0, power: float = 0.8, df=None, deff=None) -> Design:
    """The design with looks at ``n`` complete pairs: Lan–DeMets efficacy bounds (``efficacy_bounds``) and, when
    ``futility``, non-binding β-spending futility bounds for the standardised ``effect`` d_z (sign: its direction).
    ``df``: each look's planned t degrees of freedom (None: large-sample); ``deff``: each look's design effect.

    The maximum n_K is the batch's, not solved from the power, so the β the futility bounds spend is chosen to make
    the design's power at ``effect`` exactly ``power`` (a root in β of ``design_power``): the power n_K has beyond the
    plan buys earlier futility stops. Where n_K gives less than ``power`` even without futility, β = 1 − power (the
    usual choice), and a note says the maximum is short of the plan and the effect it can detect at ``power``."""
    c = efficacy_bounds(np.asarray(n, float), alpha, spending)
    sign = 1 if effect >= 0 else -1
    theta = abs(effect)
    base = Design(tuple(int(x) for x in n), alpha, spending, tuple(c), None, sign, effect,
                  df=None if df is None else tuple(float(x) for x in df),
                  deff=None if deff is None else tuple(float(x) for x in deff))
    if futility and theta == 0:
        raise ValueError("a futility bound needs the effect to plan for (a non-zero effect)")
    if not theta:
        return base
    no_fut = design_power(base, theta)[0]
    detectable = detectable_effect(base, power)
    notes: list[str] = []
    if no_fut < power:
        scale = "" if df is None else " (t scale)"
        notes.append(f"the design cannot reach power {power:g} at d_z = {theta:g} within its maximum of {n[-1]} "
                     f"scenarios: it has power {no_fut:.3f} there{' even without futility stops' if futility else ''}"
                     f"{scale}; power {power:g} needs d_z ≥ {detectable:.3f}")
    base = Design(**{**base.__dict__, "detectable": detectable, "notes": tuple(notes)})
    if not futility:
        return Design(**{**base.__dict__, "power": no_fut})
    info = base.information()

    def with_beta(beta: float) -> Design:
        # β is spent on the z scale; the root below makes the power on the t scale the one planned for
        f = futility_bounds(info, c, theta, beta, spending)
        d = Design(**{**base.__dict__, "futility": tuple(f), "beta": beta})
        return Design(**{**d.__dict__, "power": design_power(d, theta)[0]})
    if no_fut <= power:
        notes.append(f"futility spends β = {1 - power:g}")
        return Design(**{**with_beta(1.0 - power).__dict__, "notes": tuple(notes)})
    beta = _solve(lambda b: with_beta(b).power - power, 1e-6, 0.999)
    return with_beta(beta)


def z_to_t(z, df) -> np.ndarray:
    """A z-scale bound moved to the t scale by its tail probability: F_t^{−1}(Φ(z); df) (module docstring)."""
    from scipy.stats import t
    return t.ppf(_norm().cdf(z), df)


def t_to_z(tstat, df) -> np.ndarray:
    """An observed t read on the z scale: Φ^{−1}(F_t(t; df)); its tail probability kept."""
    from scipy.stats import t
    return _norm().ppf(t.cdf(tstat, df))


def stagewise_p(d: Design, look: int, z) -> np.ndarray:
    """The two-sided stagewise-ordering p-value of stopping at ``look`` (1-based) with statistic ``z`` (J&T §8.4):
    outcomes that stop earlier by efficacy, or at this look with a larger |Z|, are more extreme,

      p = 2·min(½, Σ_{j<k} P_0(go on to j, Z_j ≥ c_j) + P_0(go on to k, Z_k ≥ |z|)),

    the continuation regions those of efficacy alone (futility non-binding); at least α for an outcome inside the
    efficacy bounds (a futility stop). Vectorised over ``z``."""
    info = np.asarray(d.n, float)
    c = np.asarray(d.efficacy)
    prev, earlier = None, 0.0
    for k in range(look - 1):
        earlier += float(_upper_tail(prev, info[k], 0.0, c[k] * math.sqrt(info[k])))
        prev = _advance(prev, info[k], 0.0, -c[k], c[k])
    i = info[look - 1]
    z = np.abs(np.asarray(z, float))
    p = np.minimum(1.0, 2.0 * (earlier + _upper_tail(prev, i, 0.0, z * math.sqrt(i))))
    # An outcome that does not cross is less extreme than every crossing at any look (the non-binding design goes on),
    # and those have probability α under H0 together: its p is at least α.
    return np.where(z >= c[look - 1], p, np.maximum(p, d.alpha))


def repeated_ci(diff, se, bound_t) -> tuple[np.ndarray, np.ndarray]:
    """The repeated confidence interval at a look (J&T ch. 9): d̄_k ± c^t_k·SE_k with c^t_k the efficacy bound on the
    t scale and SE_k the look's standard error of d̄_k (s_k/√n_k, or the CR2 one). The intervals of all looks cover δ
    together with probability ≥ 1 − α, so the one at whichever look the design stopped is a valid 1 − α interval."""
    half = np.asarray(bound_t, float) * np.asarray(se, float)
    return np.asarray(diff, float) - half, np.asarray(diff, float) + half


def look_df(clusters) -> float:
    """The degrees of freedom of a look's t on scenarios in ``clusters`` (one label per scenario): the Satterthwaite
    df of the CR2 test (``clustered.cr2_se_df``; n − 1 when every scenario is its own cluster), or n − 1 where one
    cluster holds them all (nothing to cluster on, as ``paired.compare`` does)."""
    labels = np.asarray(clusters)
    if len(set(labels.tolist())) < 2:
        return float(len(labels) - 1)
    return float(cr2_se_df(np.zeros(len(labels)), labels)[2])


def look_deff(clusters, icc: float) -> float:
    """Kish's design effect of a look's quarter sizes n_g at intra-quarter correlation ``icc``:
    1 + (Σ n_g²/n − 1)·icc."""
    _, sizes = np.unique(np.asarray(clusters), return_counts=True)
    return 1.0 + (float((sizes ** 2).sum()) / sizes.sum() - 1.0) * icc


@dataclass(frozen=True)
class Look:
    """One look's paired test and what the design decides from it."""
    look: int
    n: int
    diff: float
    sd: float
    t: float
    #: ``t`` on the z scale (``t_to_z``), and the bounds on the t scale at this look's df.
    z: float
    efficacy_t: float
    futility_t: float | None
    #: efficacy, futility, continue, or final (the last look without crossing).
    decision: str
    #: The standard error of ``diff`` and the t's df: s/√n and n − 1, or quarter-clustered (CR2, Satterthwaite).
    se: float = float("nan")
    df: float = float("nan")
    #: The clusters the t was computed over (``n`` when each scenario is its own).
    n_clusters: int = 0


def take_look(d: Design, look: int, diffs: np.ndarray, clusters=None) -> Look:
    """The t on ``diffs`` (scenario differences, treatment − control) at ``look`` (1-based), against the design's
    bounds on the t scale at the t's df: efficacy when |t| ≥ c^t, futility when sign·t < f^t, final at the last look.
    With ``clusters`` (each scenario's quarter) spanning at least 2, the t is the quarter-clustered CR2 one with its
    Satterthwaite df (``clustered.cr2_se_df``); otherwise the ordinary paired t, df n − 1. Differences without spread
    (all equal, or every cluster's residuals summing to 0) stop for efficacy when their mean is non-zero, as an
    infinite t does."""
    x = np.asarray(diffs, float)
    n = len(x)
    if n < 2:
        raise ValueError(f"look {look} needs at least 2 complete pairs, got {n}")
    diff, sd = float(x.mean()), float(x.std(ddof=1))
    if clusters is not None and len(set(np.asarray(clusters).tolist())) >= 2:
        _, se_arr, df, n_clusters = cr2_se_df(x, clusters)
        se = float(se_arr)
    else:
        se, df, n_clusters = sd / math.sqrt(n), float(n - 1), n
    scale = max(1.0, float(np.abs(x).max()))
    if se <= 1e-12 * scale:
        t = 0.0 if abs(diff) <= 1e-12 * scale else math.copysign(math.inf, diff)
    else:
        t = diff / se
    c_t = float(z_to_t(d.efficacy[look - 1], df))
    f_t = None if d.futility is None else float(z_to_t(d.futility[look - 1], df))
    if abs(t) >= c_t:
        decision = "efficacy"
    elif f_t is not None and look < d.looks and d.sign * t < f_t:
        decision = "futility"
    else:
        decision = "final" if look == d.looks else "continue"
    z = float(t_to_z(t, df)) if math.isfinite(t) else t
    return Look(look, n, diff, sd, t, z, c_t, f_t, decision, se, df, n_clusters)


def planned_looks(n_max: int, looks: int) -> list[int]:
    """Equally spaced looks up to ``n_max`` complete pairs, ⌈k·n_max/K⌉ (at least 2 each, strictly increasing)."""
    out = [max(2, math.ceil(k * n_max / looks)) for k in range(1, looks + 1)]
    if any(b <= a for a, b in zip(out, out[1:], strict=False)):
        raise ValueError(f"{looks} looks do not fit in {n_max} scenarios (each look needs at least 2 more pairs)")
    return out
