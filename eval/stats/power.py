"""Sample size for a paired test (statsmodels' TTestPower: the one-sample t on the differences), and for the
quarter-clustered test the primary comparison runs where scenarios share quarters (``clustered_power``).

The standardised effect is d_z = δ / σ_d, where δ is the mean paired difference
to detect and σ_d the standard deviation of the paired differences. n solves
power = P(|T| > t_{1−α/2, n−1}) under the noncentral t with λ = d_z·√n.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from madbench.eval.stats.clustered import cr2_se_df


def scenarios_needed(effect: float, sd: float, power: float, alpha: float = 0.05, alternative: str = "two-sided") -> int:
    from statsmodels.stats.power import TTestPower
    if sd <= 0 or effect == 0:
        raise ValueError("power analysis needs sd > 0 and a non-zero effect")
    n = TTestPower().solve_power(effect_size=abs(effect) / sd, alpha=alpha, power=power, alternative=alternative)
    return int(math.ceil(n))


def achieved_power(effect: float, sd: float, n: int, alpha: float = 0.05, alternative: str = "two-sided") -> float:
    from statsmodels.stats.power import TTestPower
    return float(TTestPower().power(effect_size=abs(effect) / sd, nobs=n, alpha=alpha, alternative=alternative))


def power_table(effect: float, sd: float, powers: list[float], alpha: float = 0.05, current_n: int | None = None) -> dict:
    out = {"effect": effect, "sd": sd, "d_z": abs(effect) / sd, "alpha": alpha,
           "needed": [{"power": p, "scenarios": scenarios_needed(effect, sd, p, alpha)} for p in powers]}
    if current_n:
        out["power_at_current_n"] = {"n": current_n, "power": achieved_power(effect, sd, current_n, alpha)}
    return out


def icc_oneway(values, groups) -> float:
    """Intraclass correlation of ``values`` within ``groups`` by the one-way ANOVA estimator (Donner 1986,
    Int. Stat. Review 54(1)): with G groups of sizes n_g, N = Σ n_g,

      ICC = (MSB − MSW) / (MSB + (m₀ − 1)·MSW),   m₀ = (N − Σ n_g² / N) / (G − 1),

    truncated at 0 (a negative estimate is sampling noise around no clustering). NaN with fewer than 2 groups or
    no group of 2."""
    frame = pd.DataFrame({"x": np.asarray(values, float), "g": np.asarray(groups)}).dropna()
    sizes = frame.groupby("g")["x"].size()
    big_n, n_groups = len(frame), len(sizes)
    if n_groups < 2 or big_n <= n_groups:
        return float("nan")
    means = frame.groupby("g")["x"].transform("mean")
    msb = float(((means - frame["x"].mean()) ** 2).sum()) / (n_groups - 1)
    msw = float(((frame["x"] - means) ** 2).sum()) / (big_n - n_groups)
    m0 = (big_n - float((sizes ** 2).sum()) / big_n) / (n_groups - 1)
    denominator = msb + (m0 - 1) * msw
    return max(0.0, (msb - msw) / denominator) if denominator > 0 else float("nan")


def design_effect(m: float, icc: float) -> float:
    """Kish's (1965, Survey Sampling) design effect of clusters of mean size m: deff = 1 + (m − 1)·ICC; n scenarios in
    clusters are worth n / deff independent ones."""
    return 1.0 + (m - 1.0) * icc


def safeguard_effect(diff: float, se: float, df: int, confidence: float = 0.60) -> float:
    """The effect to plan for from a pilot's mean difference: the bound of its two-sided ``confidence`` interval nearer
    zero, |d̄| − t_{(1+c)/2, df}·SE, and 0 when the interval covers zero ("safeguard power analysis", Perugini,
    Gallucci & Costantini 2014, Perspectives on Psychological Science 9(3), who use c = 0.60). A pilot selected for
    being significant overstates its effect (the winner's curse); planning for the raw estimate under-sizes the study."""
    from scipy import stats
    return max(0.0, abs(diff) - float(stats.t.ppf(0.5 + confidence / 2, df)) * se)


def clustered_power(d_z: float, n: float, deff: float, df: float, alpha: float = 0.05) -> float:
    """Power of the two-sided quarter-clustered t (CR2) for standardised effect ``d_z`` on ``n`` scenarios of design
    effect ``deff``: the noncentral t with ``df`` (the Satterthwaite df; G − 1 for G equal quarters) and
    noncentrality d_z·√(n / deff)."""
    from scipy import stats
    crit, nc = float(stats.t.ppf(1 - alpha / 2, df)), abs(d_z) * math.sqrt(n / deff)
    return float(stats.nct.sf(crit, df, nc) + stats.nct.cdf(-crit, df, nc))


def quarters_needed(d_z: float, m: float, deff: float, power: float, alpha: float = 0.05, most: int = 100_000) -> int:
    """The fewest quarters G of ``m`` scenarios each for which the quarter-clustered t (df G − 1, equal quarters)
    has ``power`` (``clustered_power``)."""
    g = 2
    while clustered_power(d_z, g * m, deff, g - 1, alpha) < power:
        if g >= most:
            raise ValueError(f"no design of up to {most} quarters reaches power {power:g} at d_z = {d_z:g}")
        g = g + 1 if g < 64 else int(g * 1.05)  # past 64 quarters the df hardly moves: coarser steps
    return g


def plan_from_pilot(diffs, quarters, powers: list[float], alpha: float = 0.05, confidence: float = 0.60) -> dict:
    """Scenarios a paired design needs, planned from a pilot's per-scenario differences ``diffs`` (replicates
    averaged) and each scenario's quarter (None: no clustering known):

      effect     safeguard_effect(d̄, s_d/√n, n − 1, confidence)
      n₀         scenarios_needed(effect, s_d, power, alpha): independent scenarios, the ordinary paired t
      deff       design_effect(m, ICC of the d_i within quarters), m = n / quarters, the pilot's scenarios per quarter
      needed     with quarters: the test that is run, the quarter-clustered t (CR2) on G quarters of m scenarios,
                 its Satterthwaite df G − 1 and noncentrality effect/s_d·√(G·m / deff): the fewest G with the power
                 (``quarters_needed``), ⌈G·m⌉ scenarios; without: n₀

    and the power the pilot's own design had for that effect (clustered: at its quarters' Satterthwaite df)."""
    d = np.asarray(diffs, float)
    n = len(d)
    nan = float("nan")
    out: dict[str, Any] = {"n": n, "diff": float(d.mean()) if n else nan, "sd": float(d.std(ddof=1)) if n > 1 else nan, "alpha": alpha,
           "safeguard_confidence": confidence}
    if n < 3 or not out["sd"] > 0:
        why = f"only {n} scenario(s) (3 needed)" if n < 3 else "the differences have no spread"
        return out | {"effect": nan, "needed": [], "note": f"cannot plan: {why}"}
    out["effect"] = safeguard_effect(out["diff"], out["sd"] / math.sqrt(n), n - 1, confidence)
    if quarters is None:
        out |= {"icc": nan, "quarters": None, "m": 1.0, "deff": 1.0}
    else:
        q = np.asarray(quarters)
        n_quarters = len(set(q.tolist()))
        icc = icc_oneway(d, q)
        m = n / n_quarters
        out |= {"icc": icc, "quarters": n_quarters, "m": m, "deff": design_effect(m, icc) if np.isfinite(icc) else 1.0}
    if out["effect"] == 0:
        return out | {"needed": [], "note": f"cannot plan: the pilot's {confidence:.0%} interval of the difference covers 0; "
                                             "no effect is safe to plan for (give one: madbench power --effect)"}
    d_z = out["effect"] / out["sd"]
    clustered = bool(out["quarters"]) and out["quarters"] >= 2
    needed: list[dict[str, Any]] = []
    for p in powers:
        n0 = scenarios_needed(out["effect"], out["sd"], p, alpha)
        if clustered:
            g = quarters_needed(d_z, out["m"], out["deff"], p, alpha)
            needed.append({"power": p, "independent_scenarios": n0, "scenarios": int(math.ceil(g * out["m"] - 1e-9)),
                           "quarters": g, "df": float(g - 1)})
        else:
            needed.append({"power": p, "independent_scenarios": n0, "scenarios": n0, "quarters": None, "df": float(n0 - 1)})
    if clustered:
        pilot_df = float(cr2_se_df(np.zeros(n), np.asarray(quarters))[2])
        pilot_power = clustered_power(d_z, n, out["deff"], pilot_df, alpha)
    else:
        pilot_df, pilot_power = float(n - 1), achieved_power(out["effect"], out["sd"], n, alpha)
    test = "quarter-clustered t (CR2, Satterthwaite df)" if clustered else "paired t"
    return out | {"needed": needed, "power_at_pilot_n": pilot_power, "pilot_df": pilot_df, "test": test, "note": ""}
