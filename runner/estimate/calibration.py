"""Calibration from a pilot batch (``--calibrate-from RESULTS``): the rates it observed, and per (model, kind) the
factors that bring the estimate's call shapes to what it measured."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from madbench.data.errors import InputError
from madbench.data.scenario import Scenario
from madbench.debate.config import DebateConfig
from madbench.debate.interventions import configured, max_retries
from madbench.debate.protocols import protocol_of
from madbench.debate.trace import read_trace, stored_trace
from madbench.gateway.phases import PHASES
from madbench.results import BatchDirs, ResultsDir
from madbench.runner.estimate.assumptions import EXPECTED_RATES, LATENCY_CV, Calibration, Factors, Rates
from madbench.runner.estimate.batch_estimate import mean
from madbench.runner.estimate.counting import estimate_run
from madbench.runner.estimate.shapes import MemoInfo

_RCA_RETRY = re.compile(r":rca(\d+)$")


def _label_parts(label: str) -> list[str]:
    return str(label).split(":")


def kind_of(phase: str, label: str) -> str:
    """The calibration kind of a ``calls.parquet`` row: the paper's phase, or a staged protocol's stage
    (its label's first part: ``risk:aggressive`` → ``risk``)."""
    return phase if phase in PHASES and _label_parts(label)[0] in PHASES else _label_parts(label)[0]


def observed_rates(runs: list[dict[str, Any]], calls_by_run: dict[str, list[dict[str, Any]]]) -> tuple[Rates, dict[str, str]]:
    """Rates a pilot observed (each ``fails / opportunities``), with where each came from.

    * RCA: per revision, checks at levels 1..R are opportunities and a retried revision (label ``…:rca<k>``) a
      failure; a revision retried R times had its last check outside the loop, so
      ``rca_fail = retries / (rca calls − revisions retried R times)``;
    * JS collapse: ``js_fire = rounds with a revise:js1 / rounds checked`` (paper runs with two agents or more),
      ``js_refire = rounds with js<k+1> / rounds with js<k>`` (k < max_retries);
    * CRIT-causal: the same per (round, agent) with ``revise:crit_causal<k>``, out of rounds × agents;
    * validation: mean ``validation_retries`` per call; early stop: mean ``rounds_run / rounds``.

    ``runs`` are dicts with ``run_id``, ``config`` (a ``DebateConfig``), ``rounds_run``; a rate with no
    opportunity in the pilot keeps its ``EXPECTED_RATES`` value (source ``default``)."""
    acc = {k: [0.0, 0.0] for k in ("rca_fail", "js_fire", "js_refire", "cc_fire", "cc_refire", "validation_retries",
                                   "rounds_fraction")}
    for run in runs:
        cfg: DebateConfig = run["config"]
        rows = calls_by_run.get(run["run_id"], [])
        for row in rows:
            acc["validation_retries"][0] += float(row.get("validation_retries") or 0)
            acc["validation_retries"][1] += 1
        if not protocol_of(cfg).runs_interventions:
            continue
        t = int(run.get("rounds_run") or 0)
        if cfg.rounds:
            acc["rounds_fraction"][0] += t
            acc["rounds_fraction"][1] += cfg.rounds
        iv = dict(configured(cfg.interventions))
        revise = [r for r in rows if r["phase"] == "revise"]
        if "rca" in iv:
            R = max_retries("rca", iv["rca"])
            retries = [m for r in revise if (m := _RCA_RETRY.search(str(r["label"])))]
            at_limit = sum(1 for m in retries if int(m.group(1)) == R)
            acc["rca_fail"][0] += len(retries)
            acc["rca_fail"][1] += sum(1 for r in rows if r["phase"] == "rca") - at_limit
        for name, prefix, per_agent, fire, refire in (("js_collapse", "js", False, "js_fire", "js_refire"),
                                                      ("crit_causal", "crit_causal", True, "cc_fire", "cc_refire")):
            if name not in iv or (name == "js_collapse" and len(cfg.agents) < 2) or \
                    (name == "crit_causal" and not cfg.score_rounds):
                continue
            attempts: dict[int, set] = {}
            for r in revise:
                parts = _label_parts(r["label"])
                m = re.fullmatch(prefix + r"(\d+)", parts[1]) if len(parts) > 1 else None
                if m:
                    attempts.setdefault(int(m.group(1)), set()).add((r["round"], r["agent"]) if per_agent else r["round"])
            acc[fire][0] += len(attempts.get(1, ()))
            acc[fire][1] += t * (len(cfg.agents) if per_agent else 1)
            for n in range(1, max_retries(name, iv[name])):
                acc[refire][0] += len(attempts.get(n + 1, ()))
                acc[refire][1] += len(attempts.get(n, ()))
    values: dict[str, float] = {}
    sources: dict[str, str] = {}
    for k, (num, den) in acc.items():
        if den > 0:
            values[k] = num / den
            sources[k] = f"pilot ({num:g}/{den:g})"
        else:
            values[k] = getattr(EXPECTED_RATES, k)
            sources[k] = "default (no opportunity in the pilot)"
    return Rates(**values), sources


def read_pilot(results_dir: str | Path) -> tuple[list[dict[str, Any]], list[tuple], list[dict[str, Any]]]:
    """A pilot batch's finished runs: (runs as ``observed_rates`` takes them, (config, scenario, memo) per run from
    its trace's ``run_start`` and ``memo`` events, the rows of ``calls.parquet`` for those runs)."""
    layout = BatchDirs(results_dir)
    if not layout.table("calls").is_file() or not layout.table("runs").is_file():
        raise InputError(results_dir, "no calls.parquet and runs.parquet here",
                         "give a finished pilot batch's results directory, e.g. results/pilot")
    results = ResultsDir(results_dir)
    runs_df = results.runs
    ok = runs_df[runs_df["status"] == "ok"]
    runs, contexts = [], []
    for row in ok.itertuples():
        path = layout.trace_path(row.run_id)
        events = read_trace(path).events if stored_trace(path) is not None else []
        start = next((e for e in events if e["event"] == "run_start"), None)
        memo_ev = next((e for e in events if e["event"] == "memo"), None)
        if start is None or memo_ev is None or not memo_ev.get("text"):
            continue
        cfg = DebateConfig.model_validate(start["config"])
        runs.append({"run_id": row.run_id, "config": cfg, "rounds_run": row.rounds_run})
        contexts.append((cfg, Scenario.model_validate(start["scenario"]), MemoInfo.from_text(memo_ev["text"], memo_ev["ids"])))
    if not runs:
        raise InputError(results_dir, "no finished run with a trace here", "run a pilot batch first")
    calls_df = results.calls
    calls_df = calls_df[calls_df["run_id"].isin({r["run_id"] for r in runs})]
    return runs, contexts, calls_df.to_dict("records")


def _sums(items: Iterable[tuple[tuple[str, str], float, float, float, float]]) -> dict[tuple[str, str], list[float]]:
    """Per key, then pooled per (model, "*") and ("*", kind): [calls, prompt, completion, latency] sums."""
    out: dict[tuple[str, str], list[float]] = {}
    for (model, kind), *values in items:
        for key in ((model, kind), (model, "*"), ("*", kind)):
            acc = out.setdefault(key, [0.0, 0.0, 0.0, 0.0])
            for i, v in enumerate(values):
                acc[i] += v
    return out


def _factor(o: list[float], p: list[float], i: int) -> float:
    """Observed mean per call ÷ estimated mean per call (1 when either is missing or zero)."""
    if not (o[0] and p[0] and o[i] and p[i]):
        return 1.0
    return (o[i] / o[0]) / (p[i] / p[0])


def calibrate(results_dir: str | Path) -> Calibration:
    """Measure a pilot batch (``results/<batch>``): rates (``observed_rates``) and, per (model, kind), factors
    ``observed mean per call ÷ estimated mean per call`` for prompt tokens, completion tokens and latency, where
    the estimate is this module's own for the pilot's runs (config, scenario and memo from each run's trace)
    under the observed rates; factors are pooled per model and per kind too (``Calibration.factor``). The
    latency's coefficient of variation (per model, averaged) replaces ``LATENCY_CV``."""
    runs, contexts, records = read_pilot(results_dir)
    by_run: dict[str, list[dict]] = {}
    for rec in records:
        by_run.setdefault(rec["run_id"], []).append(rec)
    rates, sources = observed_rates(runs, by_run)
    estimated = [estimate_run(cfg, scenario, memo, rates) for cfg, scenario, memo in contexts]
    pred = _sums((key, line.calls, line.prompt_tokens, line.completion_tokens, line.busy_s)
                 for e in estimated for key, line in e.lines.items())
    obs = _sums(((rec["model_requested"], kind_of(rec["phase"], rec["label"])), 1.0, float(rec["prompt_tokens"] or 0),
                 float(rec["completion_tokens"] or 0), float(rec["latency_s"] or 0)) for rec in records)
    factors = {k: Factors(_factor(o, pred[k], 1), _factor(o, pred[k], 2), _factor(o, pred[k], 3))
               for k, o in obs.items() if k in pred}
    latencies: dict[str, list[float]] = {}
    for rec in records:
        latencies.setdefault(rec["model_requested"], []).append(float(rec["latency_s"] or 0))
    cvs = [math.sqrt(mean((v - m) ** 2 for v in vs)) / m for vs in latencies.values()
           if len(vs) > 1 and (m := mean(vs)) > 0]
    observed = [{"model": k[0], "kind": k[1], "calls": int(o[0]), "prompt_tokens_mean": round(o[1] / o[0], 1),
                 "completion_tokens_mean": round(o[2] / o[0], 1), "latency_s_mean": round(o[3] / o[0], 3),
                 "factors": {f: round(getattr(factors[k], f), 3) for f in ("prompt", "completion", "latency")}
                 if k in factors else None}
                for k, o in sorted(obs.items()) if "*" not in k]
    return Calibration(str(results_dir), rates, sources, factors, mean(cvs) if cvs else LATENCY_CV, observed, len(runs))
