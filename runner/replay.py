"""`madbench replay`: rebuild a batch's derived artifacts from its traces and response cache, and compare.

Everything a batch derives is rebuilt in a scratch directory with no provider request: the three tables from each
committed run's trace (``store.part_rows``, the code the runner commits with), the re-scores (``original`` extracted
from the traces; every other label graded again, with the scorer and rubric `madbench rescore` recorded in its
``scorer.json``, through a gateway in replay mode, which answers from the cache and refuses any call that would reach
a model provider), the statistics `madbench stats` and the report compute, and each
traced LLM answer looked up in the cache. Each rebuilt table is compared with the stored one byte for byte, and
where the bytes differ value by value: each difference names the table, the run, the column and both values.
"""

from __future__ import annotations

import asyncio
import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from madbench.data.errors import InputError
from madbench.debate.events import Event, LLMCall, RunStart, last_attempt
from madbench.eval.report.figures import cost_summary
from madbench.eval.stats.analysis import analyse
from madbench.eval.stats.frame import batch_order, batch_pairs, json_safe
from madbench.gateway import ModelSpec, ResponseCache
from madbench.results import TABLES, BatchDirs, ResultsDir, ScoreDirs, read_committed_history, read_result, scorelog
from madbench.results.layout import ORIGINAL
from madbench.results.reader import read_scores
from madbench.results.table_schemas import concat, read_table, to_table, write_table
from madbench.runner.committed import manifest_of, read_committed
from madbench.runner.store import ledger_calls, part_rows
from madbench.runner.wiring import build_gateway
from madbench.scoring import rescore as rs
from madbench.scoring.rubric import load_rubric

#: The columns that identify a row of each table (with ``run_id``), to pair stored and rebuilt rows.
ROW_KEYS = {"runs": ("run_id",), "rounds": ("run_id", "round", "agent_id"), "calls": ("run_id", "seq"),
            "scores": ("label", "run_id", "round", "agent_id")}
#: Columns that record how long something took on the machine that ran it: measured, so never replayed.
TIMINGS = {"calls": ("latency_s", "overhead_ms"), "runs": ("latency_s",)}


@dataclass(frozen=True)
class Difference:
    table: str
    run: str
    column: str
    stored: Any
    replayed: Any

    def line(self) -> str:
        return f"{self.table}: run {self.run}, column {self.column}: stored {self.stored!r}, replayed {self.replayed!r}"


@dataclass
class Replay:
    root: Path
    runs: int = 0
    #: Requests the replay sent to providers: 0, or it would have stopped.
    provider_requests: int = 0
    cached_answers_checked: int = 0
    byte_identical: dict[str, bool] = field(default_factory=dict)
    differences: list[Difference] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        return not self.differences


def replay(root: str | Path, cache_dir: str | Path | None = None, scratch: str | Path | None = None) -> Replay:
    """Rebuild and compare everything ``root`` (a batch's results directory) derives; ``cache_dir``: the response
    cache (default: the one its manifest names, else ``<root>/../cache`` is not guessed: give it)."""
    results = read_committed(root, "replay", snapshot=False)
    manifest = manifest_of(results)
    answers = _traced_answers(results)
    cache = _open_cache(root, cache_dir, manifest.spec.get("cache_dir"))
    if cache is None and any(answers.values()):
        recorded = manifest.spec.get("cache_dir")
        raise InputError(root, f"its traces hold {sum(map(len, answers.values()))} LLM answers and no response cache "
                         f"was found{f' (the manifest records {recorded}, not there)' if recorded else ''}: replay "
                         "answers only from the cache and never calls a provider",
                         "give the cache the results were made with: --cache-dir DIR")
    try:
        with tempfile.TemporaryDirectory(prefix="madbench-replay-", dir=scratch) as tmp:
            out = Replay(Path(root))
            rebuilt = BatchDirs(Path(tmp) / "rebuilt")
            out.runs = _rebuild_tables(results, rebuilt, manifest.spec["name"],
                                       {m.run_id: m.node_id for m in manifest.runs})
            for name in TABLES:
                out.byte_identical[name] = _compare_table(results.dirs.table(name), rebuilt.table(name), name, out)
            out.cached_answers_checked = _check_answers(answers, cache, out)
            out.provider_requests = _rescore(results, rebuilt.scores, cache, out)
            _compare_scores(results, rebuilt, out)
            if not all(out.byte_identical.values()):  # the same bytes in give the same statistics out: nothing to redo
                _compare_stats(results, ResultsDir(rebuilt.root), out)
            return out
    finally:
        if cache is not None:
            cache.close()


