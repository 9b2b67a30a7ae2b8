"""Re-scoring stored traces: the parts that need no cluster (finding runs, tasks, rows, failure records).

``madbench rescore`` (``madbench.runner.rescore_job``) fans the runs found here out over Ray runner actors; each actor
grades a whole run with ``score_run`` through its gateway (cached, rate-limited). Both layouts of ``madbench.results`` are read: a batch's and single debates' (``madbench debate --out``).

A run counts when its result file is committed with status ``ok`` and its trace's last attempt ended ``ok``;
its CRIT tasks come from that attempt's ``crit`` events. Under ``<results>/scores/<label>/``
(``madbench.results.scorelog``) each run graded has its rows in the label's row log, then its table, skipped when
present, never overwritten; a run that could not be scored has a failure record instead (the next pass retries it,
and its rows supersede the record); the label ``original`` holds the debate's own scores, extracted from the trace
(no model call).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from madbench.data.atomic import atomic_write, atomic_write_text
from madbench.data.errors import InputError
from madbench.debate.events import Crit, MemoShown, RunEnd, RunStart, last_attempt
from madbench.debate.grading import PILLARS, CritScore
from madbench.debate.validation import parse_json
from madbench.gateway import Gateway, GatewayFailure, ModelSpec, Totals
from madbench.results import ScoreDirs, read_history, read_result, read_scores, run_files
from madbench.results.layout import AGREEMENT, AUDIT_AGREEMENT, ORIGINAL, run_id_of
from madbench.results.scorelog import LabelLog, compact, index, labels
from madbench.scoring.agreement import audit_agreement, label_agreement
from madbench.scoring.audit import audit_turn
from madbench.scoring.crit import CritAnswer
from madbench.scoring.crit_judge import crit_request, finish
from madbench.scoring.rubric import Rubric
from madbench.scoring.rules_scorer import CritTask


@dataclass
class StoredRun:
    run_id: str
    scenario_id: str
    config_name: str
    trace: Path
    memo_ids: list[str]
    crit_events: list[Crit]


def result_status(committed: Path) -> str:
    """The status a committed result file records (``read_result``: a file that is not one is an InputError naming it,
    never a run quietly skipped)."""
    return read_result(committed, run_id_of(committed)).status


def read_run(trace: Path, committed: Path) -> StoredRun | str:
    """The run stored in ``trace`` (its last attempt), or why it cannot be re-scored (a committed result that is not
    one is an InputError)."""
    if not committed.exists():
        return f"{trace}: not committed (no {committed.name}: still running, or interrupted)"
    status = result_status(committed)
    if status != "ok":
        return f"{trace}: run {status or 'without a status'}"
    events = last_attempt(read_history(trace))
    if not events or not isinstance(events[0], RunStart):
        return f"{trace}: no run_start"
    end = next((e for e in events if isinstance(e, RunEnd)), None)
    if end is None or end.status != "ok":
        return f"{trace}: last attempt did not end ok ({'no run_end' if end is None else end.status})"
    memo = next((e for e in events if isinstance(e, MemoShown)), None)
    if memo is None:
        return f"{trace}: no memo event"
    start = events[0]
    crits = [e for e in events if isinstance(e, Crit) and e.label == "crit" and e.task is not None]
    return StoredRun(start.run_id, start.scenario["id"], start.config["name"], trace, memo.ids, crits)


def find_runs(results_dir: str | Path) -> tuple[list[StoredRun], list[str]]:
    """Every finished-ok run under ``results_dir`` (either layout), and why each other trace was skipped. A committed
    result that cannot be read is an error, not a skip: the run it stands for would vanish unseen."""
    root = Path(results_dir)
    if not root.is_dir():
        raise InputError(results_dir, "not a directory", "give a batch results directory or a `madbench debate --out` directory")
    runs: dict[str, StoredRun] = {}
    skipped = []
    for trace, committed in run_files(root):
        run = read_run(trace, committed)
        if isinstance(run, str):
            skipped.append(run)
        elif run.run_id in runs:
            skipped.append(f"{trace}: run {run.run_id} already found at {runs[run.run_id].trace}")
        else:
            runs[run.run_id] = run
    if not runs:
        raise InputError(results_dir, f"no finished runs with traces found ({len(skipped)} skipped)",
                         "give a batch results directory (traces/, runs/) or a `madbench debate --out` directory")
    return list(runs.values()), skipped


def task_of(run: StoredRun, event: Crit) -> CritTask:
    """The task a ``crit`` event stored, whole (every field it kept: older traces keep fewer, and still validate)."""
    if event.task is None:  # read_run keeps only the crit events that stored their task
        raise ValueError(f"run {run.run_id}: the crit event of {event.agent}, round {event.round}, stored no task")
    return CritTask.from_stored(event.agent, event.role, event.round, run.memo_ids, event.task)


def crit_requests(run: StoredRun, spec: ModelSpec, rubric: Rubric) -> list:
    """The gateway request of each of the run's CRIT tasks (what ``score_run`` sends; the dry run prices them)."""
    return [crit_request(task_of(run, e), rubric, spec.model) for e in run.crit_events]


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


