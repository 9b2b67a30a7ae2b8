"""Splitting a runs table by one column (e.g. ``post_cutoff``) so each part gets its own statistics.

A missing value is its own part, labelled "null", never merged with False: for ``post_cutoff`` it means that
some model of the run is not in the cutoff registry, which is not the same as "before the cutoff".
"""

from __future__ import annotations

import pandas as pd

from madbench.data.errors import InputError

NULL_LABEL = "null"
#: Parts reported first, by column: the scenarios after every model's training cutoff are the primary result of a
#: leakage study (no memory of them can exist); the pre-cutoff ones follow.
PRIMARY = {"post_cutoff": "True"}


def split_label(value) -> str:
    """How a value of the split column is named in headings, CSV folders and JSON."""
    return NULL_LABEL if value is None or (isinstance(value, float) and pd.isna(value)) or value is pd.NA else str(value)


def split_by(runs: pd.DataFrame, column: str, where: str) -> list[tuple[str, pd.DataFrame]]:
    """(label, rows) for each value of ``column``: its ``PRIMARY`` part first, then in sorted label order, "null" last."""
    if column not in runs.columns:
        raise InputError(where, f"no column {column!r} to split by; present: {', '.join(map(str, runs.columns))}",
                         "choose a column of runs.parquet (post_cutoff needs a batch run by this version of madbench)")
    labels = runs[column].map(split_label)
    first = PRIMARY.get(column)
    order = sorted(set(labels) - {NULL_LABEL}, key=lambda x: (x != first, x)) + ([NULL_LABEL] if (labels == NULL_LABEL).any() else [])
    return [(label, runs[labels == label]) for label in order]
