"""Regression of performance on reasoning quality with scenario fixed effects and quarter-clustered errors:

  y_{cs} = β·x_{cs} + γ_{ablation} + δ_{config} + α_s + ε_{cs}

on scenario means (one row per config × scenario, replicates averaged: ``units``), fitted by OLS (statsmodels
formula API). α_s, the scenario fixed effects, remove each scenario's own difficulty: the quarter alone explains
most of the variance of Sharpe across the paper's scenarios, which a pooled slope would otherwise pick up.
Standard errors are cluster-robust by quarter (``cov_type="cluster"``, CR1 with the small-sample factor
G/(G−1)·(N−1)/(N−K), t with G − 1 degrees of freedom), since scenarios of one quarter share its market.

Fixed effects are chosen honestly and named in ``effects``: scenario FE when x varies within some scenario;
when x is constant within every scenario (say one config per scenario), scenario FE would absorb it, so quarter
FE are used instead, and with neither none (each said in ``warnings``). A categorical term constant within
every fixed-effect group is absorbed by them and left out, also said. Without an ``invest_quarter`` column the
errors are clustered by scenario, and with fewer than ``MIN_CLUSTERS`` clusters ``warnings`` says the clustered
errors are not to be trusted: cluster-robust errors are biased downward with few clusters and t(G − 1) tests
over-reject (Cameron & Miller 2015, "A Practitioner's Guide to Cluster-Robust Inference", J. Human Resources
50(2), section VI; their rule of thumb: at least 20–50 clusters, 30 used here).

Not fitted (``Degenerate``) when x takes fewer than 3 distinct values on the complete rows, when y is constant, or
with too few rows (``madbench.eval.stats.degenerate``); nor (``RankDeficient``) when the design is collinear.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from madbench.eval.stats.degenerate import REL_TOL, Degenerate, check_predictor
from madbench.eval.stats.units import QUARTER, SCENARIO

#: Fewer clusters than this and cluster-robust errors are flagged (Cameron & Miller 2015).
MIN_CLUSTERS = 30


class RankDeficient(ValueError):
    """The regressors are collinear, so the coefficients are not identified."""


@dataclass
class Regression:
    formula: str
    #: Which fixed effects were used and why ("scenario fixed effects", "quarter fixed effects (...)", "none (...)").
    effects: str
    cluster_by: str
    n_clusters: int
    n_obs: int
    #: The coefficients other than the fixed effects: term, coef, se (clustered), t, p, ci_low, ci_high.
    table: pd.DataFrame
    warnings: list[str] = field(default_factory=list)
    fit: object = None

    def record(self) -> dict:
        return {"formula": self.formula, "effects": self.effects, "cluster_by": self.cluster_by, "n_clusters": self.n_clusters,
                "n_obs": self.n_obs, "warnings": list(self.warnings), "coefficients": self.table.to_dict(orient="records")}

    def lines(self) -> list[str]:
        """What is printed above the coefficient table."""
        return [f"Rows: {self.n_obs} (config × scenario, replicates averaged). Effects: {self.effects}. "
                f"Standard errors clustered by {self.cluster_by} ({self.n_clusters} clusters).",
                *[f"WARNING: {w}" for w in self.warnings]]


def varies_within(values: pd.Series, groups: pd.Series) -> bool:
    """Whether a column takes more than one value inside some group (numbers: beyond float noise, REL_TOL)."""
    if pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values):
        x = values.astype(float)
        spread = (x - x.groupby(groups).transform("mean")).abs().max()
        return bool(spread > REL_TOL * max(1.0, float(x.abs().max())))
    return bool(values.astype(str).groupby(groups).nunique().gt(1).any())


def choose_effects(data: pd.DataFrame, x: str) -> tuple[str | None, str, list[str]]:
    """(fixed-effect column or None, how ``effects`` names it, warnings)."""
    if SCENARIO in data.columns and data[SCENARIO].nunique() > 1 and varies_within(data[x], data[SCENARIO]):
        return SCENARIO, "scenario fixed effects", []
    said = [f"{x} is constant within every scenario, so scenario fixed effects would absorb it"]
    if QUARTER in data.columns and data[QUARTER].nunique() > 1 and varies_within(data[x], data[QUARTER]):
        return QUARTER, "quarter fixed effects (scenario fixed effects would absorb " + x + ")", [
            said[0] + "; quarter fixed effects used instead, which leave differences between scenarios of one quarter in the error"]
    return None, "none (neither scenario nor quarter fixed effects leave variation in " + x + ")", [
        said[0] + "; no fixed effects: the slope mixes within- and between-scenario variation"]


def build_formula(runs: pd.DataFrame, y: str, x: str, ablation: str | None, treatment: str | None,
                  effect: str | None = None) -> str:
    terms = [x]
    for column in (ablation, treatment):
        if column and column in runs.columns and runs[column].nunique() > 1:
            terms.append(f"C({column})")
    if effect:
        terms.append(f"C({effect})")
    return f"{y} ~ " + " + ".join(terms)


def ols(means: pd.DataFrame, y: str = "sharpe", x: str = "rho_bar", ablation: str | None = "batch",
        treatment: str | None = None) -> Regression:
    """The regression of the module docstring on ``means`` (one row per config × scenario, ``units.scenario_means``),
    on the rows where every term is finite."""
    import statsmodels.formula.api as smf
    keep = [c for c in dict.fromkeys((y, x, ablation, treatment, SCENARIO, QUARTER)) if c and c in means.columns]
    data = means[keep].dropna(subset=[c for c in (y, x, ablation, treatment) if c and c in means.columns]).reset_index(drop=True)
    try:
        check_predictor(data[x], data[y], x, y)
    except Degenerate as exc:
        raise Degenerate(f"{exc} on the {len(data)} complete row(s)") from None
    effect, effects, warnings = choose_effects(data, x)
    categorical: list[str | None] = []
    for column in (ablation, treatment):
        if not column or column not in data.columns or data[column].nunique() < 2:
            continue
        if effect and not varies_within(data[column], data[effect]):
            warnings.append(f"C({column}) is constant within every {effect}: absorbed by the fixed effects, left out")
            continue
        categorical.append(column)
    ablation_term, treatment_term = [*categorical, None, None][:2]
    formula = build_formula(data, y, x, ablation_term, treatment_term, effect)
    model = smf.ols(formula, data=data)
    if len(data) <= model.exog.shape[1]:
        raise Degenerate(f"OLS {formula!r} needs more rows than terms ({model.exog.shape[1]}); only {len(data)} complete row(s)")
    rank = np.linalg.matrix_rank(model.exog)
    if rank < model.exog.shape[1]:
        raise RankDeficient(f"OLS {formula!r}: the design has rank {rank} < {model.exog.shape[1]} terms "
                            f"(a term is constant or collinear, e.g. {x} identical across runs); no unique fit")
    cluster_by = QUARTER if QUARTER in data.columns and data[QUARTER].notna().all() else SCENARIO
    if cluster_by == SCENARIO:
        warnings.append(f"no {QUARTER} column: errors clustered by scenario, which ignores what scenarios of one quarter share")
    groups = pd.factorize(data[cluster_by].astype(str))[0]
    n_clusters = int(groups.max()) + 1
    if n_clusters < 2:
        fit = model.fit(cov_type="HC1")
        warnings.append(f"only 1 {cluster_by}: no clustered errors are possible; heteroskedasticity-robust (HC1) errors, "
                        "which treat the rows as independent")
    else:
        fit = model.fit(cov_type="cluster", cov_kwds={"groups": groups}, use_t=True)
    if n_clusters < MIN_CLUSTERS:
        warnings.append(f"only {n_clusters} {cluster_by} cluster(s) (< {MIN_CLUSTERS}): cluster-robust standard errors are "
                        "biased downward and their p-values too small with few clusters (Cameron & Miller 2015, "
                        "J. Human Resources 50(2)); read them as optimistic, or use a wild cluster bootstrap")
    ci = fit.conf_int()
    shown = [t for t in fit.params.index if not (effect and t.startswith(f"C({effect})"))]
    table = pd.DataFrame({"term": shown, "coef": fit.params[shown].values, "se": fit.bse[shown].values,
                          "t": fit.tvalues[shown].values, "p": fit.pvalues[shown].values,
                          "ci_low": ci.loc[shown, 0].values, "ci_high": ci.loc[shown, 1].values})
    return Regression(formula, effects, cluster_by, n_clusters, len(data), table, warnings, fit)
