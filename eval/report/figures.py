"""The report's plots (plotly). Each builder takes tidy data and returns a Figure; none reads files."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from madbench.debate.grading import PILLARS
from madbench.eval.stats.degenerate import Degenerate, check_predictor
from madbench.eval.stats.paired import PairedComparison

if TYPE_CHECKING:  # plotly loads in ~0.4 s: imported where a figure is built, not at `madbench --help`
    import plotly.graph_objects as go

PALETTE = ["#3366cc", "#dc3912", "#ff9900", "#109618", "#990099", "#0099c6", "#dd4477", "#66aa00", "#b82e2e", "#316395"]


def _layout(fig: go.Figure, title: str, height: int = 380) -> go.Figure:
    fig.update_layout(title=title, height=height, template="plotly_white", margin=dict(l=60, r=20, t=60, b=50),
                      legend=dict(orientation="h", y=-0.2))
    return fig


def colours(configs: list[str]) -> dict[str, str]:
    return {c: PALETTE[i % len(PALETTE)] for i, c in enumerate(configs)}


def distributions(ok: pd.DataFrame, configs: list[str], metric: str, baselines: list[str]) -> go.Figure:
    """Box plot with every run shown, per configuration, and the baselines (one value per scenario)."""
    import plotly.graph_objects as go
    fig, col = go.Figure(), colours(configs)
    for c in configs:
        fig.add_trace(go.Box(y=ok.loc[ok["config"] == c, metric], name=c, boxpoints="all", jitter=0.4, pointpos=0,
                             marker_color=col[c], boxmean=True))
    per_scenario = ok.drop_duplicates("scenario_id")
    for b in baselines:
        column = f"{b}_{metric}"
        if column in per_scenario.columns:
            fig.add_trace(go.Box(y=per_scenario[column], name=f"baseline: {b}", boxpoints="all", jitter=0.4, pointpos=0,
                                 marker_color="#888888", boxmean=True))
    return _layout(fig, f"{metric} per configuration (box: quartiles; dashed: mean)")


def paired_differences(pairs: list[PairedComparison], metric: str) -> go.Figure:
    """Forest plot: mean paired difference a − b with its 95% interval (quarter-clustered where the test is)."""
    import plotly.graph_objects as go
    rows = [p for p in pairs if p.metric == metric and p.n >= 2]
    labels = [f"{p.a} − {p.b} (n={p.n})" for p in rows]
    diff = np.array([p.diff for p in rows])
    fig = go.Figure(go.Scatter(
        x=diff, y=labels, mode="markers", marker=dict(size=10, color="#3366cc"),
        error_x=dict(type="data", symmetric=False, array=np.array([p.ci_high for p in rows]) - diff,
                     arrayminus=diff - np.array([p.ci_low for p in rows])),
        customdata=np.array([[p.p, p.d, p.wilcoxon_p, p.p_unclustered] for p in rows]).reshape(-1, 4),
        hovertemplate="diff %{x:.3f}<br>p %{customdata[0]:.4f}<br>d_z %{customdata[1]:.3f}<br>Wilcoxon p %{customdata[2]:.4f}"
                      "<br>p (unclustered) %{customdata[3]:.4f}<extra></extra>"))
    fig.add_vline(x=0, line_dash="dash", line_color="#888")
    return _layout(fig, f"Paired differences in {metric} (95% CI)", height=max(250, 90 + 45 * len(rows)))


def quality_scatter(ok: pd.DataFrame, configs: list[str], x: str = "rho_bar", y: str = "sharpe") -> go.Figure:
    """ρ̄ against performance per configuration, with the pooled OLS line y = a + b·x.

    No line where the data cannot give a slope (``madbench.eval.stats.degenerate``: fewer than 3 points, x with fewer
    than 3 distinct values, a constant y); the title says why instead.
    """
    import plotly.graph_objects as go
    import statsmodels.api as sm
    fig, col = go.Figure(), colours(configs)
    for c in configs:
        g = ok[ok["config"] == c]
        fig.add_trace(go.Scatter(x=g[x], y=g[y], mode="markers", name=c, marker=dict(color=col[c], size=8, opacity=0.75),
                                 text=g["scenario_id"], hovertemplate=f"%{{text}}<br>{x} %{{x:.3f}}<br>{y} %{{y:.3f}}<extra>{c}</extra>"))
    data = ok[[x, y]].dropna()
    title = f"{y} against {x}"
    try:
        check_predictor(data[x], data[y], x, y)
    except Degenerate as exc:
        title += f" (no OLS line: {exc})"
    else:
        fit = sm.OLS(data[y], sm.add_constant(data[x])).fit()
        xs = np.linspace(data[x].min(), data[x].max(), 50)
        fig.add_trace(go.Scatter(x=xs, y=fit.params.iloc[0] + fit.params.iloc[1] * xs, mode="lines", name="OLS fit (pooled)",
                                 line=dict(color="#222", dash="dash")))
        title += f" (OLS slope {fit.params.iloc[1]:+.3f}, p = {fit.pvalues.iloc[1]:.3g}, R² = {fit.rsquared:.3f})"
    fig.update_xaxes(title=x)
    fig.update_yaxes(title=y)
    return _layout(fig, title, height=420)


def divergence(series: pd.DataFrame, configs: list[str]) -> go.Figure:
    """Mean JSD and cash spread at each step (propose, then revise per round): convergence made visible."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots
    fig = make_subplots(rows=1, cols=2, subplot_titles=("Jensen–Shannon divergence of the allocations", "Cash spread (max − min)"))
    col = colours(configs)
    if len(series):
        series = series.assign(step=series["round"].astype(int).astype(str) + ":" + series["phase"])
        order = series.sort_values(["round", "phase"], key=lambda s: s.map({"propose": 0, "revise": 1}) if s.name == "phase" else s)["step"].unique()
        for c in configs:
            g = series[series["config"] == c].groupby("step")[["jsd", "cash_spread"]].agg(["mean", "sem"]).reindex(order).dropna(how="all")
            if g.empty:
                continue
            for i, m in enumerate(("jsd", "cash_spread"), start=1):
                fig.add_trace(go.Scatter(x=list(g.index), y=g[(m, "mean")], error_y=dict(array=g[(m, "sem")].fillna(0)),
                                         mode="lines+markers", name=c, legendgroup=c, showlegend=i == 1, line=dict(color=col[c])), row=1, col=i)
    fig.update_xaxes(title="round:phase")
    return _layout(fig, "Divergence per phase and round (mean ± SEM over runs)", height=400)


