"""OLS of performance on reasoning quality: ``sharpe ~ rho_bar + C(ablation) [+ C(treatment)]``.

Fitted with the statsmodels formula API; categorical terms enter only when the
column has more than one level (a single level is absorbed by the intercept).
Not fitted (``Degenerate``) when ``x`` takes fewer than 3 distinct values on the complete rows,
when ``y`` is constant, or with too few rows (``madbench.eval.stats.degenerate``); nor (``RankDeficient``)
when the design is collinear.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from madbench.eval.stats.degenerate import Degenerate, check_predictor


class RankDeficient(ValueError):
    """The regressors are collinear, so the coefficients are not identified."""


def build_formula(runs: pd.DataFrame, y: str, x: str, ablation: str | None, treatment: str | None) -> str:
    terms = [x]
    for column in (ablation, treatment):
        if column and column in runs.columns and runs[column].nunique() > 1:
            terms.append(f"C({column})")
    return f"{y} ~ " + " + ".join(terms)


def ols(runs: pd.DataFrame, y: str = "sharpe", x: str = "rho_bar", ablation: str | None = "batch", treatment: str | None = None):
    """Return (formula, fitted results, coefficient table) on the rows where every term is finite."""
    import statsmodels.formula.api as smf
    formula = build_formula(runs, y, x, ablation, treatment)
    used = [c for c in (y, x, ablation, treatment) if c and c in formula]
    data = runs[used].dropna()
    try:
        check_predictor(data[x], data[y], x, y)
    except Degenerate as exc:
        raise Degenerate(f"{exc} on the {len(data)} complete row(s)") from None
    if len(data) < len(used) + 2:
        raise Degenerate(f"OLS {formula!r} needs more rows than terms; only {len(data)} complete row(s)")
    model = smf.ols(formula, data=data)
    rank = np.linalg.matrix_rank(model.exog)
    if rank < model.exog.shape[1]:
        raise RankDeficient(f"OLS {formula!r}: the design has rank {rank} < {model.exog.shape[1]} terms "
                            f"(a term is constant or collinear, e.g. {x} identical across runs); no unique fit")
    fit = model.fit()
    ci = fit.conf_int()
    table = pd.DataFrame({"term": fit.params.index, "coef": fit.params.values, "se": fit.bse.values, "t": fit.tvalues.values,
                          "p": fit.pvalues.values, "ci_low": ci[0].values, "ci_high": ci[1].values})
    return formula, fit, table
