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


def pillar_agreement(a: pd.DataFrame, b: pd.DataFrame, columns: list[str], keys=("run_id", "round", "agent_id"),
                     names: tuple[str, str] = ("a", "b")) -> pd.DataFrame:
    """Per column: n, Pearson r, Spearman ρ and ICC(2,1) between two scorers on the same turns, and a ``note``
    saying why any of them is undefined (NaN): too few turns in common, or a column without variation."""
    from scipy import stats
    merged = a.merge(b, on=list(keys), suffixes=("_a", "_b"))
    rows = []
    for col in columns:
        x, y = merged[f"{col}_a"].to_numpy(float), merged[f"{col}_b"].to_numpy(float)
        ok = np.isfinite(x) & np.isfinite(y)
        x, y = x[ok], y[ok]
        why = undefined_because(x, y, names)
        corr = why["correlation"] is None
        icc = icc2_1(np.column_stack([x, y])) if why["icc"] is None else float("nan")
        if why["icc"] is None and np.isnan(icc):
            why["icc"] = "ICC undefined: the ANOVA gives a non-positive denominator"
        rows.append({"pillar": col, "n": int(len(x)),
                     "pearson": float(stats.pearsonr(x, y)[0]) if corr else float("nan"),
                     "spearman": float(stats.spearmanr(x, y)[0]) if corr else float("nan"),
                     "icc2_1": icc, "note": "; ".join(dict.fromkeys(v for v in why.values() if v))})
    return pd.DataFrame(rows)


def undefined_because(x: np.ndarray, y: np.ndarray, names: tuple[str, str] = ("a", "b")) -> dict[str, str | None]:
    """Why correlations and ICC(2,1) are undefined on these paired ratings (None where they are defined)."""
    n = len(x)
    if n == 0:
        return {"correlation": "no turns in common", "icc": "no turns in common"}
    turns = f"{n} turn{'s' * (n != 1)}"
    if np.ptp(np.concatenate([x, y])) == 0:
        same = f"both give {x[0]:.3f} on all {turns}: no variance, nothing to agree on"
        return {"correlation": same, "icc": same}
    constant = [f"{name} gives {v[0]:.3f} on all {turns}" for name, v in zip(names, (x, y), strict=True) if np.ptp(v) == 0]
    correlation = (f"{turns} in common: correlations need 3" if n < 3
                   else f"{' and '.join(constant)}: correlations undefined" if constant else None)
    return {"correlation": correlation, "icc": f"{turns} in common: ICC needs 2" if n < 2 else None}


def label_agreement(frames: dict[str, pd.DataFrame], pairs: list[tuple[str, str]], columns: list[str]) -> pd.DataFrame:
    """``pillar_agreement`` for each pair of score tables (by label), stacked with ``label_a`` and ``label_b``."""
    out = [pillar_agreement(frames[a], frames[b], columns, names=(a, b)).assign(label_a=a, label_b=b) for a, b in pairs]
    if not out:
        return pd.DataFrame(columns=["label_a", "label_b", "pillar", "n", "pearson", "spearman", "icc2_1", "note"])
    table = pd.concat(out, ignore_index=True)
    return table[["label_a", "label_b", *[c for c in table.columns if c not in ("label_a", "label_b")]]]


#: LLM diagnostic count ↔ the audit counts that measure the same failure mechanically.
AUDIT_MAP = {
    "unsupported_claims": ["audit_claims_without_valid_evidence", "audit_unknown_evidence_ids", "audit_uncited_rationale"],
    "ignored_critiques": ["audit_unanswered_critiques"],
    "orphaned_positions": ["audit_orphaned_positions"],
}


def audit_agreement(scores: pd.DataFrame) -> pd.DataFrame:
    """Share of turns where the scorer and the audit agree on whether each mechanical failure occurred."""
    rows = []
    for diag, audit_cols in AUDIT_MAP.items():
        llm = scores[f"diag_{diag}"] > 0
        # Parts scored before a column existed (audit_uncited_rationale: basic-tier answers) lack it.
        audit = scores[[c for c in audit_cols if c in scores]].sum(axis=1) > 0
        rows.append({"failure": diag, "turns": int(len(scores)), "scorer_flags": int(llm.sum()),
                     "audit_flags": int(audit.sum()), "agreement": float((llm == audit).mean()) if len(scores) else float("nan"),
                     "note": "" if len(scores) else "no turns scored"})
    return pd.DataFrame(rows)
