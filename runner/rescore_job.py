"""`madbench rescore` as a batch job on Ray: grade stored CRIT tasks again with another scorer or rubric.

The driver finds the finished runs (``madbench.scoring.rescore.find_runs``: batch and debate layouts), extracts the
debate's own scores as ``scores/original/``, and feeds every run not yet graded under ``scores/<label>/`` to a
small pool of ``RescoreActor``s through the dispatch loop `madbench run` shares (runner/dispatch.py: at most
``max_in_flight`` outstanding; a lost actor replaced, its run requeued; Ctrl-C). Each actor holds one gateway and one
handle on the same disk cache as ``madbench run`` and grades a whole run per call; the gateway queues at the
same cluster-wide rate-limiter actors (one per provider, model and api_base). The driver appends each run's rows
to its row log of the label, or its failure record when a turn could not be graded (``madbench.results.scorelog``),
and folds its log into the label's table (``scores.parquet``, ``failed.jsonl``) when the pass ends; one bad run never
stops the job, and the next pass retries exactly the runs not graded. A pass killed (kill -9 included) loses no graded
run: the next one reads the logs it left, grades only the others, and folds them all.
"""

from __future__ import annotations

import asyncio
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from madbench.gateway import ModelSpec, ResponseCache
from madbench.results import BatchDirs, ScoreDirs
from madbench.results.scorelog import Index, LabelLog, compact, index
from madbench.runner.dispatch import INTERRUPTED, ActorPool, Dispatch, Work
from madbench.runner.execute import init_ray
from madbench.runner.lock import ResultsLock, WriterGuard
from madbench.runner.progress import Progress, RescoreLine
from madbench.runner.run_report import RunReport, Status
from madbench.runner.store import group_failures
from madbench.runner.wiring import build_gateway, build_providers
from madbench.scoring import rescore as rs
from madbench.scoring.rescore import RunScores, StoredRun
from madbench.scoring.rubric import Rubric

#: Tokens a CRIT answer is expected to take (diagnostics, four scores, four short explanations), for the dry run.
CRIT_ANSWER_TOKENS = 500


class RescoreActor:
    """Grades whole runs' CRIT tasks: one gateway, one cache handle; turns of all its runs share ``concurrency``."""

    def __init__(self, cache_dir: str, concurrency: int, root: str, holder: str):
        import ray

        self.cache = ResponseCache(Path(cache_dir))
        # An orphan of a killed driver pays for nothing more (runner.lock.WriterGuard).
        self.gateway = build_gateway(cache=self.cache, guard=WriterGuard(root, holder))
        self.limit = asyncio.Semaphore(max(1, concurrency))
        self.node_id = ray.get_runtime_context().get_node_id()

    async def score(self, run: StoredRun, label: str, spec: dict, rubric: dict) -> Graded:
        import ray

        t0 = time.perf_counter()
        try:
            result = await rs.score_run(run, label, ModelSpec.model_validate(spec), Rubric.model_validate(rubric),
                                        self.gateway, self.limit, reraise=(ray.exceptions.RayActorError,))
        except ray.exceptions.RayActorError:
            raise  # a limiter actor was lost with its node: not the run's fault, the driver requeues it
        except Exception as exc:  # survives Ray's pickling with its type, message and traceback
            raise RuntimeError(f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=8)}") from None
        return Graded(result, self.node_id, time.perf_counter() - t0)

    async def totals(self) -> dict[str, Any]:
        return self.gateway.totals.model_dump()


@dataclass
class Job:
    """What one pass does: the label, the scorer, and where things are."""

    root: Path
    label: str
    spec: ModelSpec
    rubric: Rubric
    cache_dir: Path

    @property
    def scores_dir(self) -> Path:
        return BatchDirs(self.root).scores

    @property
    def scorer_is_llm(self) -> bool:
        return build_providers().for_model(self.spec.model).is_llm


@dataclass
class Plan:
    runs: list[StoredRun]
    skipped: list[str]
    todo: list[StoredRun] = field(default_factory=list)
    already: list[str] = field(default_factory=list)
    no_turns: int = 0
    #: The label's graded runs and failed attempts, from its table's run ids and its logs (no file per run).
    done: Index = field(default_factory=Index)


def plan(job: Job) -> Plan:
    runs, skipped = rs.find_runs(job.root)
    p = Plan(runs, skipped, done=index(ScoreDirs(job.scores_dir), job.label))
    for run in runs:
        if run.run_id in p.done.graded:
            p.already.append(run.run_id)
        elif not run.crit_events:
            p.no_turns += 1
        else:
            p.todo.append(run)
    return p


# -- the dry run: what a pass would send, looked up in the cache without calling anything


def _cached(cache: ResponseCache | None, key: str) -> bool:
    return cache is not None and cache.contains(key)


