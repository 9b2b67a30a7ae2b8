"""Agreement between two scorers, and between the LLM's counts and the deterministic audit.

ICC(2,1) — two-way random effects, absolute agreement, single rater — from
Shrout & Fleiss (1979), with the mean squares of the two-way ANOVA
``score ~ C(target) + C(rater)`` taken from statsmodels:

    ICC(2,1) = (MSR − MSE) / (MSR + (k − 1)·MSE + k·(MSC − MSE) / n)

n targets, k raters; MSR rows (targets), MSC columns (raters), MSE residual.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def icc2_1(ratings: np.ndarray) -> float:
    """ratings: n targets × k raters, no missing values."""
    import statsmodels.formula.api as smf
    from statsmodels.stats.anova import anova_lm
    n, k = ratings.shape
    if n < 2 or k < 2 or np.ptp(ratings) == 0:
        return float("nan")  # undefined without variation
    long = pd.DataFrame({"score": ratings.ravel(), "target": np.repeat(np.arange(n), k), "rater": np.tile(np.arange(k), n)})
    table = anova_lm(smf.ols("score ~ C(target) + C(rater)", data=long).fit())
    msr, msc, mse = (table.loc[name, "sum_sq"] / table.loc[name, "df"] for name in ("C(target)", "C(rater)", "Residual"))
    denominator = msr + (k - 1) * mse + k * (msc - mse) / n
    return float((msr - mse) / denominator) if denominator > 0 else float("nan")


def pillar_agreement(a: pd.DataFrame, b: pd.DataFrame, columns: list[str], keys=("run_id", "round", "agent_id")) -> pd.DataFrame:
    """Per column: n, Pearson r, Spearman ρ and ICC(2,1) between two scorers on the same turns."""
    from scipy import stats
    merged = a.merge(b, on=list(keys), suffixes=("_a", "_b"))
    rows = []
    for col in columns:
        x, y = merged[f"{col}_a"].to_numpy(float), merged[f"{col}_b"].to_numpy(float)
        ok = np.isfinite(x) & np.isfinite(y)
        x, y = x[ok], y[ok]
        constant = len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0
        rows.append({"pillar": col, "n": int(len(x)),
                     "pearson": float("nan") if constant else float(stats.pearsonr(x, y)[0]),
                     "spearman": float("nan") if constant else float(stats.spearmanr(x, y)[0]),
                     "icc2_1": icc2_1(np.column_stack([x, y])) if len(x) >= 2 else float("nan")})
    return pd.DataFrame(rows)


#: LLM diagnostic count ↔ the audit counts that measure the same failure mechanically.
AUDIT_MAP = {
    "unsupported_claims": ["audit_claims_without_valid_evidence", "audit_unknown_evidence_ids"],
    "ignored_critiques": ["audit_unanswered_critiques"],
    "orphaned_positions": ["audit_orphaned_positions"],
}


def audit_agreement(scores: pd.DataFrame) -> pd.DataFrame:
    """Share of turns where the scorer and the audit agree on whether each mechanical failure occurred."""
    rows = []
    for diag, audit_cols in AUDIT_MAP.items():
        llm = scores[f"diag_{diag}"] > 0
        audit = scores[audit_cols].sum(axis=1) > 0
        rows.append({"failure": diag, "turns": int(len(scores)), "scorer_flags": int(llm.sum()),
                     "audit_flags": int(audit.sum()), "agreement": float((llm == audit).mean()) if len(scores) else float("nan")})
    return pd.DataFrame(rows)
