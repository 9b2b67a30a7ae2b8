"""One analysis of a runs table: every statistic the `stats` command prints and the report shows."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from madbench.data.atomic import atomic_write
from madbench.data.errors import InputError
from madbench.data.markdown import markdown_table
from madbench.eval.stats.batch_columns import batch_frame, batch_rows
from madbench.eval.stats.beats import PAPER_SHARE, beats_baseline
from madbench.eval.stats.correlate import agent_rho_correlations, computed, delta_correlations, not_computed, quality_correlations
from madbench.eval.stats.degenerate import Degenerate
from madbench.eval.stats.describe import summarise
from madbench.eval.stats.dynamics_table import DYNAMICS_LEGEND, dynamics_table
from madbench.eval.stats.family import DEFAULT_CORRECTION, adjust_family, family_line
from madbench.eval.stats.frame import check_runs, ok_runs, ordered_configs
from madbench.eval.stats.paired import (
    PairedComparison,
    choose_pairs,
    chosen_pairs,
    clustering_line,
    repeated_columns,
    scenario_clusters,
)
from madbench.eval.stats.planning import plan_pairs
from madbench.eval.stats.regress import RankDeficient, Regression, build_formula, ols
from madbench.eval.stats.tables import ComparisonTable, comparison_table
from madbench.eval.stats.units import QUARTER, SCENARIO, replicated, scenario_means

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
    #: The fitted regression (effects, clusters, warnings) when there is one.
    regression: Regression | None = None
    #: The same table with the paper's uncorrected p < 0.15 superscripts, for reproducing its tables only.
    paper_table: ComparisonTable | None = None
    correction: str = DEFAULT_CORRECTION
    #: Scenarios and finished runs analysed, and whether some scenario has replicates.
    n_scenarios: int = 0
    n_runs: int = 0
    replicated: bool = False
    #: Planning rows (``planning.plan_pairs``) when asked for.
    power: list[dict] = field(default_factory=list)
    #: Debate dynamics by config (``madbench.eval.stats.dynamics_table``); empty when the runs predate its columns.
    dynamics: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: Which comparisons ``pairs`` holds (``paired.choose_pairs``): the batch's declared pairs, or every pair.
    pairs_shown: str = ""

    #: A sequential batch's decision and its inference adjusted for the looks (``sequential_record.summary``).
    sequential: dict | None = None
    #: A sweep's decisions per arm, adjusted for the arms and the looks (``sweep_record.summary``).
    sweep: dict | None = None

    #: Tests in the family ``p_adj`` is adjusted over, when larger than this analysis's own (``adjust_across``).
    family_size: int | None = None

    #: Of a study of several batches (``study``): each config's batch, put as a column in every table and record
    #: (empty for one batch: no such column), and one row per batch.
    batches: dict[str, str] = field(default_factory=dict)
    study: list[dict] = field(default_factory=list)

    @property
    def family(self) -> str:
        scope = "this call, every part of --by" if self.family_size else "this analysis"
        if self.batches:
            scope = f"{scope.replace('this analysis', 'this study')}, all its {len(self.study)} batches"
        return family_line(self.family_size or sum(1 for p in self.pairs if p.p == p.p), self.correction, scope)

    @property
    def unit_line(self) -> str:
        if not self.replicated:
            return f"Unit of inference: the scenario ({self.n_scenarios} scenarios, one run each per config)."
        return (f"Unit of inference: the scenario ({self.n_scenarios} scenarios, {self.n_runs} finished runs): replicates are "
                "averaged within each scenario before every test; n counts scenarios. A linear mixed model with a random "
                "intercept per scenario (mixed_diff, mixed_p) stands beside each paired test.")

    def markdown(self, paper_table: bool = False) -> str:
        parts = []
        if self.study:
            parts += ["## Batches (one study: one family of tests, a config of two batches named batch/config)", "",
                      _md(pd.DataFrame(self.study)), ""]
        if self.sequential is not None:
            parts += ["## Sequential design: the decision, adjusted for the looks", "",
                      *[f"- {line}" for line in self.sequential["lines"]], "",
                      "The tables below are naive for this pair: they test the pairs that ran as if no look had been "
                      "taken.", ""]
        if self.sweep is not None:
            parts += ["## Sweep: every arm against the control, adjusted for the arms and the looks", "",
                      *[f"- {line}" for line in self.sweep["lines"]], "",
                      "The tables below are naive for the sweep: one test per pair, as if no other arm and no look "
                      "had been taken.", ""]
        parts += ["## Comparison (paired on scenario means)", "", self.unit_line, "", self._batch_row(self.table.markdown()), ""]
        if self.replicated:
            spread = self._frame(pd.DataFrame(self.summaries)[["config", "metric", "n", "n_runs", "within_sd"]])
            parts += ["## Replicates (spread within scenario; not counted as scenarios)", "", _md(spread), ""]
        parts += ["## Paired differences", "", f"Comparisons: {self.pairs_shown}.", "", f"{self.family}.", "",
                  *([f"{self.clustering}.", ""] if self.clustering else []), _md(self.paired_frame()), ""]
        if self.beats:
            share = self.beats[0]["share_h0"]
            parts += [f"## Beats 1/N (sign test on scenario-level wins, two-sided: against 1/2 and against {share:.3g})", "",
                      _md(self._frame(pd.DataFrame(self.beats))), ""]
        if len(self.dynamics):
            parts += [f"## Debate dynamics (means over runs; {DYNAMICS_LEGEND})", "", _md(self._frame(self.dynamics)), ""]
        if self.correlations:
            parts += ["## Reasoning quality against performance", ""]
            if self.computed_correlations:
                parts += [_md(self._frame(pd.DataFrame(self.computed_correlations))), ""]
            if self.skipped_correlations:
                parts += [self.skipped_heading + " (every row and its reason: correlations.csv)", "",
                          *[f"- {line}" for line in self.skipped_correlations], ""]
        heading = f"## OLS `{self.ols_formula}`" if self.ols_formula else "## OLS"
        if self.ols_table is not None:
            parts += [heading, "", *[x for line in self.regression.lines() for x in (line, "")], _md(self._frame(self.ols_table)), ""]
        elif self.ols_note:
            parts += [heading, "", self.ols_note, ""]
        if self.power:
            parts += ["## Planning (scenarios a paired design needs)", "", *[f"- {row['line']}" for row in self.power], ""]
        if paper_table and self.paper_table is not None:
            parts += ["## Paper-table reproduction (the paper's convention, uncorrected p < 0.15)", "",
                      self._batch_row(self.paper_table.markdown()), ""]
        return "\n".join(parts)

    def paired_frame(self) -> pd.DataFrame:
        """The paired table as printed: the note column only when some comparison has a note, the replicate
        columns only when some scenario has replicates."""
        frame = self._frame(pd.DataFrame([p.record() for p in self.pairs]))
        if "note" in frame and not frame["note"].astype(bool).any():
            frame = frame.drop(columns="note")
        if not self.replicated:
            frame = frame.drop(columns=[c for c in ("n_runs", "within_sd_a", "within_sd_b", "mixed_diff", "mixed_p") if c in frame])
        frame = frame.drop(columns=[c for c in repeated_columns(self.pairs) if c in frame])
        return frame

    @property
    def clustering(self) -> str:
        """How the paired tests' p was computed (``paired.clustering_line``)."""
        return clustering_line(self.pairs)

    def record(self) -> dict:
        """Everything `madbench stats --json` prints (NaN as null through ``frame.json_safe``)."""
        regression = self.regression.record() if self.regression else {"formula": self.ols_formula, "note": self.ols_note}
        if "coefficients" in regression:
            regression["coefficients"] = self._rows(regression["coefficients"])
        return {**({"batches": self.study} if self.study else {}),
                "unit": "scenario", "n_scenarios": self.n_scenarios, "n_runs": self.n_runs, "replicated": self.replicated,
                "comparisons": self.pairs_shown, "correction": self.correction, "family": self.family,
                "clustering": self.clustering,
                "paired": self._rows([p.record() for p in self.pairs]), "summaries": self._rows(self.summaries),
                "beats_1n": self._rows(self.beats), "regression": regression,
                **({"power": self._rows(self.power)} if self.power else {}),
                **({"sequential": self.sequential} if self.sequential is not None else {}),
                **({"sweep": self.sweep} if self.sweep is not None else {})}

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
        frames = {"summary": pd.DataFrame(self._rows(self.summaries)),
                  "paired": pd.DataFrame(self._rows([p.record() for p in self.pairs])),
                  "beats_1n": pd.DataFrame(self._rows(self.beats)), "correlations": pd.DataFrame(self._rows(self.correlations))}
        if self.study:
            frames["batches"] = pd.DataFrame(self.study)
        if self.power:
            frames["power"] = pd.DataFrame(self._rows(self.power))
        if len(self.dynamics):
            frames["dynamics"] = self._frame(self.dynamics)
        if self.ols_table is not None:
            frames["ols"] = self._frame(self.ols_table)
        else:  # a table from an earlier fit must not stand beside statistics that refuse one
            (out / "ols.csv").unlink(missing_ok=True)
        written = []
        for name, frame in frames.items():
            written.append(atomic_write(out / f"{name}.csv", lambda p, f=frame: f.to_csv(p, index=False)))
        return written


    def _rows(self, rows: list[dict]) -> list[dict]:
        """``rows`` with their batch columns in a study of several batches; as they are for one batch."""
        return batch_rows(rows, self.batches) if self.batches else rows

    def _frame(self, frame: pd.DataFrame) -> pd.DataFrame:
        return batch_frame(frame, self.batches) if self.batches else frame

    def _batch_row(self, table: str) -> str:
        """A comparison table (configs its columns) with each config's batch in a row under the header."""
        if not self.batches:
            return table
        lines = table.split("\n")
        return "\n".join([*lines[:2], "| batch | " + " | ".join(self.batches[c] for c in self.configs) + " |", *lines[2:]])


def _md(df: pd.DataFrame) -> str:
    return markdown_table(df) if len(df) else "(none)"


def analyse(runs: pd.DataFrame, where: str, compare: list[str] | None = None, metrics: list[str] | None = None,
            correction: str = DEFAULT_CORRECTION, rounds: pd.DataFrame | None = None,
            declared: list[tuple[str, str]] | None = None, share: float = PAPER_SHARE,
            power: list[float] | None = None) -> Analysis:
    """Every statistic on scenario means (``units``). ``declared``: the batch's pairs as (treatment, control)
    (``frame.batch_pairs``), whose comparisons alone are tested, treatment − control; None tests every pair of
    configurations. ``correction``: how the family of every pair × metric is adjusted (holm, bh, none); ``share``:
    the share of wins over 1/N tested beside 1/2; ``power``: target powers to plan a design for (none: no planning)."""
    metrics = metrics or [m for m in DEFAULT_METRICS if m in runs.columns]
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
                        paper_table=comparison_table(summaries, pairs, configs, metrics, correction, scope, style="paper"),
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
        a.paper_table = comparison_table(a.summaries, a.pairs, a.configs, a.metrics, correction, scope, style="paper")
        a.family_size = sum(1 for p in together if p.p == p.p)