def pillar_trajectories(rounds: pd.DataFrame, runs: pd.DataFrame, configs: list[str]) -> go.Figure:
    """Mean CRIT pillar score per round and configuration."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots
    fig = make_subplots(rows=1, cols=4, subplot_titles=[p.replace("_", " ") for p in PILLARS], shared_yaxes=True)
    col = colours(configs)
    if len(rounds):
        merged = rounds.merge(runs[["run_id", "config"]], on="run_id")
        for c in configs:
            g = merged[merged["config"] == c].groupby("round")[list(PILLARS)].mean()
            for i, p in enumerate(PILLARS, start=1):
                fig.add_trace(go.Scatter(x=g.index, y=g[p], mode="lines+markers", name=c, legendgroup=c, showlegend=i == 1,
                                         line=dict(color=col[c])), row=1, col=i)
    fig.update_xaxes(title="round", dtick=1)
    return _layout(fig, "CRIT pillar scores by round (mean over agents and runs)", height=380)


def cost_summary(runs: pd.DataFrame, calls: pd.DataFrame) -> pd.DataFrame:
    cols = [c for c in ("calls", "cached", "failed", "prompt_tokens", "completion_tokens", "cost_usd", "cost_paid_usd",
                        "latency_s") if c in runs.columns]  # cost_paid_usd: every attempt's paid calls (runner/store.py)
    # None (a cost not known) as NaN, so that the table prints it as every other unknown figure
    table = runs[cols].apply(pd.to_numeric).groupby(runs["config"], sort=False).sum(min_count=1)
    table.insert(0, "runs", runs.groupby("config", sort=False).size())
    if "status" in runs.columns:
        table.insert(1, "failed_runs", runs.groupby("config", sort=False)["status"].apply(lambda s: int((s != "ok").sum())))
    if {"calls", "cached"} <= set(cols):
        table["cache_hit_share"] = table["cached"] / table["calls"].where(table["calls"] > 0)
    merged = calls.merge(runs[["run_id", "config"]], on="run_id") if len(calls) else calls
    if len(calls) and "overhead_ms" in calls.columns:
        table["overhead_p50_ms"] = merged.groupby("config")["overhead_ms"].median()
    if len(calls) and "list_cost_usd" in calls.columns:
        saving = pd.DataFrame({c: realised_saving(g) for c, g in merged.groupby("config", sort=False)}).T
        saving = saving[["list_cost_usd", "saved_share", "cached_input_share", "provider_batch_calls"]].apply(pd.to_numeric)
        table = table.join(saving.astype({"provider_batch_calls": "Int64"}))
    return table.reset_index()


def realised_saving(calls: pd.DataFrame) -> dict[str, float | None]:
    """What provider batches and the provider's prompt cache saved on the calls paid for (``calls.parquet`` rows, not
    answers from madbench's own cache): ``paid_usd`` (their ``cost_usd``) against ``list_cost_usd`` (the same tokens
    synchronously with no prompt-cache discount), ``saved_share = 1 − paid / list``; ``cached_input_share``, the
    share of their prompt tokens the provider served from its prompt cache; ``provider_batch_calls``, how many went
    through a provider batch. Costs are None where a model has no price."""
    fresh = calls[~calls["cached"].astype(bool)]
    priced = fresh["cost_usd"].notna().all() and fresh["list_cost_usd"].notna().all()
    paid = float(fresh["cost_usd"].sum()) if priced else None
    listed = float(fresh["list_cost_usd"].sum()) if priced else None
    prompt = float(fresh["prompt_tokens"].fillna(0).sum())
    return {"calls_paid": len(fresh), "paid_usd": paid, "list_cost_usd": listed,
            "saved_share": 1 - paid / listed if paid is not None and listed else None,
            "cached_input_share": float(fresh["cached_tokens"].fillna(0).sum()) / prompt if prompt else None,
            "provider_batch_calls": int(fresh["provider_batch"].fillna(False).astype(bool).sum())}


def saving_note(calls: pd.DataFrame) -> str | None:
    """The batch's realised saving in one sentence (None when the calls predate its recording or none was paid)."""
    if not len(calls) or "list_cost_usd" not in calls.columns:
        return None
    s = realised_saving(calls)
    if not s["calls_paid"] or s["paid_usd"] is None or not s["list_cost_usd"]:
        return None
    return (f"Paid ${s['paid_usd']:.4f} for {s['calls_paid']} calls that cost ${s['list_cost_usd']:.4f} synchronously at "
            f"list prices without a prompt cache: {s['saved_share']:.0%} saved. {s['provider_batch_calls']} of them were "
            f"answered through provider batches (batch prices), and the provider's prompt cache served "
            f"{s['cached_input_share'] or 0:.0%} of their input tokens, billed at a cached-input rate where the model's "
            "prices (litellm's cost map) have one for the way the call went: some have none for batches (gpt-4o-mini's "
            "batch input price is already its cached one).")


