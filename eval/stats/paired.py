"""Paired comparisons of two configurations on shared scenarios: n counts scenarios, never replicates.

Runs are paired on (scenario, replicate) so that both sides keep the same replicates, then the pairs of each
scenario are averaged (``madbench.eval.stats.units``): a_i and b_i are scenario i's means. For differences
d_i = a_i − b_i over n scenarios (mean d̄, standard deviation s_d):
  t = d̄ / (s_d / √n),  p = 2·(1 − F_t(|t|; n−1))          (scipy.stats.ttest_rel)
  CI = d̄ ± t_{1−α/2, n−1} · s_d / √n                     (its confidence_interval)
  Cohen's d_z = d̄ / s_d = t / √n
  Wilcoxon signed-rank on the d_i as a distribution-free check (scipy.stats.wilcoxon).

Beside them, where some scenario has replicates: ``n_runs`` the paired runs, ``within_sd_a``/``within_sd_b`` each
side's mean within-scenario SD of the replicates, and a linear mixed model on the paired runs with a random
intercept per scenario, y_{cs j} = β₀ + β·1[c = a] + u_s + ε_{csj}, u_s ~ N(0, τ²), ε ~ N(0, σ²) (statsmodels
``mixedlm``, REML): ``mixed_diff`` = β̂ and ``mixed_p`` its Wald p. It is the check beside the test, not the test:
with a random intercept alone it takes the replicates of a (config, scenario) as independent given the scenario, so
where they agree more closely than configs differ from scenario to scenario (a deterministic analyst repeats
itself) its p is smaller than the paired test's on the scenario means, which stays the primary test; with every
scenario's replicates identical (within ``degenerate.PAIRED_TOL`` of the scale) it is not fitted, and ``note`` says so. ``p_adj`` is p adjusted within the family of
every comparison of one analysis (``madbench.eval.stats.family``; p itself for a comparison made alone).

Beside each difference, what each side spent on the same n pairs: mean tokens per run (prompt + completion of
every answered call, a cached answer with the tokens it was first answered with) and mean cost per run in US
dollars (what was paid, over all of a run's attempts: an answer another run paid for costs nothing; NaN when any of
those runs has an unknown cost), from runs.parquet's ``prompt_tokens``, ``completion_tokens`` and ``cost_paid_usd``
(``cost_usd``, its last attempt's, in tables written before it). "Debate beats equal compute" is a
difference whose two sides spent about the same tokens.

A comparison whose differences carry no spread to test (fewer than 2 pairs, all equal, or all within rounding of
zero: ``madbench.eval.stats.degenerate``) has no t, p or d_z (NaN, printed n/a), its CI is the range of the differences,
and ``note`` says why; it never marks a difference in the comparison table.
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from madbench.eval.stats.degenerate import PAIRED_TOL, rounding_problem, spread_problem
from madbench.eval.stats.frame import pair_keys
from madbench.eval.stats.units import SCENARIO, within_sd

COMPUTE_FIELDS = ("tokens_a", "tokens_b", "cost_usd_a", "cost_usd_b")


@dataclass(frozen=True)
class PairedComparison:
    metric: str
    a: str
    b: str
    #: Scenarios compared (each the mean of its paired replicates).
    n: int
    #: Paired runs behind those scenarios (n when there are no replicates).
    n_runs: int
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
    #: p adjusted within the analysis's family of tests (``family.adjust_family``).
    p_adj: float
    d: float
    wilcoxon_p: float
    #: Mean within-scenario SD of each side's replicates (NaN without replicates).
    within_sd_a: float
    within_sd_b: float
    #: The mixed model's a − b and its p (NaN without replicates, or when the paired test is not made).
    mixed_diff: float
    mixed_p: float
    unpaired_a: int  # rows of a with no finite partner in b (reported, never silently dropped)
    unpaired_b: int
    #: Why the comparison was not tested, or what the mixed model warned of ("" when neither).
    note: str = ""

    def record(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None or k not in COMPUTE_FIELDS}


def paired_arrays(runs: pd.DataFrame, a: str, b: str, metric: str) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Align a and b by scenario (and replicate); return the scenario means of the finite pairs and the unpaired
    run counts."""
    paired, unpaired_a, unpaired_b = _paired_frame(runs, a, b, metric)
    means = by_scenario(paired)
    return means["a"].to_numpy(), means["b"].to_numpy(), unpaired_a, unpaired_b


def scenario_differences(runs: pd.DataFrame, a: str, b: str, metric: str) -> pd.Series:
    """d_s = ā_s − b̄_s per scenario (replicates paired, then averaged), indexed by scenario."""
    means = by_scenario(_paired_frame(runs, a, b, metric)[0])
    return means["a"] - means["b"]


def by_scenario(paired: pd.DataFrame) -> pd.DataFrame:
    """The paired runs averaged within each scenario (x̄_s over its paired replicates), in first-seen order."""
    return paired.groupby(level=SCENARIO, sort=False).mean()


def mixed_model(paired: pd.DataFrame) -> tuple[float, float, str]:
    """(β̂, its p, a note) of y ~ C(side) with a random intercept per scenario, on the paired runs (see the module
    docstring). A fit that converges on the boundary (τ² = 0) or not at all says so in the note."""
    import statsmodels.formula.api as smf
    long = pd.concat([pd.DataFrame({"y": paired[s].to_numpy(), "side": s, "scenario": paired.index.get_level_values(SCENARIO)})
                      for s in ("b", "a")], ignore_index=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit = smf.mixedlm("y ~ C(side, Treatment('b'))", long, groups=long["scenario"]).fit(reml=True)
    term = "C(side, Treatment('b'))[T.a]"
    said = sorted({str(w.message).splitlines()[0] for w in caught})
    return float(fit.params[term]), float(fit.pvalues[term]), "; ".join(f"mixed model: {m}" for m in said)


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
            "cost_usd": next((mean(rows[c]) for c in ("cost_paid_usd", "cost_usd") if c in runs.columns), None)}  # paid: all attempts


