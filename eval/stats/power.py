"""Sample size for a paired test (statsmodels' TTestPower: the one-sample t on the differences).

The standardised effect is d_z = δ / σ_d, where δ is the mean paired difference
to detect and σ_d the standard deviation of the paired differences. n solves
power = P(|T| > t_{1−α/2, n−1}) under the noncentral t with λ = d_z·√n.
"""

from __future__ import annotations

import math


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
