"""Paired comparisons of two configurations on shared scenarios: n counts scenarios, never replicates.

Runs are paired on (scenario, replicate) so that both sides keep the same replicates, then the pairs of each
scenario are averaged (``madbench.eval.stats.units``): a_i and b_i are scenario i's means. For differences
d_i = a_i − b_i over n scenarios (mean d̄, standard deviation s_d), the ordinary paired t takes the scenarios as
independent:
  t = d̄ / (s_d / √n),  p = 2·(1 − F_t(|t|; n−1))          (scipy.stats.ttest_rel)
  CI = d̄ ± t_{1−α/2, n−1} · s_d / √n                     (its confidence_interval)
  Cohen's d_z = d̄ / s_d = t / √n
  Wilcoxon signed-rank on the d_i as a distribution-free check (scipy.stats.wilcoxon; it too takes them as independent).

Scenarios of one quarter share its market, so their differences are correlated. Where the runs carry
``invest_quarter`` (``units.QUARTER``), t, p, the CI, ``se`` and ``df`` are the quarter-clustered test of d̄
(``madbench.eval.stats.clustered``: CR2 standard error, Satterthwaite degrees of freedom), ``cluster_by`` names the
quarter and ``n_clusters`` counts the quarters; the ordinary t stays beside it as ``t_unclustered``,
``p_unclustered`` and ``se_unclustered``. With no quarter column, or every scenario in a quarter of its own, the
test is the ordinary t (``cluster_by`` then names the scenario, each its own cluster); with all the scenarios in one
quarter no clustered test exists, and the ordinary t stands with a ``note`` saying so.

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

from madbench.eval.stats.clustered import cr2_mean_test
from madbench.eval.stats.degenerate import PAIRED_TOL, rounding_problem, spread_problem
from madbench.eval.stats.frame import pair_keys
from madbench.eval.stats.units import QUARTER, SCENARIO, within_sd

COMPUTE_FIELDS = ("tokens_a", "tokens_b", "cost_usd_a", "cost_usd_b")
#: The ordinary t beside a clustered test, and what names the clusters.
UNCLUSTERED_FIELDS = ("p_unclustered", "t_unclustered", "se_unclustered", "cluster_by", "n_clusters")


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
    #: The primary test: quarter-clustered where the runs carry quarters (see the module docstring).
    t: float
    p: float
    #: p adjusted within the analysis's family of tests (``family.adjust_family``).
    p_adj: float
    #: The ordinary paired t, which takes every scenario as independent, beside the primary test.
    p_unclustered: float
    t_unclustered: float
    #: Standard error of ``diff`` and degrees of freedom behind t, p and the CI, and the ordinary t's standard error.
    se: float
    se_unclustered: float
    df: float
    #: What t, p and the CI are clustered by (``invest_quarter``, or ``scenario_id``: each scenario its own cluster,
    #: the ordinary t), and how many clusters.
    cluster_by: str
    n_clusters: int
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


def paired_test(x_a: np.ndarray, x_b: np.ndarray, confidence: float = 0.95, metric: str = "the metric",
                clusters: np.ndarray | None = None, cluster_by: str = QUARTER) -> dict:
    """t, p, CI, d_z and Wilcoxon p for paired samples; NaN, with the reason in ``note``, where a statistic is
    undefined or the differences are no difference (``madbench.eval.stats.degenerate``: n < 2, no spread, within rounding of 0).

    ``clusters``: each pair's cluster (its quarter, named ``cluster_by``), or None for independent pairs. With some
    cluster shared by two pairs, t, p and the CI are the CR2 test (``clustered.cr2_mean_test``) and the ordinary t
    is beside them (``*_unclustered``); otherwise the ordinary t is both."""
    from scipy import stats
    d = np.asarray(x_a, float) - np.asarray(x_b, float)
    n = len(d)
    nan = float("nan")
    if clusters is not None and len(clusters) != n:
        raise ValueError(f"paired_test: {len(clusters)} cluster labels for {n} pairs")
    n_clusters = len(set(np.asarray(clusters).tolist())) if clusters is not None else n
    by = cluster_by if clusters is not None and n_clusters > 1 else SCENARIO
    rounding = rounding_problem(x_a, x_b, metric)
    spread = spread_problem(d)
    if rounding or spread:  # no sampling spread to test against: the range of the differences, and why
        low, high = (float(d.min()), float(d.max())) if n >= 2 else (nan, nan)
        wil = nan if rounding or n < 2 else float(stats.wilcoxon(d).pvalue)  # equal non-zero differences: ranks still count
        return {"n": n, "diff": float(d.mean()) if n else nan, "ci_low": low, "ci_high": high, "t": nan, "p": nan, "d": nan,
                "wilcoxon_p": wil, "note": f"not tested: {rounding or spread}", "t_unclustered": nan, "p_unclustered": nan,
                "se": nan, "se_unclustered": nan, "df": nan, "cluster_by": by, "n_clusters": n if by == SCENARIO else n_clusters}
    res = stats.ttest_rel(x_a, x_b)
    ci = res.confidence_interval(confidence)
    se_plain = float(d.std(ddof=1) / np.sqrt(n))
    out = {"n": n, "diff": float(d.mean()), "ci_low": float(ci.low), "ci_high": float(ci.high), "t": float(res.statistic),
           "p": float(res.pvalue), "d": float(d.mean() / d.std(ddof=1)), "wilcoxon_p": float(stats.wilcoxon(d).pvalue), "note": "",
           "t_unclustered": float(res.statistic), "p_unclustered": float(res.pvalue), "se": se_plain, "se_unclustered": se_plain,
           "df": float(n - 1), "cluster_by": by, "n_clusters": n}
    if clusters is None or n_clusters == n:  # no cluster shared: the ordinary t is the clustered one, exactly
        return out
    if n_clusters == 1:
        return out | {"note": f"not clustered: all {n} scenarios in one {cluster_by} (no replication between clusters); "
                              "t and p are the ordinary paired t's, which takes them as independent"}
    cr2 = cr2_mean_test(d, np.asarray(clusters), confidence)
    out |= {"t": cr2.t, "p": cr2.p, "ci_low": cr2.ci_low, "ci_high": cr2.ci_high, "se": cr2.se, "df": cr2.df,
            "n_clusters": cr2.n_clusters}
    if not cr2.se > 0:  # every cluster's differences average to d̄: nothing between clusters to test against
        out["note"] = (f"not tested: no spread between the {cr2.n_clusters} {cluster_by} clusters (each cluster's mean "
                       "difference equals the overall mean)")
    return out


def scenario_clusters(runs: pd.DataFrame, scenarios: pd.Index) -> np.ndarray | None:
    """Each of ``scenarios``' quarter (``units.QUARTER``) in their order; None when the table carries none (no such
    column, or the column empty). A scenario with no quarter or with two among otherwise quartered runs is an error."""
    if QUARTER not in runs.columns or runs[QUARTER].isna().all():
        return None
    quarters = runs.loc[runs[SCENARIO].isin(scenarios), [SCENARIO, QUARTER]]
    blank = quarters.loc[quarters[QUARTER].isna(), SCENARIO].unique()
    if len(blank):
        raise ValueError(f"{QUARTER} is missing for {len(blank)} scenario(s) (e.g. {blank[0]}) while other runs carry it; "
                         "the quarter-clustered test needs every scenario's quarter")
    many = quarters.groupby(SCENARIO)[QUARTER].nunique()
    if many.gt(1).any():
        raise ValueError(f"{many.gt(1).sum()} scenario(s) have more than one {QUARTER} (e.g. {many[many.gt(1)].index[0]}); "
                         "a scenario's runs share its quarter")
    return quarters.groupby(SCENARIO)[QUARTER].first().reindex(scenarios).to_numpy()


def compare(runs: pd.DataFrame, a: str, b: str, metric: str, confidence: float = 0.95) -> PairedComparison:
    paired, un_a, un_b = _paired_frame(runs, a, b, metric)
    means = by_scenario(paired)
    spent_a, spent_b = compute_per_run(runs, a, paired.index), compute_per_run(runs, b, paired.index)
    clusters = scenario_clusters(runs, means.index)
    test = paired_test(means["a"].to_numpy(), means["b"].to_numpy(), confidence, metric, clusters)
    nan = float("nan")
    mixed_diff, mixed_p = nan, nan
    scenarios = paired.index.get_level_values(SCENARIO).to_series().reset_index(drop=True)
    spread_a = within_sd(paired["a"].reset_index(drop=True), scenarios)
    spread_b = within_sd(paired["b"].reset_index(drop=True), scenarios)
    if len(paired) > len(means) and np.isfinite(test["t_unclustered"]):  # replicates: the mixed model beside the test
        if max(spread_a, spread_b) <= PAIRED_TOL * max(1.0, float(np.abs(paired.to_numpy()).max())):
            # identical replicates carry no replicate noise: the model would count copies as evidence
            said = "mixed model not fitted: every scenario's replicates are identical (no replicate noise to model)"
        else:
            mixed_diff, mixed_p, said = mixed_model(paired)
        test["note"] = "; ".join(x for x in (test["note"], said) if x)
    return PairedComparison(metric=metric, a=a, b=b, n_runs=len(paired), unpaired_a=un_a, unpaired_b=un_b,
                            tokens_a=spent_a["tokens"], tokens_b=spent_b["tokens"],
                            cost_usd_a=spent_a["cost_usd"], cost_usd_b=spent_b["cost_usd"], p_adj=test["p"],
                            within_sd_a=spread_a, within_sd_b=spread_b, mixed_diff=mixed_diff, mixed_p=mixed_p, **test)


def clustered(comp: PairedComparison) -> bool:
    """Whether the comparison's t and p are clustered (some cluster holds two scenarios), not the ordinary t."""
    return comp.n_clusters < comp.n and comp.cluster_by != SCENARIO