def _rebuild_tables(results: ResultsDir, rebuilt: BatchDirs, batch: str, nodes: dict[str, str | None]) -> int:
    """Each committed run's rows, built from its trace as the runner builds its parts, and the three tables concatenated
    from them in run-id order, as ``store.compact`` concatenates the parts (in memory: no part is written)."""
    parts: dict[str, list[pa.Table]] = {name: [] for name in TABLES}
    for path in sorted(results.dirs.result_files(), key=lambda p: p.stem):
        result = read_result(path, path.stem)
        history = read_committed_history(results.dirs.trace_path(result.run_id))
        start = next((e for e in last_attempt(list[Event](history)) if isinstance(e, RunStart)), None)
        if start is None:
            raise InputError(results.dirs.trace_path(result.run_id), "no run_start in the last attempt",
                             "the trace is damaged: restore it from a copy of the results")
        rows = part_rows(batch, result, start.config, start.scenario, nodes.get(result.run_id) or "", history)
        for name, table_rows in rows.items():
            parts[name].append(to_table(table_rows, name, rebuilt.part(name, result.run_id)))
    # the ledger's paid calls that no trace records, as the runner's compaction adds them
    parts["calls"].append(to_table(ledger_calls(results.dirs), "calls", rebuilt.table("calls")))
    for name, tables in parts.items():
        write_table(rebuilt.table(name), concat(tables, name))
    return len(parts["runs"])


def _open_cache(root: str | Path, cli: str | Path | None, recorded: str | None) -> ResponseCache | None:
    """The cache to replay from: ``--cache-dir``, else the one the manifest recorded when it is still there; None when
    neither exists (a batch of rule-based runs needs none; one with traced LLM answers is then refused)."""
    for candidate in (cli, recorded):
        if candidate is not None and (Path(candidate) / "responses").is_dir():
            return ResponseCache(Path(candidate), read_only=True)
        if candidate is not None and cli is not None:
            raise InputError("--cache-dir", f"{candidate}: no response cache here", "give the cache copied with the results")
    return None


def _traced_answers(results: ResultsDir) -> dict[str, list[LLMCall]]:
    """Per committed run, the LLM answers its last attempt took (a key asked twice, a feedback retry, vouches for its
    last answer): what the cache must still give for the run's tables to follow from it."""
    out = {}
    for path in sorted(results.dirs.result_files(), key=lambda p: p.stem):
        calls = [e for e in last_attempt(list[Event](read_committed_history(results.dirs.trace_path(path.stem))))
                 if isinstance(e, LLMCall) and e.is_llm and e.answer_sha256]
        out[path.stem] = list({e.key: e for e in calls}.values())
    return out


def _check_answers(answers: dict[str, list[LLMCall]], cache: ResponseCache | None, out: Replay) -> int:
    """Each traced LLM answer looked up in the cache (by its sha256, recorded in the trace); a miss is a difference."""
    checked = 0
    for run_id, calls in answers.items():
        for e in calls:
            state = cache.inspect(e.key) if cache is not None else None
            found = None if state is None or state.status != "present" else state.answer_sha256
            if found != e.answer_sha256:
                out.differences.append(Difference("cache", run_id, f"answer of call {e.seq} ({e.agent} {e.label})",
                                                  e.answer_sha256, found if state is None else found or state.status))
            checked += 1
    return checked


def _rescore(results: ResultsDir, scores_dir: Path, cache: ResponseCache | None, out: Replay) -> int:
    """The stored score labels graded again from the traces: ``original`` extracted, the others through a replay
    gateway (cache only). Returns the provider requests made (the gateway refuses any, so 0)."""
    labels = scorelog.labels(results.dirs.scores)
    if not labels:
        return 0
    runs, _ = rs.find_runs(results.root)
    rs.extract_original(runs, scores_dir)
    gateway = build_gateway(cache=cache, replay=True)
    stored = results.scores
    for label in labels:
        if label == ORIGINAL:
            continue
        part = stored[stored["label"] == label]
        # the label's recorded scorer, whole; a label graded before it was recorded: its scorer and rubric by name
        spec, rubric = rs.read_scorer(results.dirs.scores, label) or (ModelSpec(model=part["scorer"].iloc[0]),
                                                                       load_rubric(part["rubric"].iloc[0]))
        graded_before = scorelog.index(ScoreDirs(results.dirs.scores), label).graded
        log = scorelog.LabelLog(scores_dir, label)
        try:
            for run in runs:
                if run.run_id not in graded_before:
                    continue
                graded = asyncio.run(rs.score_run(run, label, spec, rubric, gateway, reraise=(InputError,)))
                if graded.failed:
                    raise InputError(results.dirs.scores / label, f"run {run.run_id} could not be graded again: "
                                     f"{graded.reason}", "check the cache holds this label's answers")
                log.graded(run.run_id, 1, graded.rows)
        finally:
            log.close()
        scorelog.compact(ScoreDirs(scores_dir), label)
    return gateway.requests


