"""Cluster-robust test of a mean: scenario differences d_s whose scenarios share a cluster g (their quarter).

The model is the intercept-only regression d_s = μ + e_s, with errors independent between clusters and of any
correlation within one. With n scenarios in G clusters of sizes n_g, X = 1 (so X'X = n, the hat matrix H = J/n and
its cluster block H_gg = J_{n_g}/n), μ̂ = d̄ and residuals e = d − d̄:

  CR2 variance (Bell & McCaffrey 2002, Survey Methodology 28(2); Pustejovsky & Tipton 2018, JBES 36(4), eq. 4–5)
      V = (X'X)⁻¹ · Σ_g X_g' A_g e_g e_g' A_g X_g · (X'X)⁻¹,   A_g = (I − H_gg)^{−1/2}
  I − H_gg has eigenvalue 1 − n_g/n on the constant vector and 1 elsewhere, so X_g' A_g = 1' / √(1 − n_g/n) and
      V = Σ_g S_g² / (1 − n_g/n) / n²,   S_g = Σ_{s ∈ g} e_s.

  Satterthwaite degrees of freedom with working model Ω = I (Bell & McCaffrey 2002, sect. 4; Pustejovsky & Tipton
  2018, eq. 11): with u_g = (I − H)_g' A_g X_g (X'X)⁻¹ the n-vector V loads on (V = Σ_g (u_g'd)²),
      ν = (Σ_g u_g'u_g)² / Σ_{g,h} (u_g'u_h)²,
  here u_g'u_h = a_g a_h (δ_gh n_g − n_g n_h / n) / n²,  a_g = 1/√(1 − n_g/n), so that Σ_g u_g'u_g = 1/n and
      ν = n² / Σ_{g,h} B_gh²,   B_gh = a_g a_h (δ_gh n_g − n_g n_h / n).

  t = d̄ / √V,  p = 2·(1 − F_t(|t|; ν)),  CI = d̄ ± t_{1−α/2, ν} · √V.

With every scenario its own cluster (n_g = 1) it is the ordinary paired t exactly: V = Σ e_s² / (n(n − 1)) = s²/n
and ν = n − 1; with G clusters of equal size it is the one-sample t on the G cluster means (df G − 1). CR2 with
Satterthwaite df holds its size with few clusters where CR1 with t(G − 1) over-rejects (Pustejovsky & Tipton 2018,
sect. 5; Imbens & Kolesár 2016, REStat 98(4)). It needs G ≥ 2: one cluster has no between-cluster replication.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ClusteredMean:
    n: int
    n_clusters: int
    mean: float
    #: √V, the CR2 standard error of the mean (0 when every cluster's residuals sum to 0).
    se: float
    #: Satterthwaite (Bell–McCaffrey) degrees of freedom.
    df: float
    t: float
    p: float
    ci_low: float
    ci_high: float


def cr2_mean_test(diffs, clusters, confidence: float = 0.95) -> ClusteredMean:
    """The CR2 test of the module docstring of H₀: μ = 0 for ``diffs`` in ``clusters`` (one label per value).
    t, p and the CI are NaN when the standard error is 0."""
    from scipy import stats
    d = np.asarray(diffs, float)
    if d.ndim != 1:
        raise ValueError(f"cr2_mean_test needs one row of differences; got shape {d.shape}")
    means, ses, dfs, n_clusters = cr2_se_df(d, clusters)
    mean, se, df = float(means), float(ses), float(dfs)
    nan = float("nan")
    if not se > 0:
        return ClusteredMean(len(d), n_clusters, mean, se, df, nan, nan, nan, nan)
    t = mean / se
    half = float(stats.t.ppf(0.5 + confidence / 2, df)) * se
    return ClusteredMean(len(d), n_clusters, mean, se, df, t, float(2 * stats.t.sf(abs(t), df)), mean - half, mean + half)


def cr2_se_df(diffs, clusters) -> tuple[np.ndarray, np.ndarray, float, int]:
    """(d̄, CR2 standard error, Satterthwaite df, G) of the module docstring, over the last axis of ``diffs`` (one
    sample per row: the df depends on the cluster sizes alone, so it is one number for every row)."""
    d = np.asarray(diffs, float)
    labels = np.asarray(clusters)
    n = d.shape[-1] if d.ndim else 0
    if d.ndim == 0 or labels.shape != (n,):
        raise ValueError(f"cr2_se_df needs one cluster label per difference; got {labels.shape} labels for {d.shape} values")
    if not np.isfinite(d).all():
        raise ValueError("cr2_se_df needs finite differences")
    _, codes, sizes = np.unique(labels, return_inverse=True, return_counts=True)
    if len(sizes) < 2:
        raise ValueError(f"cr2_se_df needs at least 2 clusters; got {len(sizes)} for {n} value(s)")
    mean = d.mean(axis=-1)
    sums = (d - mean[..., None]) @ np.eye(len(sizes))[codes]  # S_g: the residuals summed within each cluster
    a = 1.0 / np.sqrt(1.0 - sizes / n)
    se = np.sqrt(np.sum((a * sums) ** 2, axis=-1)) / n
    b = np.outer(a, a) * (np.diag(sizes.astype(float)) - np.outer(sizes, sizes) / n)
    return mean, se, n ** 2 / float(np.sum(b ** 2)), len(sizes)
