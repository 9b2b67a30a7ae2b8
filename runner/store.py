"""A batch's results as the runner writes them: each run's table rows, their parts, the compacted tables.

The results directory's layout, models and table schemas are ``madbench.results``'s; this module builds the rows.

runs.parquet has two costs: ``cost_usd``, what the run's committed attempt paid (an answer served from the cache
costs 0: the sum of its calls.parquet rows not cached), and ``cost_paid_usd``, what all its attempts paid, failed
calls included (``paid_cost``). After a budget stop or a kill and a resume they differ: the earlier attempts paid for
the answers the last one was served from the cache. The batch's whole spend, paid calls of runs not yet committed
included, is budget.json's ``spent_usd`` (runner/budget.py).

Each writer appends a committed run's rows to its own row log (``madbench.results.rowlog``), keyed by run id and
ranked by the attempts its trace held, so a resumed batch can never hold a run's rows twice; compaction folds the
logs into the top-level tables.

calls.parquet also holds a row for each paid call the ledger counts that no trace records (``ledger_rows``): a call a
kill left in flight (``orphaned``), and the leakage probe's calls. Its ``cost_usd`` then sums to budget.json's spend
(``read_budget``) when every paid call of the batch's runs answered and their runs were committed: a traced row counts
what its answer cost when first paid for, an answer from the cache included (a resumed run's answers its earlier
attempts paid for), so a call a kill left in flight whose answer reached the cache and a committed run's row is
counted there, and gets no row of its own. A settlement line that comes after the tables were built is in them at the
next compaction (the next `madbench run` of the batch).
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from madbench.debate.events import AnyEvent, Crit, Divergence, LLMCall, LLMFailure, RunStart, last_attempt, unblinded
from madbench.debate.grading import PILLARS
from madbench.debate.trace import compress_trace, stored_trace
from madbench.eval.dynamics import ROUND_COLUMNS, position, round_dynamics, run_dynamics
from madbench.gateway.accounting import NOT_RETRIES
from madbench.results import TABLES, BatchDirs, RunResult, read_history, read_result, read_table
from madbench.results.rowlog import Entry, RowLog, base_table, fold, is_ledger, legacy_parts, logs, merge
from madbench.results.table_schemas import BASELINE_METRICS, BASELINES, CALLS, METRICS, concat, to_table, write_table
from madbench.runner.budget import PROBE_CALLS, UntracedCall, read_budget, read_settlements
from madbench.runner.cutoffs import run_post_cutoff
from madbench.runner.pipeline import RunLayout


class BatchLayout(RunLayout, BatchDirs):
    """A batch's results directory as its runs commit to it: each commit keeps the trace it read for the run's parts."""

    def __init__(self, root: str | Path):
        super().__init__(root)
        self._histories: dict[str, list[AnyEvent]] = {}
        self._rows: RowLog | None = None

    @property
    def rows(self) -> RowLog:
        """This process's row log in the batch (created at its first line)."""
        if self._rows is None:
            self._rows = RowLog(self)
        return self._rows

    #: Whether a committed run's trace is stored compressed (``compress_trace``): not on a node that stages its runs,
    #: whose traces go to the driver as they are (it compresses them as it commits them: runner/staging.py).
    compress_traces = True

    def commit(self, result: RunResult, history: list[AnyEvent]) -> None:
        super().commit(result, history)
        self._histories[result.run_id] = history
        if self.compress_traces:
            compress_trace(self.trace_path(result.run_id))

    def history(self, run_id: str) -> list[AnyEvent]:
        """The run's whole trace: the one its commit read (handed over once), else read now."""
        kept = self._histories.pop(run_id, None)
        return kept if kept is not None else read_history(self.trace_path(run_id))

    def stored_result(self, run_id: str) -> RunResult | None:
        """The run's committed result, or None (``read_result``: a file that is not one is an InputError naming it)."""
        p = self.result_path(run_id)
        return read_result(p, run_id) if p.exists() else None


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
        known = [c for c in costs if c is not None]
        if len(known) < len(costs):
            return None
        total += sum(known)
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
    # A failed run has no backtest: its metric and baseline columns are null.
    for k, v in (result.metrics or dict.fromkeys(METRICS)).items():
        if k != "null_reasons":
            row[k] = v
    for name, m in (result.baselines or dict.fromkeys(BASELINES, {})).items():
        for k in BASELINE_METRICS:
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
    known = [c for c in costs if c is not None]
    return None if len(known) < len(costs) else float(sum(known))