def tokens_chart(cost: pd.DataFrame) -> go.Figure:
    import plotly.graph_objects as go
    fig = go.Figure()
    for column, colour in (("prompt_tokens", "#3366cc"), ("completion_tokens", "#ff9900")):
        if column in cost.columns:
            fig.add_trace(go.Bar(x=cost["config"], y=cost[column], name=column, marker_color=colour))
    fig.update_layout(barmode="stack")
    return _layout(fig, "Tokens per configuration", height=340)


def _mean_sem(frame: pd.DataFrame, by: str, column: str) -> pd.DataFrame:
    return frame.groupby(by)[column].agg(["mean", "sem", "count"]).dropna(subset=["mean"])


def dynamics_shift(rounds: pd.DataFrame, configs: list[str]) -> go.Figure:
    """Each agent's shift toward the others' mean after a critique (L1 and JS, before − after), per round and config.

    ``rounds``: rounds.parquet rows with their run's ``config`` (``madbench.eval.dynamics`` explains every column)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots
    fig = make_subplots(rows=1, cols=2, subplot_titles=("L1 shift toward the others", "JS shift toward the others"))
    col = colours(configs)
    for c in configs:
        g = rounds[(rounds["config"] == c) & rounds["shift_l1"].notna()]
        if g.empty:
            continue
        for i, m in enumerate(("shift_l1", "shift_js"), start=1):
            s = _mean_sem(g, "round", m)
            fig.add_trace(go.Scatter(x=list(s.index), y=s["mean"], error_y=dict(array=s["sem"].fillna(0)), mode="lines+markers",
                                     name=c, legendgroup=c, showlegend=i == 1, line=dict(color=col[c]),
                                     hovertemplate=f"round %{{x}}<br>{m} %{{y:.4f}}<extra>{c}</extra>"), row=1, col=i)
    fig.add_hline(y=0, line_dash="dot", line_color="#888")
    fig.update_xaxes(title="round", dtick=1)
    return _layout(fig, "Shift toward the other agents after each critique (> 0: closer; mean ± SEM over agents and runs)")


def flip_matrix(pairs: pd.DataFrame, config: str) -> go.Figure:
    """Critic × target heatmaps of one config, without and with new evidence cited in the revision: the colour is the
    mean pull toward the critic (1: moved onto its allocation), the text the flips (pull ≥ ½) of all critiques.

    ``pairs``: ``madbench.eval.dynamics.critique_pairs`` rows of this config's runs."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots
    agents = sorted(set(pairs["critic"]) | set(pairs["target"]))
    fig = make_subplots(rows=1, cols=2, subplot_titles=("without new evidence", "with new evidence"), horizontal_spacing=0.12)
    for i, new in enumerate((False, True), start=1):
        g = pairs[pairs["new_evidence"] == new]
        stats = g.groupby(["critic", "target"]).agg(pull=("pull", "mean"), flips=("flip", "sum"), n=("flip", "size"))
        z = [[stats.at[(c, t), "pull"] if (c, t) in stats.index else None for t in agents] for c in agents]
        text = [[f"{int(stats.at[(c, t), 'flips'])}/{int(stats.at[(c, t), 'n'])}" if (c, t) in stats.index else ""
                 for t in agents] for c in agents]
        fig.add_trace(go.Heatmap(z=z, x=agents, y=agents, text=text, texttemplate="%{text}", zmin=-1, zmax=1, colorscale="RdBu",
                                 reversescale=True, showscale=i == 2, colorbar=dict(title="pull"),
                                 hovertemplate="critic %{y} → target %{x}<br>mean pull %{z:.3f}<br>flips/critiques %{text}"
                                               "<extra></extra>"), row=1, col=i)
        fig.update_xaxes(title="target (who revised)", row=1, col=i)
        fig.update_yaxes(title="critic" if i == 1 else None, row=1, col=i)
    return _layout(fig, f"{config}: who moved toward whose critique (colour: mean pull; text: flips / critiques)",
                   height=max(340, 160 + 55 * len(agents)))


