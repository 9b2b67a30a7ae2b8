"""One analysis of a runs table: every statistic the `stats` command prints and the report shows."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pandas as pd

from madbench.data.atomic import atomic_write
from madbench.data.errors import InputError
from madbench.debate.run_metrics import metric_columns, named_metric_columns
from madbench.eval.stats import sections
from madbench.eval.stats.analysis_data import AnalysisData
from madbench.eval.stats.beats import PAPER_SHARE, beats_baseline
from madbench.eval.stats.correlate import agent_rho_correlations, delta_correlations, quality_correlations
from madbench.eval.stats.degenerate import Degenerate
from madbench.eval.stats.describe import summarise
from madbench.eval.stats.dynamics_table import dynamics_table
from madbench.eval.stats.family import DEFAULT_CORRECTION, adjust_family
from madbench.eval.stats.frame import check_runs, ok_runs, ordered_configs
from madbench.eval.stats.paired import (
    choose_pairs,
    chosen_pairs,
    scenario_clusters,
)
from madbench.eval.stats.planning import plan_pairs
from madbench.eval.stats.regress import RankDeficient, build_formula, ols
from madbench.eval.stats.tables import comparison_table
from madbench.eval.stats.units import QUARTER, SCENARIO, replicated, scenario_means

DEFAULT_METRICS = ["sharpe", "total_return_pct", "excess_return_pct", "sortino", "volatility", "max_drawdown_pct", "rho_bar"]
PILLAR_COLUMNS = ["crit_logical_validity", "crit_evidential_support", "crit_alternative_consideration", "crit_causal_alignment"]
PERFORMANCE = ["sharpe", "total_return_pct"]


class Analysis(AnalysisData):
    """An analysis, rendered section by section (``sections.SECTIONS``, read at each call)."""

    def markdown(self, paper_table: bool = False) -> str:
        """What `madbench stats` prints; ``paper_table``: with the paper's table reproduction."""
        return "\n".join(line for section in sections.SECTIONS for line in section.markdown(self, paper_table))

    def record(self) -> dict[str, Any]:
        """Everything `madbench stats --json` prints (NaN as null through ``frame.json_safe``)."""
        return {k: v for section in sections.SECTIONS for k, v in section.record(self).items()}

    def write_csvs(self, out: str | Path) -> list[Path]:
        """Each table as ``<out>/<table>.csv`` (the folder made if missing); the paths written."""
        out = Path(out)
        written = []
        for section in sections.SECTIONS:
            for name, frame in section.tables(self).items():
                if frame is None:
                    (out / f"{name}.csv").unlink(missing_ok=True)
                else:
                    written.append(atomic_write(out / f"{name}.csv", functools.partial(frame.to_csv, index=False)))
        return written


