"""The declared columns and types of every Parquet table in a results directory, and their one writer and reader.

A part is written through ``write_table``: a declared column missing from a row, a column not declared (outside the
table's open prefix), or a value of the wrong type is an error naming the table, the column and the file. Each file
records ``FORMAT_VERSION`` in its schema metadata. Files written before it was recorded are read as the current
format; the runs parts of their failed runs lack the backtest columns, which read as null (as the concatenated tables
always did).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from madbench.data.atomic import atomic_write
from madbench.data.errors import InputError
from madbench.debate.grading import PILLARS, CritDiagnostics
from madbench.results.version import FORMAT_VERSION, check_version

STR, INT, FLOAT, BOOL = pa.large_string(), pa.int64(), pa.float64(), pa.bool_()
VERSION_KEY = b"madbench_format_version"
#: The backtest's metrics (``madbench.eval.backtest.Metrics``, without its ``null_reasons``).
METRICS = ("total_return_pct", "spy_return_pct", "excess_return_pct", "sharpe", "sortino", "volatility",
           "max_drawdown_pct", "n_positions", "cash_pct", "trading_days")
BASELINES = ("equal", "ivol", "minvar", "spy")
BASELINE_METRICS = ("total_return_pct", "excess_return_pct", "sharpe", "sortino", "volatility", "max_drawdown_pct")
#: CRIT's diagnostics: rounds.parquet has them in name order, score parts in the model's.
DIAGNOSTICS = tuple(CritDiagnostics.model_fields)
AUDIT = ("claimless", "claims", "claims_without_valid_evidence", "dangling_supporting_claims", "disconnected_claims",
         "orphaned_positions", "unanswered_critiques", "uncited_rationale", "unknown_evidence_ids")


def _cols(names: str | Iterable[str], kind: pa.DataType, prefix: str = "") -> list[pa.Field]:
    return [pa.field(prefix + n, kind) for n in (names.split() if isinstance(names, str) else names)]


RUNS = pa.schema([
    *_cols("batch run_id status error scenario_id invest_quarter", STR), *_cols("n_tickers replicate", INT),
    *_cols("config protocol", STR), *_cols("n_agents", INT), *_cols("roles tiers", STR), *_cols("rounds", INT),
    *_cols("aggregation", STR), *_cols("temperature", FLOAT), *_cols("interventions crit_rubric model_default method", STR),
    *_cols("rounds_run", INT), *_cols("rho_bar", FLOAT), *_cols("weights", STR),
    *_cols("cash jsd_propose jsd_final", FLOAT), *_cols("interventions_fired", INT), *_cols("node_id", STR),
    *_cols("post_cutoff blind", BOOL), *_cols(PILLARS, FLOAT, "crit_"),
    *[pa.field(m, INT if m in ("n_positions", "trading_days") else FLOAT) for m in METRICS],
    *[pa.field(f"{b}_{m}", FLOAT) for b in BASELINES for m in BASELINE_METRICS],
    *_cols("calls cached failed prompt_tokens completion_tokens cached_tokens cache_write_tokens", INT),
    *_cols("cost_usd", FLOAT), *_cols("calls_with_unknown_cost", INT), *_cols("latency_s cost_paid_usd", FLOAT),
    *_cols("debate_turnover shift_l1_mean shift_js_mean sycophancy_mean collapse_mean", FLOAT),
    *_cols("flips flips_new_evidence", INT), *_cols("best_agent", STR), *_cols("best_agent_return_pct oracle_gap_pct", FLOAT),
    *_cols("oracle_agents", INT), *_cols("oracle_gap_null_pct oracle_gap_excess_pct", FLOAT),
    *_cols("oracle_gap_excess_reason", STR),
])
ROUNDS = pa.schema([
    *_cols("run_id", STR), *_cols("round", INT), *_cols("agent_id role", STR), *_cols("rho", FLOAT), *_cols("scorer", STR),
    *_cols("scorer_is_llm", BOOL), *_cols("jsd_round", FLOAT), *_cols(PILLARS, FLOAT), *_cols(sorted(DIAGNOSTICS), INT, "diag_"),
    *_cols(AUDIT, INT, "audit_"), *_cols("clips", STR),
    *_cols("jsd_pairwise_before jsd_pairwise_after collapse collapse_rate shift_l1_before shift_l1_after shift_l1 "
           "shift_js_before shift_js_after shift_js", FLOAT),
    *_cols("critics pulls", STR), *_cols("new_evidence", INT), *_cols("new_evidence_ids adopted_evidence_ids flip_toward", STR),
    *_cols("flip_pull sycophancy", FLOAT),
])
CALLS = pa.schema([
    *_cols("run_id", STR), *_cols("seq", INT), *_cols("agent phase", STR), *_cols("round", INT),
    *_cols("label model_requested model_used model_served provider", STR), *_cols("is_llm cached", BOOL),
    *_cols("prompt_tokens completion_tokens cached_tokens cache_write_tokens", INT), *_cols("cost_usd list_cost_usd", FLOAT),
    *_cols("provider_batch", BOOL), *_cols("latency_s overhead_ms", FLOAT), *_cols("retries validation_retries", INT),
    *_cols("node_id", STR),
    # A paid call the ledger (budget.json) counts that no trace records: its call id there; ``orphaned``, one a kill
    # left in flight (runner/store.py: ``ledger_rows``). Null and False for a traced call.
    *_cols("call_id", STR), *_cols("orphaned", BOOL),
    # A hedged call (madbench.gateway.hedging): a second copy of its request was sent; ``hedge_won``, the copy's answer
    # won (the first request was closed), else the first's did (null when not hedged); ``outraced_cost_usd``, what the
    # closed copy is counted at, within ``cost_usd`` (null when none was closed).
    *_cols("hedged hedge_won", BOOL), *_cols("outraced_cost_usd", FLOAT),
])
SCORES = pa.schema([
    *_cols("run_id scenario_id config label", STR), *_cols("round", INT), *_cols("agent_id role scorer", STR),
    *_cols("is_llm", BOOL), *_cols("rubric", STR), *_cols("rho", FLOAT), *_cols("clips", STR), *_cols(PILLARS, FLOAT),
    *_cols(PILLARS, FLOAT, "raw_"),
    *_cols(DIAGNOSTICS, INT, "diag_"),
    *_cols("claims claims_without_valid_evidence unknown_evidence_ids unanswered_critiques orphaned_positions "
           "dangling_supporting_claims disconnected_claims claimless uncited_rationale", INT, "audit_"),
])


#: The declared columns each format version added, by table: a file of an older version lacks them and reads them as
#: null (``madbench.results.version`` says what each version changed).
ADDED: dict[int, dict[str, tuple[str, ...]]] = {
    2: {"runs": ("oracle_agents", "oracle_gap_null_pct", "oracle_gap_excess_pct", "oracle_gap_excess_reason"),
        "rounds": ("adopted_evidence_ids",)},
    3: {"calls": ("model_served",)},
    4: {"calls": ("call_id", "orphaned")},
    5: {"calls": ("hedged", "hedge_won", "outraced_cost_usd")},
}


def added_since(version: int, table: str) -> set[str]:
    """The declared columns of ``table`` that formats after ``version`` added."""
    return {c for v, tables in ADDED.items() if v > version for c in tables.get(table, ())}


@dataclass(frozen=True)
class TableSpec:
    name: str
    schema: pa.Schema
    #: Columns with this prefix are open: each protocol adds its own (``x_<key>`` of its extras), typed by their values.
    open_prefix: str | None = None


SPECS = {"runs": TableSpec("runs", RUNS, "x_"), "rounds": TableSpec("rounds", ROUNDS), "calls": TableSpec("calls", CALLS),
         "scores": TableSpec("scores", SCORES)}


def to_table(rows: list[dict[str, Any]], table: str, where: str | Path) -> pa.Table:
    """``rows`` as the declared table: every declared column, typed; open columns after them, typed by their values."""
    spec = SPECS[table]
    names = list(dict.fromkeys(k for row in rows for k in row))
    declared = set(spec.schema.names)
    undeclared = [n for n in names if n not in declared and not (spec.open_prefix and n.startswith(spec.open_prefix))]
    if undeclared:
        raise InputError(where, f"{table} rows hold undeclared column(s) {', '.join(undeclared)}",
                         f"declare them in madbench/results/table_schemas.py ({table.upper()}) and bump FORMAT_VERSION")
    for row in rows:
        missing = [n for n in spec.schema.names if n not in row]
        if missing:
            raise InputError(where, f"a {table} row lacks the declared column(s) {', '.join(missing)}",
                             "the code building the row must give every declared column (None where it has no value)")
    columns = {}
    for name, kind in [*((f.name, f.type) for f in spec.schema), *((n, None) for n in names if n not in declared)]:
        try:
            columns[name] = pa.array([row.get(name) for row in rows], type=kind)  # an open column: typed by its values
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise InputError(where, f"{table} column {name}: {str(exc).splitlines()[0][:200]}",
                             f"the column is declared {kind} (madbench/results/table_schemas.py)") from None
    return _versioned(pa.table(columns))


#: Every table is written with these options, named rather than left to pyarrow's defaults: the same rows give the same
#: bytes (the file holds no write time; ``created_by`` names the pyarrow version), which is what `madbench replay`
#: compares first.
WRITE_OPTIONS: dict[str, Any] = {"version": "2.6", "compression": "snappy", "use_dictionary": True,
                                 "write_statistics": True, "data_page_version": "1.0"}


def write_table(path: str | Path, table: pa.Table) -> Path:
    return atomic_write(path, lambda p: pq.write_table(table, p, **WRITE_OPTIONS))


def write_rows(path: str | Path, rows: list[dict[str, Any]], table: str) -> Path:
    return write_table(path, to_table(rows, table, path))


def read_table(path: str | Path, table: str) -> pa.Table:
    """The Parquet file at ``path`` as the declared ``table``: its columns in declared order and type, open ones after."""
    path = Path(path)
    if not path.is_file():
        raise InputError(path, "file not found", "check the path")
    try:
        found = pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as exc:  # a truncated, corrupt or non-Parquet file
        raise InputError(path, f"not a readable Parquet file ({str(exc).splitlines()[0][:200]})",
                         "regenerate it (for a batch's tables: run the same `madbench run` again, which rebuilds them "
                         "from the per-run parts)") from None
    return conform(found, table, path)


def conform(found: pa.Table, table: str, where: str | Path) -> pa.Table:
    """``found`` with its declared columns in declared order and type, the others after them. A file of this format
    lacking a declared column is an error; one of an older format has the columns added since (``ADDED``) as nulls; an
    unversioned one keeps what it has (a failed run's part has no backtest columns, a table built by hand may hold a
    few columns)."""
    spec = SPECS[table]
    raw = (found.schema.metadata or {}).get(VERSION_KEY)
    version = int(raw) if raw is not None else None
    check_version(version, where, f"the {table} table")
    missing = [f.name for f in spec.schema if f.name not in found.column_names]
    if version is not None:  # an older format's file lacks the columns added since, which read as null
        missing = [n for n in missing if n not in added_since(version, table)]
    if missing and version is not None:
        raise InputError(where, f"lacks the declared {table} column(s) {', '.join(missing)}",
                         "regenerate it (run the same `madbench run` again: it rebuilds the tables from the parts)")
    n = len(spec.schema)
    if found.schema.names[:n] == spec.schema.names and all(found.schema.field(i).type == spec.schema.field(i).type
                                                           for i in range(n)):
        return found  # as this madbench writes it: nothing to reorder or cast
    columns = {}
    for f in spec.schema:
        if f.name not in found.column_names:
            continue
        column = found.column(f.name)
        if column.type == f.type:
            columns[f.name] = column
            continue
        if not _same_kind(column.type, f.type):  # a text column read as numbers would be a repair, not a reading
            raise InputError(where, f"{table} column {f.name} is {column.type}, declared {f.type}",
                             "regenerate it with this madbench")
        try:
            columns[f.name] = column.cast(f.type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise InputError(where, f"{table} column {f.name} is {column.type}, declared {f.type} ({str(exc)[:120]})",
                             "regenerate it with this madbench") from None
    if version is not None:
        columns = {f.name: columns[f.name] if f.name in columns else pa.nulls(found.num_rows, f.type)
                   for f in spec.schema if f.name in columns or f.name in added_since(version, table)}
    columns |= {name: found.column(name) for name in found.column_names if name not in columns}
    return pa.table(columns)


def _same_kind(found: pa.DataType, declared: pa.DataType) -> bool:
    """Whether a column stored as ``found`` holds what ``declared`` says, only wider or narrower: all nulls (an older
    writer's type for a column with no value yet), numbers for numbers, text for text, the same nested kind."""
    kinds = (pa.types.is_integer, pa.types.is_floating, pa.types.is_boolean, pa.types.is_timestamp, pa.types.is_date,
             lambda t: pa.types.is_string(t) or pa.types.is_large_string(t),
             lambda t: pa.types.is_list(t) or pa.types.is_large_list(t), pa.types.is_struct, pa.types.is_map)
    if found == declared or pa.types.is_null(found):
        return True
    numeric = (pa.types.is_integer, pa.types.is_floating)
    if any(k(found) for k in numeric) and any(k(declared) for k in numeric):
        return True
    return any(k(found) and k(declared) for k in kinds)


def concat(tables: list[pa.Table], table: str) -> pa.Table:
    """Parts as one table of every declared column (null where a part lacks one: an open column, or a declared one of
    an unversioned part); the declared empty table when no part has rows."""
    schema = SPECS[table].schema
    full = [t for t in tables if t.num_rows]
    if not full:
        return _versioned(schema.empty_table())
    # An open column typed by its values: integers in one part and fractions in another are doubles (as one part of
    # both would be); a number in one and text in another is an error (pyarrow's).
    joined = pa.concat_tables(full, promote_options="permissive")
    columns = {f.name: joined.column(f.name) if f.name in joined.column_names else pa.nulls(joined.num_rows, f.type)
               for f in schema}
    columns |= {name: joined.column(name) for name in joined.column_names if name not in columns}
    return _versioned(pa.table(columns))


def _versioned(t: pa.Table) -> pa.Table:
    return t.replace_schema_metadata({VERSION_KEY: str(FORMAT_VERSION).encode()})
