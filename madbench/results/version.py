"""The results format's version: recorded in each manifest, in each trace's ``run_start`` and in each Parquet file.

Results written before it was recorded carry none and are read as this version (their format is the current one).
Bump it when a reader of the current version would misread what is written (a renamed or retyped column, a changed
trace event, a declared column added), and teach the readers the older version (``READABLE``; for tables,
``table_schemas.ADDED``).

Versions:
1. the first recorded.
2. the oracle gap's null and excess (runs: ``oracle_agents``, ``oracle_gap_null_pct``, ``oracle_gap_excess_pct``,
   ``oracle_gap_excess_reason``) and the evidence an agent adopted from its critics (rounds: ``adopted_evidence_ids``),
   which ``new_evidence``, ``sycophancy`` and ``flips_new_evidence`` no longer count as new. Version-1 tables read with
   the added columns null; their ``new_evidence`` counts critic-cited IDs as new (rebuild the tables from the traces,
   deleting the results' ``parts/`` and running the batch again, for the version-2 counts). Manifests and traces are
   unchanged.
3. the model name the provider reported serving (calls: ``model_served``, beside ``model_requested`` and
   ``model_used``) and the manifest's ``provenance`` (code revision, data hashes, price table, machine). Version-2
   calls tables read ``model_served`` as null; version-2 manifests have no provenance.
4. calls.parquet's rows of the paid calls the ledger counts that no trace records (calls: ``call_id``, ``orphaned``):
   the calls a kill left in flight and the leakage probe's, so that the table's ``cost_usd`` sums to budget.json's
   spend. Version-3 calls tables read both as null and hold no such rows; manifests and traces are unchanged.
5. hedged requests (calls: ``hedged``, ``hedge_won``, ``outraced_cost_usd``; a trace's attempts may be of kind
   ``outraced`` and carry ``hedge``). Version-4 calls tables read the three as null; traces are read as they are.
6. table rows kept in each writer's row log (``parts/rows-<writer>.jsonl``, ``madbench.results.rowlog``) until a
   compaction folds them into the tables, not a Parquet part per run and table (``parts/<table>/<run>.parquet``);
   the tables' columns are unchanged. A committed run's trace is stored zstd-compressed (``traces/<run>.jsonl.zst``);
   the manifest is a snapshot and a journal of the runs changed since (``manifest-journal.jsonl``). A version-5 or
   older directory's parts are read as the rows of its runs, and its first compaction folds them into the tables and
   removes them; its plain traces are read as they are.
7. `madbench rescore`'s rows kept in each writer's row log of the label (``scores/<label>/rows-<writer>.jsonl``,
   ``madbench.results.scorelog``) until a compaction folds them into the label's table (``scores/<label>/scores.parquet``)
   and its failure records into ``scores/<label>/failed.jsonl``, not a Parquet part and a failure record per run
   (``scores/<label>/<run>.parquet``, ``scores/<label>/failed/<run>.json``); the scores' columns are unchanged. A
   version-6 or older label's files are read as its runs' rows and failures, and its next rescore folds them in and
   removes them.
"""

from __future__ import annotations

from pathlib import Path

from madbench.data.errors import InputError

FORMAT_VERSION = 7
#: The versions this code reads: each is the current one or is taught here (see the version list above).
READABLE = (1, 2, 3, 4, 5, 6, 7)


def check_version(version: object, where: str | Path, what: str) -> None:
    """A ``version`` this code reads (one of ``READABLE``, or None: written before versions were recorded), else an
    InputError. Only the integer counts: a version written as text ("1") is not one madbench wrote."""
    if version is not None and (type(version) is not int or version not in READABLE):
        raise InputError(where, f"{what} is in results format {version!r}; this madbench reads format {FORMAT_VERSION}",
                         "read it with the madbench version that wrote it (the manifest's `versions` names it)")
