"""One analysis of a runs table: every statistic the `stats` command prints and the report shows."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from madbench.data.atomic import atomic_write
from madbench.data.markdown import markdown_table
from madbench.eval.stats.beats import beats_baseline
from madbench.eval.stats.correlate import agent_rho_correlations, computed, delta_correlations, not_computed, quality_correlations
from madbench.eval.stats.degenerate import Degenerate
from madbench.eval.stats.describe import summarise
from madbench.eval.stats.dynamics_table import DYNAMICS_LEGEND, dynamics_table
from madbench.eval.stats.frame import check_runs, ok_runs, ordered_configs
from madbench.eval.stats.paired import PairedComparison, choose_pairs, chosen_pairs
from madbench.eval.stats.regress import RankDeficient, build_formula, ols
from madbench.eval.stats.tables import ComparisonTable, comparison_table

DEFAULT_METRICS = ["sharpe", "total_return_pct", "excess_return_pct", "sortino", "volatility", "max_drawdown_pct", "rho_bar"]
PILLAR_COLUMNS = ["crit_logical_validity", "crit_evidential_support", "crit_alternative_consideration", "crit_causal_alignment"]
PERFORMANCE = ["sharpe", "total_return_pct"]


@dataclass
class Analysis:
    configs: list[str]
    metrics: list[str]
    summaries: list[dict]
    pairs: list[PairedComparison]
    table: ComparisonTable
    beats: list[dict]
    correlations: list[dict] = field(default_factory=list)
    ols_formula: str | None = None
    ols_table: pd.DataFrame | None = None
    ols_note: str | None = None
    #: Debate dynamics by config (``madbench.eval.stats.dynamics_table``); empty when the runs predate its columns.
    dynamics: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: Which comparisons ``pairs`` holds (``paired.choose_pairs``): the batch's declared pairs, or every pair.
    pairs_shown: str = ""

    def markdown(self) -> str:
        parts = ["## Comparison (paired on scenario and replicate)", "", self.table.markdown(), ""]
        parts += ["## Paired differences", "", f"Comparisons: {self.pairs_shown}.", "", _md(self.paired_frame()), ""]
        if self.beats:
            parts += ["## Beats 1/N (binomial, one-sided)", "", _md(pd.DataFrame(self.beats)), ""]
        if len(self.dynamics):
            parts += [f"## Debate dynamics (means over runs; {DYNAMICS_LEGEND})", "", _md(self.dynamics), ""]
        if self.correlations:
            parts += ["## Reasoning quality against performance", ""]
            if self.computed_correlations:
                parts += [_md(pd.DataFrame(self.computed_correlations)), ""]
            if self.skipped_correlations:
                parts += [self.skipped_heading + " (every row and its reason: correlations.csv)", "",
                          *[f"- {line}" for line in self.skipped_correlations], ""]
        heading = f"## OLS `{self.ols_formula}`" if self.ols_formula else "## OLS"
        if self.ols_table is not None:
            parts += [heading, "", _md(self.ols_table), ""]
        elif self.ols_note:
            parts += [heading, "", self.ols_note, ""]
        return "\n".join(parts)

    def paired_frame(self) -> pd.DataFrame:
        """The paired table as printed: the note column only when some comparison was not tested."""
        frame = pd.DataFrame([p.record() for p in self.pairs])
        return frame.drop(columns="note") if "note" in frame and not frame["note"].astype(bool).any() else frame

    @property
    def computed_correlations(self) -> list[dict]:
        return computed(self.correlations)

    @property
    def skipped_correlations(self) -> list[str]:
        """Why the other rows were not computed, one line per reason (``correlate.not_computed``)."""
        return not_computed(self.correlations)

    @property
    def skipped_heading(self) -> str:
        n, total = len(self.correlations) - len(self.computed_correlations), len(self.correlations)
        if n == total:
            return f"None of the {total} correlations could be computed"
        return f"Not computed: {n} of {total} correlations"

    def write_csvs(self, out: str | Path) -> list[Path]:
        """Each table as ``<out>/<table>.csv`` (the folder made if missing); the paths written."""
        out = Path(out)
        frames = {"summary": pd.DataFrame(self.summaries), "paired": pd.DataFrame([p.record() for p in self.pairs]),
                  "beats_1n": pd.DataFrame(self.beats), "correlations": pd.DataFrame(self.correlations)}
        if len(self.dynamics):
            frames["dynamics"] = self.dynamics
        if self.ols_table is not None:
            frames["ols"] = self.ols_table
        else:  # a table from an earlier fit must not stand beside statistics that refuse one
            (out / "ols.csv").unlink(missing_ok=True)
        written = []
        for name, frame in frames.items():
            written.append(atomic_write(out / f"{name}.csv", lambda p, f=frame: f.to_csv(p, index=False)))
        return written


def _md(df: pd.DataFrame) -> str:
    return markdown_table(df) if len(df) else "(none)"


def analyse(runs: pd.DataFrame, where: str, compare: list[str] | None = None, metrics: list[str] | None = None,
            correction: str = "none", rounds: pd.DataFrame | None = None,
            declared: list[tuple[str, str]] | None = None) -> Analysis:
    """``declared``: the batch's pairs as (treatment, control) (``frame.batch_pairs``), whose comparisons alone are
    tested, treatment − control; None tests every pair of configurations."""
    metrics = metrics or [m for m in DEFAULT_METRICS if m in runs.columns]
    check_runs(runs, where, metrics)
    configs = ordered_configs(runs, compare, where)
    runs = runs[runs["config"].isin(configs)]
    ok = ok_runs(runs)
    which, only_declared, shown = choose_pairs(configs, declared)
    pairs = chosen_pairs(ok, which, metrics)
    summaries = summarise(runs, configs, metrics)
    table = comparison_table(summaries, pairs, configs, metrics, correction, "the declared pairs only" if only_declared else "")
    analysis = Analysis(configs, metrics, summaries, pairs, table,
                        beats_baseline(ok, configs), dynamics=dynamics_table(runs, configs), pairs_shown=shown)
    if "rho_bar" in ok.columns and ok["rho_bar"].notna().sum() >= 3:
        ys = [y for y in PERFORMANCE if y in ok.columns]
        xs = ["rho_bar", *[p for p in PILLAR_COLUMNS if p in ok.columns]]
        groupings = {"pooled": None, "within ablation": "batch" if "batch" in ok.columns else None, "within condition": "config"}
        if "ablation" in ok.columns:
            groupings["within ablation"] = "ablation"
        if groupings["within ablation"] is None:
            del groupings["within ablation"]
        analysis.correlations = quality_correlations(ok, xs, ys, groupings)
        if rounds is not None and len(rounds):
            analysis.correlations += agent_rho_correlations(ok, rounds, ys)
        scored = [c for c in configs if ok.loc[ok["config"] == c, "rho_bar"].notna().any()]
        analysis.correlations += delta_correlations(ok, [(a, b) for i, a in enumerate(scored) for b in scored[i + 1:]])
        try_ols(analysis, ok)
    return analysis


def try_ols(analysis: Analysis, ok: pd.DataFrame) -> None:
    """Fit the OLS when the data allow it; otherwise say why in the output (never a silent gap)."""
    if "sharpe" not in ok.columns:
        analysis.ols_note = "no sharpe column"
        return
    ablation = "ablation" if "ablation" in ok.columns else ("batch" if "batch" in ok.columns else None)
    complete = ok[["sharpe", "rho_bar"]].dropna()
    if len(complete) < 4:
        analysis.ols_note = f"skipped: only {len(complete)} run(s) with both sharpe and rho_bar"
        return
    analysis.ols_formula = build_formula(ok, "sharpe", "rho_bar", ablation, "config")
    try:
        analysis.ols_formula, _, analysis.ols_table = ols(ok, ablation=ablation, treatment="config")
    except (Degenerate, RankDeficient) as exc:  # e.g. a two-valued rho_bar: shown in place of the table, never a slope
        analysis.ols_note = f"not fitted: {exc}"