def call_rows(result: RunResult, events: list[AnyEvent], node_id: str) -> list[dict]:
    """One row per answered call. ``cached_tokens`` and ``cache_write_tokens``: of the prompt tokens billed for this
    call now (every attempt's), those the provider read from and wrote to its prompt cache; 0 for an answer from
    madbench's own cache (``cached``), which billed nothing now. ``list_cost_usd``: the same tokens synchronously
    at list price without the prompt cache's discount (against ``cost_usd`` of the fresh calls, the saving
    realised; 0 for a cached answer, whose ``cost_usd`` is what it cost when first asked);
    ``provider_batch``: answered through a provider batch."""
    return [{"run_id": result.run_id, "seq": e.seq, "agent": e.agent, "phase": e.phase, "round": e.round,
             "label": e.label, "model_requested": e.model_requested, "model_used": e.model_used, "model_served": e.model_served, "provider": e.provider, "is_llm": e.is_llm,
             "cached": e.cached, "prompt_tokens": e.prompt_tokens, "completion_tokens": e.completion_tokens,
             "cached_tokens": _billed(e.attempts, "cached_tokens"), "cache_write_tokens": _billed(e.attempts, "cache_write_tokens"),
             "cost_usd": e.cost_usd, "list_cost_usd": _list_cost(e),
             "provider_batch": any(a.get("provider_batch") for a in e.attempts),
             "latency_s": e.latency_s, "overhead_ms": e.overhead_ms,
             "retries": sum(1 for a in e.attempts if a["kind"] not in NOT_RETRIES), "validation_retries": e.validation_retries,
             "node_id": node_id, "call_id": None, "orphaned": False, **hedge_columns(e.attempts)}
            for e in events if isinstance(e, LLMCall)]


def hedge_columns(attempts: list[dict[str, Any]]) -> dict[str, Any]:
    """A call's hedging columns from its attempts (madbench.gateway.hedging): whether a copy of its request was sent
    (an attempt marked ``hedge``), whether the copy's answer won (the answering attempt, the last, is the copy's), and
    what the closed (``outraced``) request is counted at."""
    hedged = any(a.get("hedge") for a in attempts)
    outraced: list[float | None] = [a.get("cost_usd") for a in attempts if a["kind"] == "outraced"]
    known = [c for c in outraced if c is not None]
    return {"hedged": hedged, "hedge_won": bool(attempts[-1].get("hedge")) if hedged else None,
            "outraced_cost_usd": float(sum(known)) if outraced and len(known) == len(outraced) else None}


#: The phase of the leakage probe's rows in calls.parquet.
PROBE_PHASE = "leakage_probe"


def ledger_rows(untraced: dict[str, UntracedCall], billed: dict[str, float],
                traced: dict[tuple[str, str], dict[str, Any]], counted: dict[tuple[str, str], float]) -> list[dict]:
    """calls.parquet's rows of the paid calls the ledger counts that no trace records, each at what the ledger counts
    it: its recorded cost, else what ``billed`` (budget-settled.jsonl) says, else its reserved maximum. ``traced``: what
    a run's trace says of a call with the same cache key (agent, phase, round, label), by (run id, key); ``counted``:
    the cost a committed run's row counts for an answer from the cache that no attempt of the run paid for, by (run
    id, key): one orphaned call of that key (the one at that cost: two kills may each have left one) paid for it, and
    gets no row. ``seq`` is negative (-1, -2, …): these rows have no trace event."""
    def cost(call: str, u: UntracedCall) -> float:
        return u.cost_usd if u.cost_usd is not None else billed.get(call, u.reserved_usd)

    answered: dict[tuple[str, str], str] = {}  # (run id, key) -> the orphaned call whose answer the row counts
    for call, u in sorted(untraced.items()):
        where = (u.run_id or "", u.key or "")
        if u.orphaned and where in counted:
            best = answered.get(where)
            if best is None or abs(cost(call, u) - counted[where]) < abs(cost(best, untraced[best]) - counted[where]):
                answered[where] = call
    rows: list[dict] = []
    for call, u in sorted(untraced.items()):
        if call in answered.values():
            continue
        where = (u.run_id or "", u.key or "")
        rows.append(dict.fromkeys(CALLS.names) | traced.get(where, {}) | {
            "run_id": u.run_id, "seq": -len(rows) - 1, "model_requested": u.model, "is_llm": True, "cached": False,
            "cost_usd": cost(call, u), "list_cost_usd": cost(call, u),  # no token counts: no prompt-cache discount is known
            "provider_batch": False, "call_id": call, "orphaned": u.orphaned,
            **({"phase": PROBE_PHASE} if call.startswith(PROBE_CALLS) else {})})
    return rows