def _compare_table(stored_path: Path, rebuilt_path: Path, name: str, out: Replay) -> bool:
    """Whether the two files are byte-identical; where not, each differing value is added to ``out``."""
    if not stored_path.is_file():
        out.differences.append(Difference(name, "*", "(file)", "missing", "rebuilt"))
        return False
    if stored_path.read_bytes() == rebuilt_path.read_bytes():
        return True
    _compare_frames(read_table(stored_path, name).to_pandas(), read_table(rebuilt_path, name).to_pandas(), name, out)
    return False


def _compare_scores(results: ResultsDir, rebuilt: BatchDirs, out: Replay) -> None:
    stored = results.scores
    if stored.empty:
        return
    _compare_frames(stored, read_scores(rebuilt.scores), "scores", out)


def _compare_frames(stored: pd.DataFrame, replayed: pd.DataFrame, table: str, out: Replay) -> None:
    keys = list(ROW_KEYS[table])
    a, b = stored.set_index(keys, drop=False), replayed.set_index(keys, drop=False)
    for key in a.index.difference(b.index):
        out.differences.append(Difference(table, _run(a.loc[key]), "(row)", "present", "absent"))
    for key in b.index.difference(a.index):
        out.differences.append(Difference(table, _run(b.loc[key]), "(row)", "absent", "present"))
    both = a.index.intersection(b.index)
    for column in [c for c in a.columns if c not in TIMINGS.get(table, ())]:
        if column not in b.columns:
            out.differences.append(Difference(table, "*", column, "present", "absent"))
            continue
        for key, x, y in zip(both, a.loc[both, column], b.loc[both, column], strict=True):
            if not _same(x, y):
                out.differences.append(Difference(table, str(key[keys.index("run_id")] if len(keys) > 1 else key),
                                                  column, _plain(x), _plain(y)))


def _run(row: pd.Series | pd.DataFrame) -> str:
    value = row["run_id"]
    return str(value.iloc[0] if isinstance(value, pd.Series) else value)


def _same(x: Any, y: Any) -> bool:
    """Equal values; two missing values (None, NaN) are equal; floats compare exactly (replay is deterministic)."""
    missing = [v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA for v in (x, y)]
    if all(missing):
        return True
    if any(missing):
        return False
    return bool(x == y)


def _plain(v: Any) -> Any:
    return v.item() if hasattr(v, "item") else v


def _compare_stats(stored: ResultsDir, rebuilt: ResultsDir, out: Replay) -> None:
    """The statistics of `madbench stats` and the report's numbers (its analysis and cost table) from the stored and
    the rebuilt tables."""
    before, after = (_numbers(stored.root, r.runs, r.rounds, r.calls) for r in (stored, rebuilt))
    for path, x, y in _leaves(before, after):
        if not _same(x, y):
            out.differences.append(Difference("stats", "*", path, x, y))


def _numbers(root: Path, runs: pd.DataFrame, rounds: pd.DataFrame, calls: pd.DataFrame) -> dict[str, Any]:
    analysis = analyse(runs, str(root / "runs.parquet"), batch_order(root, runs), None, "holm",
                       rounds if len(rounds) else None, batch_pairs(root))
    costs = cost_summary(runs, calls)
    # measured on the machine that ran them, never replayed (as TIMINGS in the tables)
    costs = costs.drop(columns=[c for c in costs.columns if "latency" in c or "overhead" in c])
    return json_safe({"stats": analysis.record(), "cost": costs.to_dict(orient="records")})


def _leaves(a: Any, b: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [leaf for k in sorted(set(a) | set(b), key=str)
                for leaf in _leaves(a.get(k), b.get(k), f"{path}.{k}" if path else str(k))]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [leaf for i, (x, y) in enumerate(zip(a, b, strict=True)) for leaf in _leaves(x, y, f"{path}[{i}]")]
    return [(path, a, b)]
