"""Several batches as one study (`madbench stats DIR1 DIR2 …`): one runs frame, one set of tests, one family.

A batch is named by its batch name (the manifest's ``spec.name``, which its runs carry in ``batch``; a folder of
tables without a manifest by the folder's name). Two directories of one name are each named by their folder's name
instead; a name still shared, or a directory given twice, is refused: their runs could not be told apart.

Identity across batches:
- a scenario is its ``scenario_id``: the same id in two batches is the same scenario (market, quarter and memo),
  so a pair of configs of two batches is compared on the scenarios both ran;
- a config is its name within its batch: a name found in one batch stays as it is, a name found in two or more is
  ``batch/config`` in each (one name may hold different settings in two batch files, and their runs would collide
  on config, scenario_id and replicate); a study name still shared after that is refused;
- a run is its batch and its ``run_id`` (a run id hashes the run's content, so two batches that ran the same run
  hold the same id): the study's runs and rounds carry ``batch/run_id``.

Tested: what `stats` tests for each batch alone (its declared pairs, treatment − control; every pair of its configs
where it declares none) or, with --all-pairs, every pair of configs across the batches; either way every test of the
study is one family (``family``), so ``p_adj`` is adjusted over the tests of all the batches together.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from madbench.data.errors import InputError
from madbench.eval.stats.analysis import Analysis, analyse
from madbench.eval.stats.beats import PAPER_SHARE
from madbench.eval.stats.family import DEFAULT_CORRECTION
from madbench.eval.stats.frame import ordered_configs


@dataclass(frozen=True)
class Batch:
    """One results directory as `madbench stats` reads it alone."""

    root: Path
    #: The manifest's batch name; None for a folder of tables without one.
    name: str | None
    runs: pd.DataFrame
    #: Configs in the batch file's order (``frame.batch_order``); None: the runs table's order.
    order: list[str] | None
    #: Declared pairs as (treatment, control) (``frame.batch_pairs``); None without a manifest.
    declared: list[tuple[str, str]] | None
    rounds: pd.DataFrame | None = None


@dataclass(frozen=True)
class Study:
    runs: pd.DataFrame
    rounds: pd.DataFrame | None
    #: Study config names in column order: each batch's in its order, the batches in the order given.
    order: list[str]
    #: What is tested, as ``analysis.analyse`` takes it; None: every pair.
    declared: list[tuple[str, str]] | None
    #: Study config name → its batch.
    batches: dict[str, str]
    #: One row per batch: its name, folder, configs and runs.
    table: list[dict]
    #: (batch, config as the batch names it) → the config's study name.
    names: dict[tuple[str, str], str]


def batch_labels(batches: list[Batch]) -> list[str]:
    """Each batch's name in the study (see the module docstring); an InputError where two cannot be told apart."""
    resolved = [b.root.resolve() for b in batches]
    for i, root in enumerate(resolved):
        if root in resolved[:i]:
            raise InputError(batches[i].root, "is given twice", "give each results directory once")
    labels = [b.name or root.name for b, root in zip(batches, resolved, strict=True)]
    shared = {label for label, n in Counter(labels).items() if n > 1}
    labels = [root.name if label in shared else label for label, root in zip(labels, resolved, strict=True)]
    for i, label in enumerate(labels):
        if label in labels[:i]:
            first = batches[labels.index(label)].root
            raise InputError(batches[i].root, f"is batch {label!r}, by batch name and by folder name, as {first} is: "
                             "their configs and runs cannot be told apart",
                             "give one of the two folders another name (each batch is named by its folder when two "
                             "share a batch name)")
    return labels


