"""Several results directories read as one study (``madbench.eval.stats.study``), each as `madbench stats` reads
one: through ``committed.read_committed`` (only committed runs' rows; a running batch said to be a snapshot), every
committed result readable, the runs table checked for pairing. Every directory is read and checked before any
statistic is computed or anything written."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from madbench.data.errors import InputError
from madbench.eval.stats.analysis import Analysis
from madbench.eval.stats.family import DEFAULT_CORRECTION
from madbench.eval.stats.frame import batch_order, batch_pairs, load_runs
from madbench.eval.stats.study import Batch, analyse_study, batch_labels, combine
from madbench.results import BatchDirs
from madbench.runner.batch_view import check_committed
from madbench.runner.committed import read_committed


def read_batch(root: str | Path, all_pairs: bool = False) -> Batch:
    """One results directory as `madbench stats` reads it; its declared pairs unless ``all_pairs`` (then unread, as
    `stats --all-pairs` leaves them)."""
    root = Path(root)
    if not root.is_dir():
        raise InputError(str(root), "is not a results directory", "give the folder `madbench run` wrote (it holds runs.parquet)")
    results = read_committed(root, "stats", needs_manifest=False)
    check_committed(root)  # a corrupt committed result is named, with what to do
    runs = load_runs(root)
    rounds = results.rounds if results.dirs.table("rounds").exists() else None
    name = results.manifest.spec.get("name") if results.manifest is not None else None
    return Batch(root, name, runs, batch_order(root, runs), None if all_pairs else batch_pairs(root), rounds)


def where(batches: list[Batch]) -> str:
    """The runs tables a study reads, for its messages."""
    return " + ".join(str(BatchDirs(b.root).table("runs")) for b in batches)


def runs_df(*dirs: str | Path) -> pd.DataFrame:
    """The runs tables of ``dirs`` as one DataFrame, each row's ``batch`` its batch's name in the study (its batch
    name, or its folder's where two share one); configs and run ids as each batch stores them, so a run is
    (batch, run_id) and a config (batch, config)."""
    if not dirs:
        raise InputError("madbench.runs_df", "no results directory given", "e.g. madbench.runs_df('results/a', 'results/b')")
    batches = [read_batch(d, all_pairs=True) for d in dirs]
    return pd.concat([b.runs.assign(batch=label) for b, label in zip(batches, batch_labels(batches), strict=True)],
                     ignore_index=True)


def study_stats(*dirs: str | Path, compare: list[str] | None = None, metrics: list[str] | None = None,
                correction: str = DEFAULT_CORRECTION, all_pairs: bool = False) -> Analysis:
    """What `madbench stats DIR1 DIR2 …` computes: the batches as one study, one family of tests, a batch column in
    every table (``Analysis.markdown()``, ``record()``, ``write_csvs(dir)``)."""
    batches = [read_batch(d, all_pairs) for d in dirs]
    return analyse_study(combine(batches, all_pairs), where(batches), compare, metrics, correction)
