"""Assemble report.html: one file with plotly.js, the data and the explorer inlined, so it opens offline."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import jinja2
import pandas as pd

from madbench.data.atomic import atomic_write_text
from madbench.eval.dynamics import critique_pairs
from madbench.eval.report import figures
from madbench.eval.report.collect import load_report_data
from madbench.eval.report.glossary import CAVEATS, DYNAMICS
from madbench.eval.report.leakage import leakage_parts
from madbench.eval.stats import sections
from madbench.eval.stats.analysis import analyse
from madbench.eval.stats.frame import batch_order, batch_pairs, json_safe, ok_runs
from madbench.eval.stats.sections import html_table
from madbench.eval.stats.sequential_record import batch_summary, path_frame, read_record
from madbench.eval.stats.sweep_record import path_frame as sweep_path_frame
from madbench.eval.stats.sweep_record import read_record as read_sweep_record
from madbench.eval.stats.sweep_record import summary as sweep_summary

HERE = Path(__file__).parent
FIGURE_METRICS = ["sharpe", "total_return_pct", "excess_return_pct"]
BASELINES = ["equal", "spy"]
#: The statistics sections (``eval/stats/sections.py``) report.html.j2 places itself; any other shows after the quality
#: section.
PLACED = {"comparison", "paired", "paper_table", "beats", "correlations", "ols", "dynamics", "sequential", "sweep"}
_ENV = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE), autoescape=True, undefined=jinja2.StrictUndefined)


def _fig_html(fig) -> str:
    return fig.to_html(full_html=False, include_plotlyjs=False, config={"displaylogo": False, "responsive": True})




def _script_json(obj) -> str:
    # A "<" in a string could close the <script> element or open a comment: escape every one as \u003c.
    return json.dumps(json_safe(obj), separators=(",", ":")).replace("<", "\\u003c")


def _dynamics(ok: pd.DataFrame, rounds: pd.DataFrame, configs: list[str], table_html: str) -> dict:
    """The "Debate dynamics" section: figures where some run had a critique round, else a note saying why not."""
    if "shift_l1" not in rounds.columns or "sycophancy_mean" not in ok.columns:
        return {"dynamics_figs": [], "flip_figs": [], "dynamics_html": "",
                "dynamics_note": "These results predate the dynamics columns: delete the results' parts/ folder and run "
                                 "the batch's `madbench run` again, which rebuilds every table from the traces."}
    rounds = rounds.merge(ok[["run_id", "config"]], on="run_id")
    pairs = critique_pairs(rounds).merge(rounds[["run_id", "config"]].drop_duplicates(), on="run_id")
    debated = [c for c in configs if (pairs["config"] == c).any()]
    if not debated:
        return {"dynamics_figs": [], "flip_figs": [], "dynamics_html": table_html,
                "dynamics_note": "No run of these configurations had a critique round (the paper protocol's propose → "
                                 "critique → revise): shift, flips, sycophancy and collapse are null."}
    figs = [figures.dynamics_shift(rounds, debated), figures.sycophancy_collapse(ok, rounds, debated),
            figures.turnover_oracle(ok, configs)]
    return {"dynamics_figs": [_fig_html(f) for f in figs], "dynamics_html": table_html, "dynamics_note": "",
            "flip_figs": [_fig_html(figures.flip_matrix(pairs[pairs["config"] == c], c)) for c in debated]}


def _sequential(root: str | Path, runs: pd.DataFrame) -> dict:
    """A sequential batch's decision and the figure of its statistic's path against the boundaries."""
    record = read_record(root)
    if record is None:
        return {"sequential_lines": [], "sequential_fig": ""}
    fig = figures.sequential_path(path_frame(record), f"{record.treatment} − {record.control}: paired t on "
                                  f"{record.metric} at each look, against the boundaries", record.design.n[-1])
    return {"sequential_lines": batch_summary(record, runs)["lines"], "sequential_fig": _fig_html(fig)}


def _sweep(root: str | Path, runs: pd.DataFrame) -> dict:
    """A sweep's decisions per arm and the figure of every arm's path against the boundaries."""
    record = read_sweep_record(root)
    if record is None:
        return {"sweep_lines": [], "sweep_fig": ""}
    fig = figures.sweep_paths(sweep_path_frame(record), f"every arm − {record.control}: paired t on {record.metric} "
                              "at each look, against the boundaries", len(record.order))
    return {"sweep_lines": sweep_summary(record, runs)["lines"], "sweep_fig": _fig_html(fig)}


def _leakage(root: str | Path, runs: pd.DataFrame, configs: list[str], correction: str) -> dict:
    """A batch's recorded leakage audit beside its named − blind difference, all scenarios and per post_cutoff."""
    record, parts = leakage_parts(root, runs, configs, correction, batch_pairs(root))
    options = ", ".join(f"{k} {v}" for k, v in record.options.items()) if record else ""
    return {"leakage_record": record, "leakage_options": options, "leakage_parts": [
        {**p, "probe_html": html_table(p["probe"]), "pairs_html": html_table(p["pairs"]),
         "estimate_html": html_table(p["estimate"]) if len(p["estimate"]) else ""} for p in parts]}


