"""`madbench export`: a batch's runs in formats other tools read.

``inspect``: one inspect_ai eval log per config (``<config>.json``, inspect's documented JSON log format, version 2),
which `inspect view --log-dir OUT` opens and ``inspect_ai.log.read_eval_log`` reads. Each scenario and replicate is
one sample (``id`` the scenario, ``epoch`` the replicate + 1); its messages are the run's answered calls in trace
order (the answer as the assistant's message, the call's agent, phase, round and label as its metadata; the prompts
are not in a trace, so each call's user message names the call instead of repeating it); its scores are the run's
metrics and CRIT pillar scores from runs.parquet (a null one is left out: inspect has no missing score); the batch's
manifest is the log's metadata. A failed run is a sample too, marked as inspect marks a sample that errored (its
``error`` message the run's reason), whether it committed a result or failed before it could (then its row is the
manifest's: run id, scenario, config, replicate, status and reason). The logs are written here, with no dependency on
inspect_ai.

``jsonl``: ``runs.jsonl``, one self-describing record per run that ended (ok or failed, with ``status`` and
``error``): the format and madbench version, the batch, the run's row of runs.parquet (or of the manifest), its config and scenario as the trace recorded them, and the manifest's provenance.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from madbench.data.atomic import atomic_write_text
from madbench.data.errors import InputError
from madbench.data.names import inside
from madbench.debate.events import Event, LLMCall, RunStart, last_attempt
from madbench.debate.grading import PILLARS
from madbench.debate.trace import read_trace
from madbench.results import FORMAT_VERSION, ResultsDir, read_committed_history
from madbench.results.table_schemas import METRICS
from madbench.runner.committed import read_committed

#: The runs.parquet columns an exported sample carries as its scores.
SCORES = ("total_return_pct", "excess_return_pct", "sharpe", "sortino", "volatility", "max_drawdown_pct", "rho_bar",
          *(f"crit_{p}" for p in PILLARS))
#: inspect_ai's eval log format version these logs are written in.
INSPECT_LOG_VERSION = 2


def _value(v: Any) -> Any:
    """A table value as plain JSON: None for missing (NaN, NA), numbers and text as they are."""
    if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
        return None
    return v.item() if hasattr(v, "item") else v


def _scores(row: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: {"value": row[name]} for name in SCORES if _value(row.get(name)) is not None}


def _messages(events: list[Event]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for e in events:
        if not isinstance(e, LLMCall):
            continue
        meta = {"agent": e.agent, "phase": e.phase, "round": e.round, "label": e.label, "seq": e.seq,
                "model_requested": e.model_requested, "model_served": e.model_served, "cached": e.cached}
        out.append({"role": "user", "content": f"[{e.agent}: {e.label}, round {e.round}]", "source": "input",
                    "metadata": meta})
        out.append({"role": "assistant", "content": e.response or "", "source": "generate", "model": e.model_used,
                    "metadata": meta})
    return out


def _last_attempt(results: ResultsDir, run_id: str) -> list[Event]:
    """The committed run's last attempt; a missing or damaged trace stops the export (never a run exported short)."""
    events = last_attempt(list[Event](read_committed_history(results.dirs.trace_path(run_id))))
    if not any(isinstance(e, RunStart) for e in events):
        raise InputError(results.dirs.trace_path(run_id), "no run_start in the last attempt",
                         "the trace is damaged: restore it from a copy of the results")
    return events


def _uncommitted_attempt(results: ResultsDir, run_id: str) -> list[Event]:
    """The last attempt of a run that failed before it committed (an error outside the debate: the manifest holds its
    reason), as far as its trace got; [] where it wrote none."""
    return last_attempt(list[Event](read_trace(results.dirs.trace_path(run_id)).typed()))


def _runs(results: ResultsDir) -> list[tuple[dict[str, Any], list[Event]]]:
    """Every run that ended, ok or failed, with its last attempt's events: the committed ones as runs.parquet has them,
    and the runs the manifest records as failed that never committed (a row of the manifest's fields, its reason as
    ``error``). Pending runs have no outcome yet and are left out."""
    runs = results.runs
    out = [({k: _value(v) for k, v in r.items()}, _last_attempt(results, r["run_id"]))
           for r in runs.to_dict(orient="records")]
    manifest = results.manifest
    committed = set(runs["run_id"]) if len(runs) else set()
    batch = str(manifest.spec.get("name") or results.root.name) if manifest is not None else results.root.name
    for m in manifest.runs if manifest is not None else []:
        if m.status != "failed" or m.run_id in committed:
            continue
        events = _uncommitted_attempt(results, m.run_id)
        start = next((e for e in events if isinstance(e, RunStart)), None)
        quarter = start.scenario.get("invest_quarter") if start is not None else None
        out.append(({"batch": batch, "run_id": m.run_id, "status": "failed", "error": m.error or "no reason recorded",
                     "scenario_id": m.scenario_id, "invest_quarter": quarter, "config": m.config,
                     "replicate": m.replicate}, events))
    return out


