"""When a correlation or a regression slope says nothing: the rules every statistic here applies.

A predictor is the x of a correlation (ρ̄, a CRIT pillar, a role's ρ, Δρ̄) or the regressor of the OLS.
Its finite values are first merged where they differ by float noise only: two values count as one when
they are closer than ``REL_TOL × max(1, largest |value|)``. Then

- fewer than ``MIN_PAIRS`` (3) complete (x, y) pairs: not computed (a line through two points fits exactly);
- the predictor takes fewer than ``MIN_DISTINCT`` (3) distinct values: not computed. One value is a constant
  (r and the slope are undefined); two values make r a two-group mean difference and the slope a line through
  two group means, which rule-based analysts produce (ρ̄ ∈ {0.883, 0.900}) and which reads as a finding it is not;
- the response (Sharpe, a return, a Δ) is constant: not computed (r undefined, a zero slope fitted exactly).

Each rule gives a reason in words ("rho_bar takes only 2 distinct values (0.883, 0.900)") that the tables, the
`stats` command and the report print in place of the number, never a bare n/a.
"""

from __future__ import annotations

import numpy as np

MIN_PAIRS = 3
MIN_DISTINCT = 3
REL_TOL = 1e-9


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