def repeated_columns(pairs: list[PairedComparison]) -> tuple[str, ...]:
    """The columns a printed table leaves out: with no comparison clustered, the unclustered ones repeat t, p and se."""
    return () if any(clustered(c) for c in pairs) else UNCLUSTERED_FIELDS


def clustering_line(pairs: list[PairedComparison]) -> str:
    """What the tests' p is, for the line under a table: quarter-clustered, or the ordinary paired t, and why."""
    tested = [c for c in pairs if c.p == c.p]
    inside = [c for c in tested if clustered(c)]
    if not tested:
        return ""
    if not inside:
        if any(c.note.startswith("not clustered") for c in tested):
            why = f"every scenario in one {QUARTER}"
        elif any(c.cluster_by == QUARTER for c in tested):
            why = "every scenario in a quarter of its own"
        else:
            why = f"no {QUARTER} to cluster by"
        return f"p: the ordinary paired t on scenario means, which takes the scenarios as independent ({why})"
    counts = sorted({c.n_clusters for c in inside})
    clusters = f"{counts[0]} clusters" if len(counts) == 1 else f"{counts[0]}–{counts[-1]} clusters"
    left = len(tested) - len(inside)
    rest = (f"; {left} of the {len(tested)} tests the ordinary paired t (their scenarios each in a quarter of its own, "
            "or all in one)") if left else ""
    return (f"p: clustered by {QUARTER} (CR2 standard errors, Satterthwaite df), {clusters}; p_unclustered, the "
            f"ordinary paired t that takes the scenarios as independent, beside it{rest}")


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
