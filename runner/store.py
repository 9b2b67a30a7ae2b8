"""A batch's results directory: manifest, traces, per-run Parquet parts, and the compacted tables.

    results/<batch>/manifest.json      the spec, versions, and every run with its status
    results/<batch>/traces/<run>.jsonl append-only trace of each run
    results/<batch>/runs/<run>.json    a run's result: written last, atomically — the commit point
    results/<batch>/parts/{runs,rounds,calls}/<run>.parquet
    results/<batch>/{runs,rounds,calls}.parquet   concatenated parts (rebuilt, never appended to)

runs.parquet has two costs: ``cost_usd``, what the run's committed attempt paid (an answer served from the cache
costs 0: the sum of its calls.parquet rows not cached), and ``cost_paid_usd``, what all its attempts paid, failed
calls included (``paid_cost``). After a budget stop or a kill and a resume they differ: the earlier attempts paid for
the answers the last one was served from the cache. The batch's whole spend, paid calls of runs not yet committed
included, is budget.json's ``spent_usd`` (runner/budget.py).

Parts are keyed by run id and written atomically, so a resumed batch can
never hold a row twice; the top-level tables are rebuilt from the parts.
"""

from __future__ import annotations

import json
import platform
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import ValidationError

from madbench.data.atomic import atomic_write, atomic_write_text
from madbench.data.errors import InputError, format_validation_error
from madbench.debate.events import AnyEvent, Crit, Divergence, LLMCall, LLMFailure, last_attempt, unblinded
from madbench.debate.grading import PILLARS
from madbench.debate.trace import read_trace
from madbench.eval.dynamics import ROUND_COLUMNS, position, round_dynamics, run_dynamics
from madbench.runner.cutoffs import run_post_cutoff
from madbench.runner.pipeline import RunLayout, RunResult

TABLES = ("runs", "rounds", "calls")


class BatchLayout(RunLayout):
    def __init__(self, root: str | Path):
        super().__init__(root)
        self.root = Path(root)

    def trace_path(self, run_id: str) -> Path:
        return self.root / "traces" / f"{run_id}.jsonl"

    def result_path(self, run_id: str) -> Path:
        return self.root / "runs" / f"{run_id}.json"

    def part(self, table: str, run_id: str) -> Path:
        return self.root / "parts" / table / f"{run_id}.parquet"

    def stored_result(self, run_id: str) -> RunResult | None:
        """The run's committed result, or None (``read_result``: a file that is not one is an InputError naming it)."""
        p = self.result_path(run_id)
        return read_result(p, run_id) if p.exists() else None