def sycophancy_collapse(runs: pd.DataFrame, rounds: pd.DataFrame, configs: list[str]) -> go.Figure:
    """Mean sycophancy per config (over runs) and the disagreement collapse per round (fall in mean pairwise JS)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots
    fig = make_subplots(rows=1, cols=2, subplot_titles=("Sycophancy (movement toward a critic without new evidence)",
                                                        "Disagreement collapse (fall in mean pairwise JS)"))
    col = colours(configs)
    per_round = rounds.drop_duplicates(["run_id", "round"])  # one collapse per run and round, on every agent's row
    for c in configs:
        s = runs.loc[(runs["config"] == c), "sycophancy_mean"].dropna()
        if len(s):
            fig.add_trace(go.Bar(x=[c], y=[s.mean()], error_y=dict(array=[s.sem() if len(s) > 1 else 0]), name=c, legendgroup=c,
                                 marker_color=col[c], hovertemplate=f"%{{y:.3f}} over {len(s)} runs<extra>{c}</extra>"), row=1, col=1)
        g = per_round[(per_round["config"] == c) & per_round["collapse"].notna()]
        if len(g):
            m = _mean_sem(g, "round", "collapse")
            fig.add_trace(go.Scatter(x=list(m.index), y=m["mean"], error_y=dict(array=m["sem"].fillna(0)), mode="lines+markers",
                                     name=c, legendgroup=c, showlegend=not len(s), line=dict(color=col[c])), row=1, col=2)
    fig.update_yaxes(range=[0, 1], row=1, col=1)
    fig.update_xaxes(title="round", dtick=1, row=1, col=2)
    return _layout(fig, "Sycophancy and disagreement collapse per configuration (mean ± SEM over runs)")


def turnover_oracle(ok: pd.DataFrame, configs: list[str]) -> go.Figure:
    """Per run: the debate's turnover from the mean proposal (L1) and the oracle gap (best agent − aggregate, pp)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots
    fig = make_subplots(rows=1, cols=2, subplot_titles=("Turnover caused by the debate (L1)", "Oracle gap (best agent − aggregate, pp)"))
    col = colours(configs)
    for c in configs:
        g = ok[ok["config"] == c]
        for i, m in enumerate(("debate_turnover", "oracle_gap_pct"), start=1):
            if g[m].notna().any():
                fig.add_trace(go.Box(y=g[m], name=c, boxpoints="all", jitter=0.4, pointpos=0, marker_color=col[c], legendgroup=c,
                                     showlegend=i == 1, text=g["scenario_id"]), row=1, col=i)
    return _layout(fig, "What the debate changed: turnover from the proposals, and the oracle gap")