def ledger_calls(layout: BatchDirs) -> list[dict]:
    """``ledger_rows`` of the batch at ``layout``: its budget.json, settlement journal and committed runs' traces."""
    untraced = read_budget(layout.root, None).untraced
    billed = read_settlements(layout.budget_settled, set(untraced))
    traced: dict[tuple[str, str], dict[str, Any]] = {}
    counted: dict[tuple[str, str], float] = {}
    for run_id in sorted({u.run_id for u in untraced.values() if u.orphaned and u.run_id and u.key}):
        if not (layout.result_path(run_id).is_file() and stored_trace(layout.trace_path(run_id)) is not None):
            continue  # not committed: no row of the run counts any of its calls
        history = read_history(layout.trace_path(run_id))
        calls = [e for e in history if isinstance(e, LLMCall)]
        paid = {e.key for e in calls if not e.cached}
        for e in calls:
            traced[(run_id, e.key)] = {"agent": e.agent, "phase": e.phase, "round": e.round, "label": e.label}
        # Served from the cache in the committed attempt and paid by no attempt: the answer the kill's call paid for.
        counted |= {(run_id, e.key): e.cost_usd or 0.0 for e in last_attempt(history)
                    if isinstance(e, LLMCall) and e.cached and e.key not in paid}
    return ledger_rows(untraced, billed, traced, counted)


def part_rows(batch: str, result: RunResult, config: dict, scenario: dict, node_id: str,
              history: list[AnyEvent]) -> dict[str, list[dict]]:
    """The run's rows of each table from its whole trace (``history``): what its parts hold, and what replay rebuilds."""
    events = last_attempt(history)
    return {"runs": [run_row(batch, result, config, scenario, events, node_id, history)],
            "rounds": round_rows(result, events), "calls": call_rows(result, events, node_id)}


def attempts_of(history: list[AnyEvent]) -> int:
    """How many attempts a run's whole trace holds (its ``run_start`` events): a row log's rank of the run's rows."""
    return sum(1 for e in history if isinstance(e, RunStart))


def run_entry(batch: str, result: RunResult, config: dict, scenario: dict, node_id: str,
              history: list[AnyEvent]) -> Entry:
    """The run's rows of every table, as its line of a row log holds them."""
    return Entry(result.run_id, attempts_of(history), part_rows(batch, result, config, scenario, node_id, history))


def write_parts(layout: BatchLayout, batch: str, result: RunResult, config: dict, scenario: dict, node_id: str) -> None:
    """The run's rows of each table, from the trace its commit read, appended to this writer's row log."""
    layout.rows.append(run_entry(batch, result, config, scenario, node_id, layout.history(result.run_id)))


def compact(layout: BatchDirs) -> dict[str, int]:
    """Fold the row logs into runs/rounds/calls.parquet (``madbench.results.rowlog``), with calls.parquet's rows of the
    ledger's untraced calls (``ledger_calls``) recomputed, then remove the logs folded in (and an older directory's
    per-run parts). Incremental: each table is read once, its runs' rows replaced by their logged ones; with no log to
    fold and the ledger's rows unchanged, nothing is written."""
    folded = logs(layout)
    logged = fold(folded, layout.parts_dir)
    legacy = {name: legacy_parts(layout, name) for name in TABLES}
    ledger = to_table(ledger_calls(layout), "calls", layout.table("calls"))
    committed = pa.array(layout.committed_ids(), pa.large_string())
    if not len(logged.run_ids) and not any(legacy.values()) and all(layout.table(n).exists() for n in TABLES):
        calls = read_table(layout.table("calls"), "calls")
        held = pq.read_table(layout.table("runs"), columns=["run_id"]).column("run_id")
        if (concat([calls.filter(is_ledger(calls))], "calls").equals(concat([ledger], "calls"))
                and pc.all(pc.is_in(held, committed)).as_py() is not False):
            return {name: pq.read_metadata(layout.table(name)).num_rows for name in TABLES}
    counts = {}
    for name in TABLES:
        table = merge(base_table(layout, name), logged, name)
        # Rows only of runs a commit point vouches for: a run whose result was deleted (to run it again) has none.
        table = table.filter(pc.is_in(table.column("run_id"), committed))
        if name == "calls":
            table = concat([table, ledger], name)
        write_table(layout.table(name), table)
        counts[name] = table.num_rows
    # Only now that every table holds their rows: a crash before this leaves logs whose rows merge again the same.
    for path in folded + [p for parts in legacy.values() for p in parts]:
        path.unlink(missing_ok=True)
    for name in TABLES:
        with contextlib.suppress(FileNotFoundError, OSError):
            layout.parts(name).rmdir()  # an older directory's folder of parts, now empty
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
