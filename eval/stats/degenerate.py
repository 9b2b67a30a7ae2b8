"""When a correlation or a regression slope says nothing: the rules every statistic here applies.

A predictor is the x of a correlation (ρ̄, a CRIT pillar, a role's ρ, Δρ̄) or the regressor of the OLS.
Its finite values are first merged where they differ by float noise only: two values count as one when
they are closer than ``REL_TOL × max(1, largest |value|)``. Then

- fewer than ``MIN_PAIRS`` (3) complete (x, y) pairs: not computed (a line through two points fits exactly);
- the predictor takes fewer than ``MIN_DISTINCT`` (3) distinct values: not computed. One value is a constant
  (r and the slope are undefined); two values make r a two-group mean difference and the slope a line through
  two group means, which rule-based analysts produce (ρ̄ ∈ {0.883, 0.900}) and which reads as a finding it is not;
- the response (Sharpe, a return, a Δ) is constant: not computed (r undefined, a zero slope fitted exactly).

A paired comparison (``madbench.eval.stats.paired``) is not tested when its differences d_i = a_i − b_i carry no
sampling spread to test against:

- every d_i zero (two configs that allocate alike) or, as below, within rounding of zero: no test at all;
- fewer than 2 pairs, or every d_i the same non-zero value: t is undefined (the Wilcoxon p still stands);
- precisely, every |d_i| ≤ ``PAIRED_TOL × max(1, largest |a_i|, |b_i|)``: the two sides are equal up to rounding. Allocations
  are rounded to 6 decimals (the judge, the rule-based analysts and answers, ``fix_rounding``), so two configs that
  reach the same portfolio can hold weights 10⁻⁶ apart, the largest absorbing the others' sum. Every metric then
  differs a little on every scenario, often with one sign: a walkthrough found Sharpe differences of about 2·10⁻⁶
  reported as t = 32, p = 0.001, d_z = 18.7 and bolded in the comparison table, a "finding" made of rounding. How
  far rounding reaches, simulated (random allocations of 3, 10 and 30 names over a 63-day quarter, each rounded
  twice as above, 200 draws each): Sharpe differences up to 4.4·10⁻⁵ (2.7·10⁻⁵ of max(1, |Sharpe|)) and return
  differences up to 1.5·10⁻⁴ percentage points (10⁻⁴ of max(1, |return %|)): a weight's error multiplies its
  asset's own return, which can exceed the portfolio's. ``PAIRED_TOL`` = 10⁻⁴ of the scale (the largest value of
  either side over the pairs) covers that, and stays an order of magnitude below the smallest difference worth
  reporting (10⁻³ of a Sharpe ratio, 10⁻² of a percentage point of return). A real effect that small on every
  scenario is not one a 35-scenario batch can tell from rounding anyway.

Each rule gives a reason in words ("rho_bar takes only 2 distinct values (0.883, 0.900)") that the tables, the
`stats` command and the report print in place of the number, never a bare n/a.
"""

from __future__ import annotations

import numpy as np

MIN_PAIRS = 3
MIN_DISTINCT = 3
REL_TOL = 1e-9
#: Paired differences this small relative to the metric's scale are rounding, not a difference (see above).
PAIRED_TOL = 1e-4


class Degenerate(ValueError):
    """The data cannot support the statistic (a constant or two-valued predictor, too few pairs)."""


def distinct_values(values) -> list[float]:
    """The finite values, sorted, with values within float noise of each other merged into the first."""
    x = np.asarray(values, float)
    x = np.sort(x[np.isfinite(x)])
    if not len(x):
        return []
    tol = REL_TOL * max(1.0, float(np.max(np.abs(x))))
    keep = np.concatenate([[True], np.diff(x) > tol])
    return [float(v) for v in x[keep]]


def fmt_values(values: list[float]) -> str:
    """Values printed with as many decimals as it takes to tell them apart (at least three)."""
    for digits in range(3, 13):
        text = [_fmt(v, digits) for v in values]
        if len(set(text)) == len(text):
            return ", ".join(text)
    return ", ".join(repr(v) for v in values)


def _fmt(v: float, digits: int) -> str:
    if v == 0 or 1e-3 <= abs(v) < 1e6:
        return f"{v:.{digits}f}"
    return f"{v:.{digits}g}"


def predictor_problem(values, name: str) -> str | None:
    """Why ``values`` cannot serve as a predictor, or None when it can."""
    distinct = distinct_values(values)
    if len(distinct) == 1:
        return f"{name} is constant ({fmt_values(distinct)})"
    if len(distinct) < MIN_DISTINCT:
        return f"{name} takes only {len(distinct)} distinct values ({fmt_values(distinct)})"
    return None


def response_problem(values, name: str) -> str | None:
    """Why ``values`` cannot serve as a response (it is constant), or None when it can."""
    distinct = distinct_values(values)
    return f"{name} is constant ({fmt_values(distinct)})" if len(distinct) == 1 else None


def pairs_problem(n: int) -> str | None:
    return f"fewer than {MIN_PAIRS} pairs ({n})" if n < MIN_PAIRS else None


def check_predictor(x, y, x_name: str, y_name: str) -> None:
    """Raise ``Degenerate`` with the first reason the (x, y) data cannot give a slope or a correlation."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    keep = np.isfinite(x) & np.isfinite(y)
    problem = (pairs_problem(int(keep.sum())) or predictor_problem(x[keep], x_name)
               or response_problem(y[keep], y_name))
    if problem:
        raise Degenerate(problem)


def rounding_problem(a, b, metric: str = "the metric") -> str | None:
    """Why the paired differences a − b are no difference (every one 0, or within rounding of 0), or None."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    d = a - b
    if not len(d):
        return None
    if np.all(d == 0):
        return "every difference is 0 (the same results)"
    scale = max(1.0, float(np.max(np.abs(np.concatenate([a, b])))))
    largest = float(np.max(np.abs(d)))
    if largest <= PAIRED_TOL * scale:
        # no "|" in the text: it is printed in a Markdown table cell
        return (f"every difference within ±{PAIRED_TOL * scale:.2g} ({PAIRED_TOL:g} × the larger of 1 and the largest "
                f"absolute {metric}; largest {largest:.2g}): equal up to the 6-decimal rounding of weights")
    return None


def spread_problem(d) -> str | None:
    """Why the t test cannot be computed on the differences ``d`` (fewer than 2, or all the same), or None."""
    d = np.asarray(d, float)
    if len(d) < 2:
        return f"fewer than 2 pairs ({len(d)})"
    if np.all(d == d[0]):
        return f"every difference is {fmt_values([float(d[0])])}: no spread, so no t"
    return None