def analyse(runs: pd.DataFrame, where: str, compare: list[str] | None = None, metrics: list[str] | None = None,
            correction: str = DEFAULT_CORRECTION, rounds: pd.DataFrame | None = None,
            declared: list[tuple[str, str]] | None = None, share: float = PAPER_SHARE,
            power: list[float] | None = None) -> Analysis:
    """Every statistic on scenario means (``units``). ``declared``: the batch's pairs as (treatment, control)
    (``frame.batch_pairs``), whose comparisons alone are tested, treatment − control; None tests every pair of
    configurations. ``correction``: how the family of every pair × metric is adjusted (holm, bh, none); ``share``:
    the share of wins over 1/N tested beside 1/2; ``power``: target powers to plan a design for (none: no planning)."""
    # the runs' own metrics (madbench.debate.run_metrics) by their names, and among the defaults
    runs, metrics = named_metric_columns(runs), metrics or [m for m in DEFAULT_METRICS if m in runs.columns] + metric_columns(runs)
    check_runs(runs, where, metrics)
    configs = ordered_configs(runs, compare, where)
    runs = runs[runs["config"].isin(configs)]
    ok = ok_runs(runs)
    try:  # the quarter-clustered tests need one quarter per scenario: said here, before any test
        scenario_clusters(ok, pd.Index(ok[SCENARIO].unique()))
    except ValueError as exc:
        raise InputError(where, str(exc), f"give every run of a scenario its {QUARTER}, or drop the column (the paired "
                         "tests then take the scenarios as independent)") from None
    which, only_declared, shown = choose_pairs(configs, declared)
    pairs = adjust_family(chosen_pairs(ok, which, metrics), correction)
    summaries = summarise(runs, configs, metrics)
    scope = "the declared pairs only" if only_declared else ""
    table = comparison_table(summaries, pairs, configs, metrics, correction, scope)
    analysis = Analysis(configs, metrics, summaries, pairs, table, beats_baseline(ok, configs, share=share),
                        dynamics=dynamics_table(runs, configs), pairs_shown=shown,
                        paper_table=comparison_table(summaries, pairs, configs, metrics, correction, scope, style="paper_convention"),
                        correction=correction, n_scenarios=int(ok[SCENARIO].nunique()), n_runs=len(ok), replicated=replicated(ok))
    if power:
        analysis.power = plan_pairs(ok, pairs, power)
    means = scenario_means(ok)
    if "rho_bar" in means.columns and means["rho_bar"].notna().sum() >= 3:
        ys = [y for y in PERFORMANCE if y in means.columns]
        xs = ["rho_bar", *[p for p in PILLAR_COLUMNS if p in means.columns]]
        groupings = {"pooled": None, "within ablation": "batch" if "batch" in means.columns else None, "within condition": "config"}
        if "ablation" in means.columns:
            groupings["within ablation"] = "ablation"
        if groupings["within ablation"] is None:
            del groupings["within ablation"]
        analysis.correlations = quality_correlations(means, xs, ys, groupings)
        if rounds is not None and len(rounds):
            analysis.correlations += agent_rho_correlations(ok, rounds, ys)
        scored = [c for c in configs if ok.loc[ok["config"] == c, "rho_bar"].notna().any()]
        analysis.correlations += delta_correlations(ok, [(a, b) for i, a in enumerate(scored) for b in scored[i + 1:]])
        try_ols(analysis, means)
    return analysis


def try_ols(analysis: Analysis, means: pd.DataFrame) -> None:
    """Fit the regression (``regress``) on scenario means when the data allow it; otherwise say why in the output
    (never a silent gap)."""
    if "sharpe" not in means.columns:
        analysis.ols_note = "no sharpe column"
        return
    ablation = "ablation" if "ablation" in means.columns else ("batch" if "batch" in means.columns else None)
    if ablation == "batch" and means["batch"].nunique() > 1 and means.groupby("config")["batch"].nunique().le(1).all():
        ablation = None  # a study of several batches: each config in one batch, so C(config) holds C(batch) already
    complete = means[["sharpe", "rho_bar"]].dropna()
    if len(complete) < 4:
        analysis.ols_note = f"skipped: only {len(complete)} config × scenario row(s) with both sharpe and rho_bar"
        return
    analysis.ols_formula = build_formula(means, "sharpe", "rho_bar", ablation, "config", SCENARIO)
    try:
        fit = ols(means, ablation=ablation, treatment="config")
    except (Degenerate, RankDeficient) as exc:  # e.g. a two-valued rho_bar: shown in place of the table, never a slope
        analysis.ols_note = f"not fitted: {exc}"
        return
    analysis.regression, analysis.ols_formula, analysis.ols_table = fit, fit.formula, fit.table


def adjust_across(analyses: list[Analysis], correction: str) -> None:
    """Make the paired tests of several analyses of one call (``stats --by``) one family: ``p_adj`` and the tables'
    superscripts are recomputed over all of them."""
    together = adjust_family([p for a in analyses for p in a.pairs], correction)
    start = 0
    for a in analyses:
        a.pairs, start = together[start:start + len(a.pairs)], start + len(a.pairs)
        scope = a.table.scope
        a.table = comparison_table(a.summaries, a.pairs, a.configs, a.metrics, correction, scope)
        a.paper_table = comparison_table(a.summaries, a.pairs, a.configs, a.metrics, correction, scope, style="paper_convention")
        a.family_size = sum(1 for p in together if p.p == p.p)
