"""The batch a row of a study's table comes from (`madbench stats DIR1 DIR2 …`, ``study``), as columns beside the
config names the row carries.

A row naming a config gets ``batch`` after it; a pair (``a``/``b``, ``treatment``/``control``) one batch per side
(``batch_a``, ``batch_b``, …) after its second name. A row of no config gets ``batch``: the batch its ``group`` or
``term`` names (a config, or a batch of the ``within ablation`` correlations), else every batch it pools, joined
with "+".
"""

from __future__ import annotations

import re

import pandas as pd

#: Pair names → the batch columns inserted after the second of them.
PAIR_NAMES = {("a", "b"): ("batch_a", "batch_b"), ("treatment", "control"): ("batch_treatment", "batch_control")}
#: A regression term naming a config or a batch level, e.g. C(config)[T.debate].
TERM = re.compile(r"C\((config|batch)\)\[T\.(.+)\]")


def batch_rows(rows: list[dict], batches: dict[str, str]) -> list[dict]:
    """``rows`` with their batch columns; ``batches``: each config's batch (the study's config names)."""
    return [_with_batch(row, batches) for row in rows]


def batch_frame(frame: pd.DataFrame, batches: dict[str, str]) -> pd.DataFrame:
    """``frame`` with its batch columns (an empty frame stays as it is)."""
    if frame.empty:
        return frame
    return pd.DataFrame(batch_rows(frame.to_dict(orient="records"), batches))


def _with_batch(row: dict, batches: dict[str, str]) -> dict:
    out: dict = {}
    for key, value in row.items():
        out[key] = value
        if key == "config":
            out["batch"] = batches.get(str(value), "")
        for (first, second), columns in PAIR_NAMES.items():
            if key == second and first in row:
                out[columns[0]], out[columns[1]] = batches.get(str(row[first]), ""), batches.get(str(value), "")
    if any(k.startswith("batch") for k in out if k not in row):
        return out
    return {"batch": _pooled(row, batches), **out}


def _pooled(row: dict, batches: dict[str, str]) -> str:
    """The batch a row of no config names through its ``group`` or regression ``term``; else every batch."""
    labels = list(dict.fromkeys(batches.values()))
    group = str(row.get("group", ""))
    if group in batches:
        return batches[group]
    if group in labels:
        return group
    sides = group.split(" − ")
    if len(sides) == 2 and all(s in batches for s in sides):
        return " − ".join(batches[s] for s in sides)
    term = TERM.fullmatch(str(row.get("term", "")))
    if term:
        return batches.get(term[2], "") if term[1] == "config" else term[2]
    return "+".join(labels)
