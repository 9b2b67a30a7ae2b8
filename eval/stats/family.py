"""Multiple comparisons: every paired test of one analysis (each pair × each metric) is one family; of one call
when it makes several (every part of ``stats --by``, every batch of ``stats DIR1 DIR2 …``).

Adjusted p-values through statsmodels' ``multipletests``:
  Holm (1979), the default: p_(i) sorted ascending over m tests, p̃_(i) = max_{j ≤ i} min(1, (m − j + 1)·p_(j));
      controls the family-wise error rate under any dependence.
  Benjamini–Hochberg (1995), ``bh``: p̃_(i) = min_{j ≥ i} min(1, m·p_(j)/j); controls the false discovery rate
      (valid under positive dependence, Benjamini & Yekutieli 2001).
  ``none``: p̃ = p (say so when reporting).
A test with no p (NaN: not tested) stays NaN and does not count towards m.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

#: --correction name → statsmodels method (None: no adjustment).
CORRECTIONS = {"holm": "holm", "bh": "fdr_bh", "none": None}
DEFAULT_CORRECTION = "holm"
#: Significance level the adjusted p is marked at.
ALPHA = 0.05


def check_correction(correction: str) -> str:
    if correction not in CORRECTIONS:
        raise ValueError(f"unknown correction {correction!r}; choose from {', '.join(CORRECTIONS)}")
    return correction


def adjust(pvalues: list[float], correction: str) -> list[float]:
    """Adjusted p-values; NaN tests (undefined) stay NaN and do not count towards the family size."""
    from statsmodels.stats.multitest import multipletests
    method = CORRECTIONS[check_correction(correction)]
    if method is None:
        return list(pvalues)
    p = np.asarray(pvalues, float)
    ok = ~np.isnan(p)
    out = p.copy()
    if ok.any():
        out[ok] = multipletests(p[ok], method=method)[1]
    return out.tolist()


def adjust_family(comparisons: list, correction: str) -> list:
    """The comparisons (``paired.PairedComparison``) with ``p_adj`` set over all of them as one family."""
    return [replace(c, p_adj=p) for c, p in zip(comparisons, adjust([c.p for c in comparisons], correction), strict=True)]


def family_line(n_tests: int, correction: str, scope: str = "this analysis") -> str:
    """One line saying what the adjusted p is adjusted for; ``scope``: what the family spans (one analysis, every
    part of ``stats --by``, every batch of a study)."""
    if correction == "none":
        return f"p_adj = p: no correction over the {n_tests} tests (--correction none)"
    name = {"holm": "Holm (family-wise error)", "bh": "Benjamini–Hochberg (false discovery rate)"}[correction]
    return f"p_adj: {name} over all {n_tests} paired tests (every pair × metric) of {scope} as one family"