def _sample(row: dict[str, Any], events: list[Event]) -> dict[str, Any]:
    messages = _messages(events)
    answer = next((m["content"] for m in reversed(messages) if m["role"] == "assistant"), "")
    sample = {"id": row["scenario_id"], "epoch": int(row["replicate"]) + 1,
              "input": f"Allocate a portfolio for scenario {row['scenario_id']} ({row.get('invest_quarter')})",
              "target": "", "messages": messages,
              "output": {"model": row.get("model_default") or "", "choices": [
                  {"message": {"role": "assistant", "content": answer, "source": "generate"}, "stop_reason": "stop"}]},
              "scores": _scores(row), "metadata": row}
    if row["status"] != "ok":  # inspect's own mark of a sample that errored, with the run's reason
        sample["error"] = {"message": row.get("error") or "no reason recorded", "traceback": "", "traceback_ansi": ""}
    return sample


def _mean_metrics(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for name in SCORES:
        values = [row[name] for row in rows if _value(row.get(name)) is not None]
        if values:
            out.append({"name": name, "scorer": name, "scored_samples": len(values),
                        "unscored_samples": len(rows) - len(values),
                        "metrics": {"mean": {"name": "mean", "value": sum(values) / len(values)}}})
    return out


def inspect_logs(results: ResultsDir, out: Path) -> list[Path]:
    manifest = results.manifest
    runs = _runs(results)
    meta = json.loads(manifest.model_dump_json(exclude={"runs"})) if manifest is not None else {}
    batch = str(runs[0][0]["batch"]) if runs else results.root.name
    created = manifest.updated if manifest is not None else dt.datetime.now(dt.UTC).isoformat()
    logs: dict[Path, str] = {}
    for config in sorted({row["config"] for row, _ in runs}):
        mine = sorted(((row, events) for row, events in runs if row["config"] == config),
                      key=lambda re: (re[0]["scenario_id"], re[0]["replicate"]))
        rows = [row for row, _ in mine]
        log = {
            "version": INSPECT_LOG_VERSION, "status": "success",
            "eval": {"task": f"madbench/{config}", "task_id": f"{batch}/{config}", "run_id": batch, "created": created,
                     "model": next((r.get("model_default") for r in rows if r.get("model_default")), ""),
                     "dataset": {"name": batch, "samples": len(rows)}, "config": {}, "metadata": meta},
            "plan": {"name": "madbench", "steps": [{"solver": str(rows[0].get("protocol") or "debate"), "params": {}}]},
            "results": {"total_samples": len(rows), "completed_samples": sum(r["status"] == "ok" for r in rows),
                        "scores": _mean_metrics(rows)},
            "stats": {"started_at": created, "completed_at": created, "model_usage": {}},
            "samples": [_sample(row, events) for row, events in mine],
        }
        # a config's name becomes the log's file name: it must stay a file of OUT, whatever runs.parquet says
        path = inside(out, str(config), results.dirs.table("runs"), "config name", ".json")
        logs[path] = json.dumps(log, indent=1, allow_nan=False)
    for path, text in logs.items():  # every log built before the first is written: none half-exported
        atomic_write_text(path, text)
    return list(logs)


def jsonl_records(results: ResultsDir, out: Path) -> list[Path]:
    manifest = results.manifest
    provenance = json.loads(manifest.provenance.model_dump_json()) if manifest and manifest.provenance else None
    lines = []
    for r, events in sorted(_runs(results), key=lambda re: re[0]["run_id"]):
        start = next((e for e in events if isinstance(e, RunStart)), None)
        lines.append(json.dumps({
            "record": "madbench.run", "format_version": FORMAT_VERSION, "batch": r["batch"], "run_id": r["run_id"],
            "status": r["status"], "error": r.get("error"), "row": r,
            "metrics": {m: r.get(m) for m in METRICS},
            "config": start.config if start else None, "scenario": start.scenario if start else None,
            "provenance": provenance}, sort_keys=True, allow_nan=False))
    path = out / "runs.jsonl"
    atomic_write_text(path, "".join(line + "\n" for line in lines))  # no run ended: an empty file, not a blank line
    return [path]


FORMATS: dict[str, Callable[[ResultsDir, Path], list[Path]]] = {"inspect": inspect_logs, "jsonl": jsonl_records}


def export(root: str | Path, fmt: str, out: str | Path | None = None) -> list[Path]:
    if fmt not in FORMATS:
        raise InputError("--format", f"unknown format {fmt!r}", f"give one of {', '.join(FORMATS)}")
    if out is not None and not str(out).strip():
        raise InputError("--out", "is empty", "give the export directory, or leave --out out for RESULTS/export/FORMAT")
    results = read_committed(root, "export")
    results.results()  # every commit point read whole: a damaged one is named here, not exported
    target = Path(out) if out is not None else results.root / "export" / fmt
    _writable(target, out is not None)
    return FORMATS[fmt](results, target)


def _writable(target: Path, given: bool) -> None:
    """The output directory there, or creatable, and writable before anything is read or written; it is made only
    as the first file is written, so a refused export leaves no empty folder behind."""
    fix = "give --out a writable directory" + ("" if given else " (the default is inside the results directory)")
    if target.exists() and not target.is_dir():
        raise InputError(target, "is a file, not a directory", fix)
    existing = next(p for p in (target, *target.absolute().parents) if p.exists())
    if not existing.is_dir():
        raise InputError(target, f"cannot create the export directory: {existing} is a file", fix)
    if not os.access(existing, os.W_OK):
        raise InputError(target, "the export directory is not writable" if existing == target
                         else f"cannot create the export directory: {existing} is not writable", fix)