def read_result(p: Path, run_id: str | None = None) -> RunResult:
    """The committed result in ``p`` (of ``run_id`` when given). A file that is not one (madbench writes it atomically,
    so it was truncated or edited by something else) is an InputError naming it: deleting it re-runs the run. Every
    reader of results (run, status, report, stats, rescore) goes through here, so each says the same."""
    fix = ("delete it and run the batch's `madbench run` command again: that run is re-run, resuming from its "
           "trace (kept in traces/) with its paid calls served from the cache")
    try:
        result = RunResult.model_validate_json(p.read_bytes())
    except ValidationError as exc:
        raise InputError(p, f"not a valid run result ({format_validation_error(exc)[:300]})", fix) from None
    if run_id is not None and result.run_id != run_id:
        raise InputError(p, f"holds the result of run {result.run_id}, not of run {run_id}", fix)
    return result


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in ("madbench", "ray", "litellm", "pydantic", "pandas", "pyarrow"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def write_manifest(layout: BatchLayout, spec: dict[str, Any], runs: list[dict[str, Any]], state: str) -> None:
    body = {"spec": spec, "versions": versions(), "state": state, "updated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "runs": runs}
    atomic_write_text(layout.root / "manifest.json", json.dumps(body, indent=1))


def current_step(trace_path: Path) -> str:
    """What a run in flight is doing now, from the last whole line of its trace (read from the end, cheaply)."""
    if not trace_path.exists():
        return "starting"
    with open(trace_path, "rb") as fh:
        fh.seek(0, 2)
        fh.seek(max(0, fh.tell() - 65536))
        lines = fh.read().splitlines()
    for raw in reversed(lines):
        try:
            e = json.loads(raw)
        except json.JSONDecodeError:
            continue  # a torn or partial line: look at the one before
        where = " ".join(str(e[k]) for k in ("agent", "label") if e.get(k) is not None)
        rnd = f" round {e['round']}" if e.get("round") is not None else ""
        return f"{e.get('event')}{': ' + where if where else ''}{rnd}"
    return "starting"


def read_manifest(root: str | Path) -> dict[str, Any]:
    path = Path(root) / "manifest.json"
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:  # truncated by hand or by a copy (madbench itself writes it atomically)
        raise InputError(path, f"not valid JSON (line {exc.lineno}: {exc.msg})",
                         "delete it and run the batch's `madbench run` command again: it rebuilds the manifest from the "
                         "committed runs (their results are kept)") from None


def _model_name(m) -> str:
    return m["model"] if isinstance(m, dict) else str(m)


def paid_cost(events: list[AnyEvent]) -> float | None:
    """US dollars a run's calls were billed over the given events (pass the whole trace: every attempt): each call
    answered fresh (``llm_call``, not from the cache: its attempts, retries included) and each billed attempt of a call
    that failed for good (``llm_failure``). None when one of them has no known price."""
    total = 0.0
    for e in events:
        if isinstance(e, LLMCall) and not e.cached:
            costs = [e.cost_usd]
        elif isinstance(e, LLMFailure):  # an attempt without tokens billed nothing (a 429, a timeout)
            costs = [a.get("cost_usd") for a in e.attempts if a.get("prompt_tokens") is not None]
        else:
            continue
        if None in costs:
            return None
        total += sum(costs)
    return total


def run_row(batch: str, result: RunResult, config: dict[str, Any], scenario: dict[str, Any], events: list[AnyEvent],
            node_id: str, history: list[AnyEvent] | None = None) -> dict:
    """The run's row in runs.parquet from its last attempt's ``events``; ``history``, the whole trace (default: the
    events given), gives ``cost_paid_usd``: what every attempt paid, beside ``cost_usd``, what this one did."""
    crits = [e for e in events if isinstance(e, Crit) and e.label == "crit"]
    last_round = max((e.round for e in crits), default=None)
    final_scores = [e.score for e in crits if e.round == last_round]
    div = [e for e in events if isinstance(e, Divergence)]
    models = config["models"]
    row = {
        "batch": batch, "run_id": result.run_id, "status": result.status, "error": result.error,
        "scenario_id": scenario["id"], "invest_quarter": scenario["invest_quarter"], "n_tickers": len(scenario["tickers"]),
        "replicate": result.sample_index, "config": config["name"], "protocol": config["protocol"],
        "n_agents": len(config["agents"]), "roles": ",".join(a["role"] for a in config["agents"]),
        "tiers": ",".join(sorted({a["tier"] for a in config["agents"]})), "rounds": config["rounds"],
        "aggregation": config["aggregation"], "temperature": config["temperature"],
        "interventions": ",".join(i["name"] for i in config["interventions"]), "crit_rubric": config["crit_rubric"],
        "model_default": _model_name(models["tiers"].get(models["default"], models["default"])),
        "method": result.method, "rounds_run": result.rounds_run, "rho_bar": result.rho_bar,
        "weights": json.dumps(result.weights, sort_keys=True), "cash": result.cash,
        "jsd_propose": next((d.jsd for d in div if d.phase == "propose"), None),
        "jsd_final": div[-1].jsd if div else None,
        "interventions_fired": len(result.interventions), "node_id": node_id,
        # configs/model_cutoffs.yaml: True when no model of the run can have read the quarter; None when unknown
        "post_cutoff": run_post_cutoff(scenario["invest_quarter"], events),
        # a blind memo (pseudonyms, relative dates): `madbench stats` pairs it with its named twin
        "blind": bool((config.get("blind") or {}).get("enabled", False)),
    }
    for p in PILLARS:
        row[f"crit_{p}"] = sum(getattr(s.scores, p) for s in final_scores) / len(final_scores) if final_scores else None
    for k, v in result.extras.items():  # protocol-specific results, one column each (nested values as JSON)
        row[f"x_{k}"] = v if isinstance(v, (int, float, str, bool)) or v is None else json.dumps(v, sort_keys=True)
    for k, v in (result.metrics or {}).items():
        if k != "null_reasons":
            row[k] = v
    for name, m in result.baselines.items():
        for k in ("total_return_pct", "excess_return_pct", "sharpe", "sortino", "volatility", "max_drawdown_pct"):
            row[f"{name}_{k}"] = m.get(k)
    for k in ("calls", "cached", "failed", "prompt_tokens", "completion_tokens", "cached_tokens", "cache_write_tokens",
              "cost_usd", "calls_with_unknown_cost", "latency_s"):
        row[k] = result.totals.get(k)  # cached_tokens: None in results written before prompt caching was recorded
    if row["calls_with_unknown_cost"]:
        row["cost_usd"] = None  # a model outside litellm's cost map: the run's cost is unknown, not the known part
    # A resumed run is served from the cache what its earlier attempts paid for (cost 0 in this attempt's cost_usd).
    row["cost_paid_usd"] = paid_cost(events if history is None else history)
    final = position(result.weights, result.cash) if result.status == "ok" else None
    row.update(run_dynamics(unblinded(events), final, result.agent_metrics, (result.metrics or {}).get("total_return_pct")))
    return row


def round_rows(result: RunResult, events: list[AnyEvent]) -> list[dict]:
    js = {d.round: d.jsd for d in events if isinstance(d, Divergence) and d.phase == "revise"}
    # Debate dynamics (eval.dynamics) of each agent's revision; null, explicitly, where no critique round was run.
    dynamics = round_dynamics(events)
    rows = []
    for e in events:
        if not isinstance(e, Crit) or e.label != "crit":
            continue
        s = e.score
        rows.append({"run_id": result.run_id, "round": e.round, "agent_id": e.agent, "role": e.role,
                     "rho": s.rho, "scorer": s.scorer, "scorer_is_llm": s.is_llm, "jsd_round": js.get(e.round),
                     **{p: getattr(s.scores, p) for p in PILLARS},
                     **{f"diag_{k}": int(v) for k, v in sorted(s.diagnostics.model_dump().items())},
                     **{f"audit_{k}": v for k, v in e.audit.items()}, "clips": "; ".join(s.clips),
                     **dynamics.get((e.round, e.agent), dict.fromkeys(ROUND_COLUMNS))})
    return rows


def _billed(attempts: list[dict[str, Any]], key: str) -> int:
    return sum(a.get(key) or 0 for a in attempts)


def _list_cost(e: LLMCall) -> float | None:
    """What a call's billed attempts would have cost synchronously with no prompt-cache discount; None when one of
    them has no list price. 0 for an answer from madbench's own cache, which records no attempt: nothing was billed
    now (as its ``cached_tokens``; its ``cost_usd`` stays what it cost when it was first asked)."""
    costs = [a.get("list_cost_usd") for a in e.attempts if a.get("prompt_tokens") is not None]
    return None if None in costs else float(sum(costs))


def call_rows(result: RunResult, events: list[AnyEvent], node_id: str) -> list[dict]:
    """One row per answered call. ``cached_tokens`` and ``cache_write_tokens``: of the prompt tokens billed for this
    call now (every attempt's), those the provider read from and wrote to its prompt cache; 0 for an answer from
    madbench's own cache (``cached``), which billed nothing now. ``list_cost_usd``: the same tokens synchronously
    at list price without the prompt cache's discount (against ``cost_usd`` of the fresh calls, the saving
    realised; 0 for a cached answer, whose ``cost_usd`` is what it cost when first asked);
    ``provider_batch``: answered through a provider batch."""
    return [{"run_id": result.run_id, "seq": e.seq, "agent": e.agent, "phase": e.phase, "round": e.round,
             "label": e.label, "model_requested": e.model_requested, "model_used": e.model_used, "provider": e.provider, "is_llm": e.is_llm,
             "cached": e.cached, "prompt_tokens": e.prompt_tokens, "completion_tokens": e.completion_tokens,
             "cached_tokens": _billed(e.attempts, "cached_tokens"), "cache_write_tokens": _billed(e.attempts, "cache_write_tokens"),
             "cost_usd": e.cost_usd, "list_cost_usd": _list_cost(e),
             "provider_batch": any(a.get("provider_batch") for a in e.attempts),
             "latency_s": e.latency_s, "overhead_ms": e.overhead_ms,
             "retries": sum(1 for a in e.attempts if a["kind"] != "ok"), "validation_retries": e.validation_retries,
             "node_id": node_id}
            for e in events if isinstance(e, LLMCall)]


def write_parts(layout: BatchLayout, batch: str, result: RunResult, config: dict, scenario: dict, node_id: str) -> None:
    history = read_trace(layout.trace_path(result.run_id)).typed()
    events = last_attempt(history)
    tables = {"runs": [run_row(batch, result, config, scenario, events, node_id, history)],
              "rounds": round_rows(result, events), "calls": call_rows(result, events, node_id)}
    for name, rows in tables.items():
        frame = pd.DataFrame(rows)
        atomic_write(layout.part(name, result.run_id), lambda p, f=frame: f.to_parquet(p, index=False))


def compact(layout: BatchLayout) -> dict[str, int]:
    """Rebuild runs/rounds/calls.parquet from the per-run parts."""
    counts = {}
    for name in TABLES:
        parts = sorted((layout.root / "parts" / name).glob("*.parquet"))
        frames = [f for f in (pd.read_parquet(p) for p in parts) if len(f)]
        table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
        atomic_write(layout.root / f"{name}.parquet", lambda p, t=table: t.to_parquet(p, index=False))
        counts[name] = len(table)
    return counts


def group_failures(failures: dict[str, str | None], limit_lines: int | None = None) -> list[tuple[str, list[str]]]:
    """Failed runs (run id → reason) grouped by reason, most frequent first; with ``limit_lines``, reasons that
    agree on their first lines are one group (a traceback's tail differs from run to run)."""
    groups: dict[str, list[str]] = {}
    for run_id, reason in failures.items():
        text = str(reason or "no reason recorded")
        if limit_lines is not None:
            text = "\n".join(text.splitlines()[:limit_lines])
        groups.setdefault(text, []).append(run_id)
    return sorted(groups.items(), key=lambda kv: -len(kv[1]))