def paired_test(x_a: np.ndarray, x_b: np.ndarray, confidence: float = 0.95, metric: str = "the metric") -> dict:
    """t, p, CI, d_z and Wilcoxon p for paired samples; NaN, with the reason in ``note``, where a statistic is
    undefined or the differences are no difference (``madbench.eval.stats.degenerate``: n < 2, no spread, within rounding of 0)."""
    from scipy import stats
    d = np.asarray(x_a, float) - np.asarray(x_b, float)
    n = len(d)
    nan = float("nan")
    rounding = rounding_problem(x_a, x_b, metric)
    spread = spread_problem(d)
    if rounding or spread:  # no sampling spread to test against: the range of the differences, and why
        low, high = (float(d.min()), float(d.max())) if n >= 2 else (nan, nan)
        wil = nan if rounding or n < 2 else float(stats.wilcoxon(d).pvalue)  # equal non-zero differences: ranks still count
        return {"n": n, "diff": float(d.mean()) if n else nan, "ci_low": low, "ci_high": high, "t": nan, "p": nan, "d": nan,
                "wilcoxon_p": wil, "note": f"not tested: {rounding or spread}"}
    res = stats.ttest_rel(x_a, x_b)
    ci = res.confidence_interval(confidence)
    return {"n": n, "diff": float(d.mean()), "ci_low": float(ci.low), "ci_high": float(ci.high), "t": float(res.statistic),
            "p": float(res.pvalue), "d": float(d.mean() / d.std(ddof=1)), "wilcoxon_p": float(stats.wilcoxon(d).pvalue), "note": ""}


def compare(runs: pd.DataFrame, a: str, b: str, metric: str, confidence: float = 0.95) -> PairedComparison:
    paired, un_a, un_b = _paired_frame(runs, a, b, metric)
    means = by_scenario(paired)
    spent_a, spent_b = compute_per_run(runs, a, paired.index), compute_per_run(runs, b, paired.index)
    test = paired_test(means["a"].to_numpy(), means["b"].to_numpy(), confidence, metric)
    nan = float("nan")
    mixed_diff, mixed_p = nan, nan
    scenarios = paired.index.get_level_values(SCENARIO).to_series().reset_index(drop=True)
    spread_a = within_sd(paired["a"].reset_index(drop=True), scenarios)
    spread_b = within_sd(paired["b"].reset_index(drop=True), scenarios)
    if len(paired) > len(means) and not test["note"]:  # replicates: the mixed model beside the test on the means
        if max(spread_a, spread_b) <= PAIRED_TOL * max(1.0, float(np.abs(paired.to_numpy()).max())):
            # identical replicates carry no replicate noise: the model would count copies as evidence
            test["note"] = "mixed model not fitted: every scenario's replicates are identical (no replicate noise to model)"
        else:
            mixed_diff, mixed_p, test["note"] = mixed_model(paired)
    return PairedComparison(metric=metric, a=a, b=b, n_runs=len(paired), unpaired_a=un_a, unpaired_b=un_b,
                            tokens_a=spent_a["tokens"], tokens_b=spent_b["tokens"],
                            cost_usd_a=spent_a["cost_usd"], cost_usd_b=spent_b["cost_usd"], p_adj=test["p"],
                            within_sd_a=spread_a, within_sd_b=spread_b, mixed_diff=mixed_diff, mixed_p=mixed_p, **test)


def all_pairs(runs: pd.DataFrame, configs: list[str], metrics: list[str]) -> list[PairedComparison]:
    return [compare(runs, a, b, m) for m in metrics for i, a in enumerate(configs) for b in configs[i + 1:]]


def choose_pairs(configs: list[str], declared: list[tuple[str, str]] | None) -> tuple[list[tuple[str, str]], bool, str]:
    """The (a, b) comparisons to make, each a − b, whether they are the declared pairs, and a line saying which.

    ``declared``: the batch's ``pairs:`` as (treatment, control), or None to compare every pair. Declared pairs give
    treatment − control (what the treatment adds), the ones whose two configs are both among ``configs``; every pair
    of ``configs``, in column order, when none is declared or none of those declared is among them."""
    every = [(a, b) for i, a in enumerate(configs) for b in configs[i + 1:]]
    if declared is None:
        return every, False, "every pair of configurations, a − b in column order"
    inside = [(t, c) for t, c in declared if t in configs and c in configs]
    if not inside:
        why = "the batch declares no pairs" if not declared else "none of the batch's declared pairs is among these configurations"
        return every, False, f"every pair of configurations, a − b in column order ({why})"
    left = [f"{t} − {c}" for t, c in declared if (t, c) not in inside]
    line = "the batch's declared pairs: a is the treatment, b its control, a − b what the treatment adds (--all-pairs: every pair)"
    return inside, True, line + (f"; not among these configurations: {', '.join(left)}" if left else "")


def chosen_pairs(runs: pd.DataFrame, pairs: list[tuple[str, str]], metrics: list[str]) -> list[PairedComparison]:
    return [compare(runs, a, b, m) for m in metrics for a, b in pairs]