def dry_run(job: Job, p: Plan) -> dict[str, Any]:
    gateway = build_gateway()
    _, provider = gateway.prepare(job.spec)
    calls = cached = prompt_tokens = 0
    cache = ResponseCache(job.cache_dir, read_only=True) if provider.cacheable else None  # looked up, never written
    try:
        for run in p.todo:
            for request in rs.crit_requests(run, job.spec, job.rubric):
                calls += 1
                if _cached(cache, gateway.cache_key(request, job.spec)):
                    cached += 1
                else:
                    prompt_tokens += int(sum(len(m.content) for m in request.messages) / 3.5)
    finally:
        if cache is not None:
            cache.close()
    is_llm = provider.is_llm
    completion_tokens = (calls - cached) * CRIT_ANSWER_TOKENS
    cost = provider.cost(job.spec.model, prompt_tokens, completion_tokens) if calls > cached else 0.0
    return {"results_dir": str(job.root), "label": job.label, "scorer": job.spec.model, "rubric": job.rubric.name,
            "scorer_is_llm": is_llm, "runs_found": len(p.runs), "runs_skipped_not_ok": len(p.skipped),
            "runs_already_scored": len(p.already), "runs_without_crit_turns": p.no_turns, "runs_to_score": len(p.todo),
            "crit_tasks": calls, "expected_calls": calls, "cached_calls": cached, "uncached_calls": calls - cached,
            "expected_prompt_tokens": prompt_tokens, "expected_completion_tokens": completion_tokens,
            "estimated_cost_usd": None if cost is None else round(cost, 4),
            "cost_note": ("rule-based scorer: no provider call, no cost" if is_llm is False
                          else f"{job.spec.model} is not in litellm's cost map" if cost is None
                          else "uncached calls only, before validation retries"),
            "cache_dir": str(job.cache_dir)}


# -- the pass itself


@dataclass
class Outcome:
    scored: list[str] = field(default_factory=list)
    failed: dict[str, str | None] = field(default_factory=dict)  # run id -> reason
    turns: int = 0
    totals: Counter = field(default_factory=Counter)
    interrupted: bool = False


@dataclass
class Graded:
    """A ``RescoreActor``'s answer: one run's scores (or why it could not be graded)."""

    result: RunScores
    node_id: str | None = None
    wall_s: float | None = None


class RescoreWork(Work[StoredRun]):
    """`madbench rescore`'s unit: a stored run, graded whole by a ``RescoreActor``; the driver appends its rows, or its
    failure record, to its log of the label (``log``) and adds it to the pass's ``Outcome``."""

    kept = "the runs graded are kept"

    def __init__(self, job: Job, done: Index, log: LabelLog):
        self.job, self.outcome, self.done, self.log = job, Outcome(), done, log
        self._spec, self._rubric = job.spec.model_dump(mode="json"), job.rubric.model_dump(mode="json")

    def key(self, run: StoredRun) -> str:
        return run.run_id

    def submit(self, handle, run: StoredRun, k: int, attempt: int):
        return handle.score.remote(run, self.job.label, self._spec, self._rubric)

    def failure(self, run: StoredRun, exc: Exception) -> Graded:
        cause = getattr(exc, "cause", None)
        return Graded(RunScores(run.run_id, errors=[{"agent_id": None, "round": None,
                                                     "reason": str(cause or exc).strip().splitlines()[0][:500]}]))

    def settle(self, run: StoredRun, answer: Graded, k: int, handle) -> RunReport:
        o, result = self.outcome, answer.result
        o.totals.update({k: v for k, v in result.totals.items() if isinstance(v, (int, float))})
        attempt = self.done.attempt(run.run_id)
        if result.failed:
            self.log.failed(run.run_id, attempt, rs.failure_record(self.job.label, run, result, self.job.spec.model,
                                                                   self.job.rubric.name))
            o.failed[run.run_id] = result.reason
        else:
            self.log.graded(run.run_id, attempt, result.rows)
            o.scored.append(run.run_id)
            o.turns += len(result.rows)
        return RunReport(run_id=run.run_id, status=Status.FAILED if result.failed else Status.OK,
                         error=result.reason if result.failed else None, totals=dict(result.totals),
                         node_id=answer.node_id, wall_s=answer.wall_s)


def run_rescore(job: Job, p: Plan, address: str | None = None, workers: int = 2, max_in_flight: int = 8,
                concurrency: int = 8, quiet: bool = False, progress_every_s: float = 5.0) -> Outcome:
    """One pass: the original scores extracted, then every run of ``p.todo`` graded on Ray actors. It holds the results
    directory's lock (runner/lock.py) throughout, as ``madbench run`` does: one writer per results directory."""
    with ResultsLock(job.root, "madbench rescore") as lock:
        return _run_rescore(job, p, address, workers, max_in_flight, concurrency, quiet, progress_every_s, lock.holder)


def _run_rescore(job: Job, p: Plan, address: str | None, workers: int, max_in_flight: int, concurrency: int,
                 quiet: bool, progress_every_s: float, holder: str) -> Outcome:
    rs.extract_original(p.runs, job.scores_dir)
    rs.write_scorer(job.scores_dir, job.label, job.spec, job.rubric)
    outcome = Outcome()
    if p.todo:
        progress = Progress(len(p.todo), RescoreLine(job.label), enabled=not quiet, interval_s=progress_every_s)
        ray = init_ray(address)
        pool = ActorPool(ray, RescoreActor, (str(job.cache_dir), concurrency, str(job.root), holder),
                         min(workers, len(p.todo)), max_in_flight)
        progress.poll = pool.totals
        log = LabelLog(job.scores_dir, job.label)
        work = RescoreWork(job, p.done, log)
        try:
            work.outcome.interrupted = Dispatch(pool, work, p.todo, max_in_flight, progress).run() == INTERRUPTED
        finally:
            log.close()
        outcome = work.outcome
    # This pass's log and any a killed pass left, folded into the label's table (and an older directory's files).
    compact(ScoreDirs(job.scores_dir), job.label)
    return outcome


def failure_reasons(outcome: Outcome) -> list[tuple[str, list[str]]]:
    """Distinct failure reasons, most frequent first, each with its runs."""
    return group_failures(outcome.failed)