def extract_original(runs: list[StoredRun], scores_dir: Path) -> int:
    """The debate's own scores of each run not yet under ``scores/original/``, logged and compacted into its table:
    how many runs were added. The lines are not synced one by one: folded at once into the table (which is), they are
    extracted again from the traces if the machine goes down before."""
    dirs = ScoreDirs(scores_dir)
    done = index(dirs, ORIGINAL).graded
    todo = [run for run in runs if run.run_id not in done and run.crit_events]
    log = LabelLog(scores_dir, ORIGINAL, sync=False)
    try:
        for run in todo:
            log.graded(run.run_id, 1, [score_row(run, e.score, task_of(run, e), ORIGINAL) for e in run.crit_events])
    finally:
        log.close()
    compact(dirs, ORIGINAL)
    return len(todo)


@dataclass
class RunScores:
    """One run graded again: its rows, or the turns that could not be graded (then no row is kept)."""

    run_id: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    totals: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return bool(self.errors)

    @property
    def reason(self) -> str | None:
        return self.errors[0]["reason"] if self.errors else None


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:500]


async def score_run(run: StoredRun, label: str, spec: ModelSpec, rubric: Rubric, gateway: Gateway,
                    limit: asyncio.Semaphore | None = None, reraise: tuple[type[BaseException], ...] = ()) -> RunScores:
    """Grade every CRIT task of ``run`` with ``spec`` (all at once, at most ``limit`` in flight). A turn whose
    grading fails (a ``GatewayFailure`` after its validation retries, or any exception) fails the run; the
    other turns still finish, so their answers are cached for the retry. ``reraise``: exceptions that are
    not the run's fault (a lost rate-limiter actor) and must reach the caller."""
    limit = limit or asyncio.Semaphore(8)
    totals = Totals()

    async def one(event: Crit) -> dict[str, Any]:
        task = task_of(run, event)
        request = crit_request(task, rubric, spec.model)
        async with limit:
            try:
                c = await gateway.complete(request, spec, lambda content, s: parse_json(content, CritAnswer))
            except GatewayFailure as exc:
                totals.add_failure(exc.attempts)
                raise
        totals.add(c)
        return score_row(run, finish(task, c.value, c.model_used, c.is_llm, rubric), task, label)

    results = await asyncio.gather(*[one(e) for e in run.crit_events], return_exceptions=True)
    out = RunScores(run.run_id, totals=totals.model_dump())
    for event, r in zip(run.crit_events, results, strict=True):
        if isinstance(r, reraise):
            raise r
        if isinstance(r, BaseException):
            out.errors.append({"agent_id": event.agent, "round": event.round, "reason": _reason(r)})
        else:
            out.rows.append(r)
    if out.failed:
        out.rows = []
    return out


def failure_record(label: str, run: StoredRun, result: RunScores, scorer: str, rubric: str) -> dict[str, Any]:
    """Why ``run`` could not be graded: its line in the label's log, then in ``failed.jsonl``."""
    return {"run_id": run.run_id, "scenario_id": run.scenario_id, "config": run.config_name, "label": label,
            "scorer": scorer, "rubric": rubric, "reason": result.reason, "turns": len(run.crit_events),
            "failed_turns": result.errors, "totals": result.totals, "trace": str(run.trace),
            "failed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def write_scorer(scores_dir: Path, label: str, spec: ModelSpec, rubric: Rubric) -> Path:
    """Record the scorer and rubric ``label`` is graded with, whole, beside its parts: replay grades it again with
    exactly these (an endpoint, a price, a rubric's weights), not with what their names resolve to later."""
    body = {"spec": spec.model_dump(mode="json"), "rubric": rubric.model_dump(mode="json")}
    return atomic_write_text(ScoreDirs(scores_dir).scorer(label), json.dumps(body, indent=1, sort_keys=True))


def read_scorer(scores_dir: Path, label: str) -> tuple[ModelSpec, Rubric] | None:
    """The scorer and rubric ``write_scorer`` recorded for ``label``; None for a label graded before it was recorded."""
    path = ScoreDirs(scores_dir).scorer(label)
    if not path.is_file():
        return None
    body = json.loads(path.read_text())
    return ModelSpec.model_validate(body["spec"]), Rubric.model_validate(body["rubric"])


def agreement_tables(scores_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per pillar and ρ, the agreement of every pair of labels under ``scores_dir`` (``original`` first), and each
    label's agreement with the deterministic audit; both written beside the labels as Parquet (rebuilt each pass)."""
    found = labels(scores_dir)
    frames = {label: read_scores(scores_dir, label) for label in found}
    pairs = [(a, b) for i, a in enumerate(found) for b in found[i + 1:]]
    pillars = label_agreement(frames, pairs, [*PILLARS, "rho"])
    audit = [audit_agreement(f).assign(label=label) for label, f in frames.items() if not f.empty]
    audit_table = pd.concat(audit, ignore_index=True) if audit else pd.DataFrame()
    if not audit_table.empty:
        audit_table = audit_table[["label", *[c for c in audit_table.columns if c != "label"]]]
    atomic_write(Path(scores_dir) / AGREEMENT, lambda p: pillars.to_parquet(p, index=False))
    atomic_write(Path(scores_dir) / AUDIT_AGREEMENT, lambda p: audit_table.to_parquet(p, index=False))
    return pillars, audit_table