def study_names(configs: dict[str, list[str]]) -> dict[tuple[str, str], str]:
    """(batch, config) → the config's study name: itself, or ``batch/config`` where two batches name it."""
    count = Counter(c for names in configs.values() for c in set(names))
    names = {(b, c): f"{b}/{c}" if count[c] > 1 else c for b, cs in configs.items() for c in cs}
    seen: dict[str, tuple[str, str]] = {}
    for key, name in names.items():
        if name in seen:
            raise InputError("madbench stats", f"config {seen[name][1]!r} of batch {seen[name][0]!r} and config "
                             f"{key[1]!r} of batch {key[0]!r} are both {name!r} in the study (a config two batches "
                             "share is named batch/config)",
                             "rename the config in one batch file, or analyse the batches apart")
        seen[name] = key
    return names


def combine(batches: list[Batch], all_pairs: bool = False) -> Study:
    """One study of ``batches`` (see the module docstring): its runs with ``batch`` set, configs and run ids named in
    the study, and the pairs to test."""
    labels = batch_labels(batches)
    own = {label: ordered_configs(b.runs, b.order, str(b.root)) for label, b in zip(labels, batches, strict=True)}
    declared_names = {label: [c for pair in b.declared or [] for c in pair] for label, b in zip(labels, batches, strict=True)}
    names = study_names({label: list(dict.fromkeys([*own[label], *declared_names[label]])) for label in labels})
    runs, rounds, tested, table = [], [], [], []
    for label, b in zip(labels, batches, strict=True):
        rename = {c: names[(label, c)] for c in own[label]}
        runs.append(_in_study(b.runs, label).assign(config=b.runs["config"].astype(str).map(rename)))
        if b.rounds is not None:
            rounds.append(_in_study(b.rounds, label))
        mine = [rename[c] for c in own[label]]
        pairs = ([(names[(label, t)], names[(label, c)]) for t, c in b.declared] if b.declared
                 else [(x, y) for i, x in enumerate(mine) for y in mine[i + 1:]])
        tested += pairs
        table.append({"batch": label, "directory": str(b.root), "configs": ", ".join(mine), "runs": len(b.runs),
                      "tested": "every pair across the batches (--all-pairs)" if all_pairs
                      else ", ".join(f"{t} − {c}" for t, c in pairs) or "(none)"})
    order = [names[(label, c)] for label in labels for c in own[label]]
    return Study(runs=pd.concat(runs, ignore_index=True), rounds=pd.concat(rounds, ignore_index=True) if rounds else None,
                 order=order, declared=None if all_pairs else tested,
                 batches={n: label for (label, _), n in names.items() if n in order}, table=table, names=names)


def _in_study(frame: pd.DataFrame, label: str) -> pd.DataFrame:
    """``frame`` of batch ``label``: ``batch`` set to it, and ``run_id`` made unique across the batches."""
    out = frame.assign(batch=label)
    if "run_id" in out.columns:
        out["run_id"] = label + "/" + out["run_id"].astype(str)
    return out


def analyse_study(study: Study, where: str, compare: list[str] | None = None, metrics: list[str] | None = None,
                  correction: str = DEFAULT_CORRECTION, share: float = PAPER_SHARE,
                  power: list[float] | None = None) -> Analysis:
    """``analysis.analyse`` of the study's runs as one call: one family of tests, the batch in every table."""
    analysis = analyse(study.runs, where, compare or study.order, metrics, correction, study.rounds, study.declared,
                       share, power)
    return label_analysis(analysis, study, all_pairs=study.declared is None)


def label_analysis(analysis: Analysis, study: Study, all_pairs: bool) -> Analysis:
    """Give ``analysis`` (of the study's runs) its batch columns and say which pairs it tested."""
    analysis.batches = {c: study.batches[c] for c in analysis.configs}
    analysis.study = study.table
    if analysis.table.scope:  # the batches' own pairs, not every pair
        analysis.pairs_shown = ("each batch's own comparisons: its declared pairs (a the treatment, b its control, a − b "
                                "what the treatment adds), every pair of its configurations where it declares none "
                                "(--all-pairs: every pair across the batches)")
    else:
        why = "" if all_pairs else " (no batch has a pair of its own among these configurations)"
        analysis.pairs_shown = f"every pair of configurations across the batches, a − b in column order, on the scenarios both ran{why}"
    return analysis
