"""Paired comparisons of two configurations on shared scenarios.

For differences d_i = a_i − b_i over n pairs (mean d̄, standard deviation s_d):
  t = d̄ / (s_d / √n),  p = 2·(1 − F_t(|t|; n−1))          (scipy.stats.ttest_rel)
  CI = d̄ ± t_{1−α/2, n−1} · s_d / √n                     (its confidence_interval)
  Cohen's d_z = d̄ / s_d = t / √n
  Wilcoxon signed-rank on the d_i as a distribution-free check (scipy.stats.wilcoxon).

Beside each difference, what each side spent on the same n pairs: mean tokens per run (prompt + completion of
every answered call, a cached answer with the tokens it was first answered with) and mean cost per run in US
dollars (what was paid then: a cached answer costs nothing; NaN when any of those runs has an unknown cost), from
runs.parquet's ``prompt_tokens``, ``completion_tokens`` and ``cost_usd``. "Debate beats equal compute" is a
difference whose two sides spent about the same tokens.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from eval.stats.frame import pair_keys

COMPUTE_FIELDS = ("tokens_a", "tokens_b", "cost_usd_a", "cost_usd_b")


@dataclass(frozen=True)
class PairedComparison:
    metric: str
    a: str
    b: str
    n: int
    diff: float
    ci_low: float
    ci_high: float
    #: Mean tokens and cost per run of each side over the same n pairs; None (and no column in the record) when the
    #: runs table has no such column, e.g. a Parquet of metrics alone.
    tokens_a: float | None
    tokens_b: float | None
    cost_usd_a: float | None
    cost_usd_b: float | None
    t: float
    p: float
    d: float
    wilcoxon_p: float
    unpaired_a: int  # rows of a with no finite partner in b (reported, never silently dropped)
    unpaired_b: int

    def record(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None or k not in COMPUTE_FIELDS}


def paired_arrays(runs: pd.DataFrame, a: str, b: str, metric: str) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Align a and b by scenario (and replicate); return the finite pairs and the unpaired counts."""
    paired, unpaired_a, unpaired_b = _paired_frame(runs, a, b, metric)
    return paired["a"].to_numpy(), paired["b"].to_numpy(), unpaired_a, unpaired_b


def _paired_frame(runs: pd.DataFrame, a: str, b: str, metric: str) -> tuple[pd.DataFrame, int, int]:
    """The finite pairs (columns a and b, indexed by the pair keys) and the unpaired counts."""
    keys = pair_keys(runs)
    side = {}
    for name in (a, b):
        rows = runs.loc[runs["config"] == name, [*keys, metric]]
        dup = rows.duplicated(keys)
        if dup.any():
            raise ValueError(f"config {name!r} has {int(dup.sum())} duplicate row(s) for the same {'/'.join(keys)}; pairing needs one each")
        side[name] = rows.set_index(keys)[metric].astype(float)
    joined = pd.concat({"a": side[a], "b": side[b]}, axis=1)
    finite = joined.notna().all(axis=1)
    paired = joined[finite]
    unpaired_a = int((joined["a"].notna() & ~finite).sum())
    unpaired_b = int((joined["b"].notna() & ~finite).sum())
    return paired, unpaired_a, unpaired_b


def compute_per_run(runs: pd.DataFrame, config: str, index: pd.Index) -> dict[str, float | None]:
    """Mean tokens and cost per run of ``config``'s runs at the pair keys ``index`` (see the module docstring):
    NaN over no pair or when one of the runs' values is unknown, None when the table has no such column."""
    rows = runs[runs["config"] == config].set_index(pair_keys(runs)).reindex(index)

    def mean(values: pd.Series) -> float:  # skipna=False: one unknown makes the mean unknown, not that of the rest
        return float(values.astype(float).mean(skipna=False)) if len(values) else float("nan")
    has_tokens = {"prompt_tokens", "completion_tokens"} <= set(runs.columns)
    return {"tokens": mean(rows["prompt_tokens"].astype(float) + rows["completion_tokens"].astype(float)) if has_tokens else None,
            "cost_usd": mean(rows["cost_usd"]) if "cost_usd" in runs.columns else None}


def paired_test(x_a: np.ndarray, x_b: np.ndarray, confidence: float = 0.95) -> dict[str, float]:
    """t, p, CI, d_z and Wilcoxon p for paired samples; NaN where the statistic is undefined (n < 2, zero spread)."""
    from scipy import stats
    d = np.asarray(x_a, float) - np.asarray(x_b, float)
    n = len(d)
    nan = float("nan")
    if n < 2:
        return {"n": n, "diff": float(d.mean()) if n else nan, "ci_low": nan, "ci_high": nan, "t": nan, "p": nan, "d": nan, "wilcoxon_p": nan}
    sd = float(d.std(ddof=1))
    if sd == 0.0:  # identical differences: no sampling spread, so the t statistic is undefined
        return {"n": n, "diff": float(d.mean()), "ci_low": float(d.mean()), "ci_high": float(d.mean()), "t": nan, "p": nan, "d": nan,
                "wilcoxon_p": nan if np.all(d == 0) else float(stats.wilcoxon(d).pvalue)}
    res = stats.ttest_rel(x_a, x_b)
    ci = res.confidence_interval(confidence)
    wil = nan if np.all(d == 0) else float(stats.wilcoxon(d).pvalue)
    return {"n": n, "diff": float(d.mean()), "ci_low": float(ci.low), "ci_high": float(ci.high), "t": float(res.statistic),
            "p": float(res.pvalue), "d": float(d.mean() / sd), "wilcoxon_p": wil}


def compare(runs: pd.DataFrame, a: str, b: str, metric: str, confidence: float = 0.95) -> PairedComparison:
    paired, un_a, un_b = _paired_frame(runs, a, b, metric)
    spent_a, spent_b = compute_per_run(runs, a, paired.index), compute_per_run(runs, b, paired.index)
    return PairedComparison(metric=metric, a=a, b=b, unpaired_a=un_a, unpaired_b=un_b,
                            tokens_a=spent_a["tokens"], tokens_b=spent_b["tokens"],
                            cost_usd_a=spent_a["cost_usd"], cost_usd_b=spent_b["cost_usd"],
                            **paired_test(paired["a"].to_numpy(), paired["b"].to_numpy(), confidence))


def all_pairs(runs: pd.DataFrame, configs: list[str], metrics: list[str]) -> list[PairedComparison]:
    return [compare(runs, a, b, m) for m in metrics for i, a in enumerate(configs) for b in configs[i + 1:]]


def from_t(t: float, n: int, diff: float, confidence: float = 0.95) -> dict[str, float]:
    """Recover p, d_z and the CI of a paired test reported only as (t, n, mean difference).

    p = 2·(1 − F_t(|t|; n−1)); d_z = t/√n; SE = d̄/t; CI = d̄ ± t_{1−α/2,n−1}·SE.
    """
    from scipy import stats
    df = n - 1
    se = diff / t
    crit = stats.t.ppf(0.5 + confidence / 2, df)
    return {"p": float(2 * stats.t.sf(abs(t), df)), "d": t / math.sqrt(n), "ci_low": diff - crit * abs(se), "ci_high": diff + crit * abs(se)}
