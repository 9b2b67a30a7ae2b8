"""Does a model remember what happened? Hit rate of bucketed recall answers against chance.

Each observation is one (ticker, quarter): the bucket the model named, a_i, and the bucket the realised return
fell in, r_i, out of K buckets. With n observations:

  bucket of a return x (edges e_1 < … < e_{K−1}):  b(x) = #{j : e_j ≤ x}, so bucket k holds e_k ≤ x < e_{k+1}
  hit rate               h   = (1/n) Σ 1[a_i = r_i],  k = n·h hits
  answer shares          q_j = (1/n) Σ 1[a_i = j];   realised shares  p_j = (1/n) Σ 1[r_i = j]
  chance rate            p_e = Σ_j q_j · p_j
      the hit rate expected when answers are independent of outcomes but keep their own bucket frequencies and
      those of the realised returns: Cohen's (1960) expected agreement. It is not 1/K: a model that always says
      "flat" in a quarter where most returns were flat scores well above 1/K without remembering anything.
  modal rate             max_j p_j, the hit rate of always naming the most frequent realised bucket (for reference)
  excess                 h − p_e, how far recall beats chance
  Cohen's kappa          κ = (h − p_e) / (1 − p_e)
  binomial test          p = P(X ≥ k), X ~ Binomial(n, p_e), one-sided (scipy.stats.binomtest)

The test treats the shares as fixed, as the usual test of kappa does; with few observations read it as a guide.
Within one quarter the realised shares are that quarter's, so a model that only knows the market went down
scores at chance there: the per-quarter rows measure recall of which tickers did better, and the pooled row
(all quarters, pooled shares) also credits knowing each quarter's direction.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

SUMMARY_COLUMNS = ["n", "hits", "hit_rate", "chance_rate", "modal_rate", "excess", "kappa", "p_value"]


def bucket_index(returns_pct: Sequence[float] | np.ndarray, edges: Sequence[float]) -> np.ndarray:
    """Bucket of each return: the number of edges at or below it (0 … len(edges)); a return on an edge goes up."""
    bounds = np.asarray(edges, dtype=float)
    if len(bounds) and not np.all(np.diff(bounds) > 0):
        raise ValueError(f"bucket edges must increase strictly, got {bounds.tolist()}")
    x = np.asarray(returns_pct, dtype=float)
    if not np.isfinite(x).all():
        raise ValueError("returns must be finite to be bucketed")
    return np.searchsorted(bounds, x, side="right")


def chance_rate(answers: np.ndarray, truth: np.ndarray, n_buckets: int) -> float:
    """p_e = Σ_j q_j · p_j (Cohen's expected agreement); NaN without observations."""
    answers, truth = np.asarray(answers, dtype=int), np.asarray(truth, dtype=int)
    if len(answers) == 0:
        return float("nan")
    q = np.bincount(answers, minlength=n_buckets) / len(answers)
    p = np.bincount(truth, minlength=n_buckets) / len(truth)
    return float(q @ p)


def recall_test(answers: Sequence[int], truth: Sequence[int], n_buckets: int) -> dict[str, float | int]:
    """Hits, hit rate, chance rate, modal rate, excess, kappa and the one-sided binomial p of one group."""
    from scipy import stats
    a, r = np.asarray(answers, dtype=int), np.asarray(truth, dtype=int)
    if a.shape != r.shape:
        raise ValueError(f"{len(a)} answers against {len(r)} outcomes")
    if len(a) and (min(a.min(), r.min()) < 0 or max(a.max(), r.max()) >= n_buckets):
        raise ValueError(f"bucket indices must lie in 0..{n_buckets - 1}")
    n = len(a)
    nan = float("nan")
    if n == 0:
        return {"n": 0, "hits": 0, "hit_rate": nan, "chance_rate": nan, "modal_rate": nan, "excess": nan, "kappa": nan,
                "p_value": nan}
    hits = int((a == r).sum())
    h, pe = hits / n, chance_rate(a, r, n_buckets)
    pe = min(1.0, max(0.0, pe))  # rounding may step past the bounds binomtest accepts
    return {"n": n, "hits": hits, "hit_rate": h, "chance_rate": pe,
            "modal_rate": float(np.bincount(r, minlength=n_buckets).max() / n), "excess": h - pe,
            "kappa": (h - pe) / (1 - pe) if pe < 1 else nan,
            "p_value": float(stats.binomtest(hits, n, pe, alternative="greater").pvalue)}


def recall_table(observations: pd.DataFrame, by: list[str], n_buckets: int, answer: str = "answer_index",
                 truth: str = "realised_index") -> pd.DataFrame:
    """One row of ``recall_test`` per group of ``by`` (in order of first appearance), its keys first."""
    missing = [c for c in (*by, answer, truth) if c not in observations.columns]
    if missing:
        raise ValueError(f"missing column(s) {', '.join(missing)}")
    rows = []
    for keys, group in observations.groupby(by, sort=False, dropna=False):
        keys = keys if isinstance(keys, tuple) else (keys,)
        rows.append({**dict(zip(by, keys, strict=True)), **recall_test(group[answer].to_numpy(), group[truth].to_numpy(), n_buckets)})
    return pd.DataFrame(rows, columns=[*by, *SUMMARY_COLUMNS])