def build_report(root: str | Path, out: str | Path | None = None, compare: list[str] | None = None,
                 correction: str = "holm", max_traces: int = 500) -> Path:
    from plotly.offline import get_plotlyjs
    data = load_report_data(root, max_traces)
    runs = data.runs
    if compare is None:
        compare = batch_order(root, runs)
    analysis = analyse(runs, str(Path(root) / "runs.parquet"), compare, None, correction, data.rounds if len(data.rounds) else None,
                       batch_pairs(root))
    configs = analysis.configs
    runs = runs[runs["config"].isin(configs)]
    ok = ok_runs(runs)
    notes = []
    if data.traces_missing:
        notes.append(f"{data.traces_missing} run(s) have no trace file; they are in the tables but not in the explorer.")
    if len(data.digests) < len(runs) - data.traces_missing:
        notes.append(f"The explorer holds the first {len(data.digests)} runs (--max-traces {max_traces}).")
    failed = runs[runs["status"] != "ok"] if "status" in runs.columns else runs.iloc[0:0]
    if len(failed):
        notes.append(f"{len(failed)} failed run(s) are excluded from every statistic; see the explorer and the status column.")
    cost = figures.cost_summary(runs, data.calls)
    stats = {section.key: section.html(analysis) for section in sections.SECTIONS}
    metrics = [m for m in FIGURE_METRICS if m in ok.columns]
    paper_table = analysis.paper_table
    assert paper_table is not None  # analyse() builds it with the main table
    context = {
        "batch": data.batch, "n_runs": len(runs), "n_ok": len(ok), "n_failed": len(failed), "configs": configs,
        "n_scenarios": runs["scenario_id"].nunique(), "generated": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "notes": notes, "correction": correction, "plotly_js": get_plotlyjs(),
        "stats": {key: html for key, html in stats.items() if key in PLACED},
        "stats_more": [html for key, html in stats.items() if key not in PLACED and html],
        "distribution_figs": [_fig_html(figures.distributions(ok, configs, m, BASELINES)) for m in metrics],
        "paired_figs": [_fig_html(figures.paired_differences(analysis.pairs, m)) for m in metrics],
        "scatter_fig": _fig_html(figures.quality_scatter(ok, configs)) if "rho_bar" in ok.columns else "<p>No ρ̄ column.</p>",
        "divergence_fig": _fig_html(figures.divergence(data.divergence[data.divergence["config"].isin(configs)], configs)),
        "pillar_fig": _fig_html(figures.pillar_trajectories(data.rounds, runs, configs)),
        **_dynamics(ok, data.rounds, configs, stats["dynamics"]), "dynamics_glossary": DYNAMICS, "caveats": CAVEATS,
        "cost_html": html_table(cost), "saving_note": figures.saving_note(data.calls),
        "tokens_fig": _fig_html(figures.tokens_chart(cost)) if cost.get("prompt_tokens", pd.Series([0])).fillna(0).sum() > 0
        else "<p class='muted'>No tokens spent: these runs made no LLM calls (rule-based analysts).</p>",
        "explorer_json": _script_json({"runs": [d for d in data.digests if d["config"] in configs], "memos": data.memos}),
        "explorer_js": (HERE / "explorer.js").read_text(), "explorer_note": f"{len(data.digests)} runs with traces",
    }
    context |= _sequential(root, runs)
    context |= _sweep(root, runs)
    context |= _leakage(root, runs, configs, correction)
    html = _ENV.get_template("report.html.j2").render(**context)
    target = Path(out) if out else Path(root) / "report.html"
    atomic_write_text(target, html)
    return target