def sequential_path(path: dict[str, np.ndarray], title: str, n_max: int) -> go.Figure:
    """A sequential batch's paired t at each look against its boundaries on the t scale (``sequential_record.path_frame``):
    efficacy ±c^t_k, and the non-binding futility bound f^t_k where the design has one."""
    import plotly.graph_objects as go
    fig = go.Figure()
    n = path["n"]
    fig.add_trace(go.Scatter(x=n, y=path["efficacy"], mode="lines+markers", name="efficacy bound", line=dict(color="#dc3912")))
    fig.add_trace(go.Scatter(x=n, y=-path["efficacy"], mode="lines+markers", name="efficacy bound (other side)",
                             line=dict(color="#dc3912", dash="dot")))
    if np.isfinite(path["futility"]).any():
        fig.add_trace(go.Scatter(x=n, y=path["futility"], mode="lines+markers", name="futility bound (non-binding)",
                                 line=dict(color="#ff9900", dash="dash")))
    t = np.clip(path["t"], -50, 50)  # pairs without spread give an infinite t
    fig.add_trace(go.Scatter(x=n, y=t, mode="lines+markers", name="paired t", marker=dict(size=10), line=dict(color="#3366cc")))
    fig.add_hline(y=0, line_color="#888", line_dash="dash")
    fig.update_xaxes(title="complete pairs (scenarios)", range=[0, n_max + 1])
    fig.update_yaxes(title="paired t")
    return _layout(fig, title)


def sweep_paths(frame: pd.DataFrame, title: str, n_max: int) -> go.Figure:
    """A sweep's arms: each arm's paired t at every look it was sampled (``sweep_record.path_frame``; positive is
    better), against the efficacy bound and the non-binding futility bound on the t scale; an arm's last marker is
    its decision."""
    import plotly.graph_objects as go
    fig = go.Figure()
    bounds = frame.drop_duplicates("look").sort_values("look")
    fig.add_trace(go.Scatter(x=bounds["n"], y=bounds["efficacy"], mode="lines+markers", name="efficacy bound",
                             line=dict(color="#dc3912")))
    if np.isfinite(bounds["futility"]).any():
        fig.add_trace(go.Scatter(x=bounds["n"], y=bounds["futility"], mode="lines+markers",
                                 name="futility bound (non-binding)", line=dict(color="#ff9900", dash="dash")))
    for arm, g in frame.groupby("arm", sort=False):
        fig.add_trace(go.Scatter(x=g["n"], y=np.clip(g["t"], -50, 50), mode="lines+markers", name=str(arm),
                                 text=g["decision"], hovertemplate="%{x} scenarios: t = %{y:.2f} (%{text})"))
    fig.add_hline(y=0, line_color="#888", line_dash="dash")
    fig.update_xaxes(title="complete scenarios", range=[0, n_max + 1])
    fig.update_yaxes(title="paired t (arm − control, oriented: up is better)")
    return _layout(fig, title)
