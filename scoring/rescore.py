"""Re-score the stored traces of finished runs without re-running any debate.

Reads every ``trace.jsonl`` under a results directory (the last attempt of
each run that ended ``ok``), rebuilds each CRIT task from its ``crit`` event,
scores it with the given scorer and rubric through the gateway (cached,
rate-limited), and writes one Parquet part per run under
``scores/<label>/``. Parts are written atomically and skipped when present,
so a rescore is resumable and never overwrites; the debate's own scores are
extracted beside them as ``scores/original/`` (no model call).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from debate.events import Crit, MemoShown, RunEnd, last_attempt
from debate.grading import PILLARS, CritScore
from debate.trace import read_trace
from debate.validation import parse_json
from madbench_data.atomic import atomic_write
from madbench_data.errors import InputError
from madbench_gateway import ModelRouting
from scoring.audit import audit_turn
from scoring.crit import CritAnswer
from scoring.crit_judge import crit_request, finish
from scoring.rubric import Rubric
from scoring.rules_scorer import CritTask

ORIGINAL = "original"


@dataclass
class StoredRun:
    run_id: str
    scenario_id: str
    config_name: str
    trace: Path
    memo_ids: list[str]
    crit_events: list[Crit]


def find_runs(results_dir: str | Path) -> tuple[list[StoredRun], list[str]]:
    root = Path(results_dir)
    if not root.is_dir():
        raise InputError(results_dir, "not a directory", "give a batch results directory or a `madbench debate --out` directory")
    runs, skipped = [], []
    for path in sorted(root.rglob("trace.jsonl")):
        events = last_attempt(read_trace(path).typed())
        if not events or events[0].event != "run_start":
            skipped.append(f"{path}: no run_start")
            continue
        end = next((e for e in events if isinstance(e, RunEnd)), None)
        if end is None or end.status != "ok":
            skipped.append(f"{path}: run not finished ok ({'no run_end' if end is None else end.status})")
            continue
        start, memo = events[0], next(e for e in events if isinstance(e, MemoShown))
        crits = [e for e in events if isinstance(e, Crit) and e.label == "crit" and e.task is not None]
        runs.append(StoredRun(start.run_id, start.scenario["id"], start.config["name"], path, memo.ids, crits))
    if not runs:
        raise InputError(results_dir, f"no finished runs with traces found ({len(skipped)} skipped)", "run a batch or a debate first")
    return runs, skipped


def task_of(run: StoredRun, event: Crit) -> CritTask:
    return CritTask(agent_id=event.agent, role=event.role, round=event.round, memo_ids=run.memo_ids,
                    argument=event.task["argument"], critiques=event.task["critiques"])


def score_row(run: StoredRun, score: CritScore, task: CritTask, label: str) -> dict[str, Any]:
    audit = audit_turn(task.argument, set(task.memo_ids), [(c.from_agent, c.item) for c in task.critiques])
    row = {"run_id": run.run_id, "scenario_id": run.scenario_id, "config": run.config_name, "label": label,
           "round": score.round, "agent_id": score.agent_id, "role": score.role, "scorer": score.scorer,
           "is_llm": score.is_llm, "rubric": score.rubric, "rho": score.rho, "clips": "; ".join(score.clips)}
    row |= {p: getattr(score.scores, p) for p in PILLARS}
    row |= {f"raw_{p}": getattr(score.raw_scores, p) for p in PILLARS}
    row |= {f"diag_{k}": int(v) for k, v in score.diagnostics.model_dump().items()}
    row |= {f"audit_{k}": v for k, v in audit.model_dump().items()}
    return row


def write_part(out: Path, rows: list[dict[str, Any]]) -> None:
    table = pd.DataFrame(rows)
    atomic_write(out, lambda p: table.to_parquet(p, index=False))


def extract_original(runs: list[StoredRun], scores_dir: Path) -> int:
    written = 0
    for run in runs:
        part = scores_dir / ORIGINAL / f"{run.run_id}.parquet"
        if part.exists() or not run.crit_events:
            continue
        rows = [score_row(run, e.score, task_of(run, e), ORIGINAL) for e in run.crit_events]
        write_part(part, rows)
        written += 1
    return written


async def rescore_runs(runs: list[StoredRun], scores_dir: Path, label: str, scorer, rubric: Rubric, gateway,
                       concurrency: int = 8) -> dict[str, int]:
    """``scorer`` is a model string or a ModelSpec (rules/auto and rules resolve to rules/crit)."""
    spec = ModelRouting.single(scorer).resolve("scorer", "crit")
    sem = asyncio.Semaphore(concurrency)
    counts = {"runs_scored": 0, "runs_skipped_existing": 0, "turns": 0}

    async def one(run: StoredRun, event: Crit) -> dict[str, Any]:
        task = task_of(run, event)
        request = crit_request(task, rubric, spec.model)
        async with sem:
            c = await gateway.complete(request, spec, lambda content, s: parse_json(content, CritAnswer))
        return score_row(run, finish(task, c.value, c.model_used, c.is_llm, rubric), task, label)

    for run in runs:
        part = scores_dir / label / f"{run.run_id}.parquet"
        if part.exists():
            counts["runs_skipped_existing"] += 1
            continue
        rows = await asyncio.gather(*[one(run, e) for e in run.crit_events])
        if rows:
            write_part(part, list(rows))
            counts["runs_scored"] += 1
            counts["turns"] += len(rows)
    return counts


def read_scores(scores_dir: Path, label: str) -> pd.DataFrame:
    parts = sorted((scores_dir / label).glob("*.parquet"))
    return pd.concat([pd.read_parquet(p) for p in parts], ignore_index=True) if parts else pd.DataFrame()
