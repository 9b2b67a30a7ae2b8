"""Runs matched to another config's generated tokens within the batch (``self_consistency`` with
``match_generated_of`` and no pilot): they wait for the runs they match, then draw up to those runs' counts.

``madbench run`` runs a batch with such configs in two waves (``split``): first every other run, then each matched
run with its target, the completion tokens of the matched config's run on the same scenario and replicate in this
batch's results (``with_targets``). The target goes into the run's config (``options.targets``), so it is part of
the run's identity: a matched run is the draws up to that count, and a re-run debate with another count gives another
matched run rather than a stale one. A matched run whose debate did not finish gets no target and fails loudly
(the protocol names the scenario).
"""

from __future__ import annotations

from pathlib import Path

from madbench.debate.protocols.self_consistency import Options
from madbench.results import BatchDirs, ResultsDir
from madbench.runner.batch import RunSpec
from madbench.runner.pipeline import run_id_for


def matched_to(r: RunSpec) -> str | None:
    """The config a run matches within the batch, or None."""
    if r.config.protocol != "self_consistency":
        return None
    opt = Options.model_validate(r.config.options)
    return opt.match_generated_of if opt.targets is None and opt.pilot is None else None


def split(runs: list[RunSpec]) -> tuple[list[RunSpec], list[RunSpec]]:
    """(runs to run first, runs that wait for them)."""
    later = [r for r in runs if matched_to(r)]
    return [r for r in runs if not matched_to(r)], later


def generated_by_run(root: Path) -> dict[tuple[str, str, int], int]:
    """(config, scenario id, replicate) → completion tokens of each finished run in a results directory."""
    dirs = BatchDirs(root)
    if not dirs.table("runs").is_file() or not dirs.table("calls").is_file():
        return {}
    results = ResultsDir(root)
    runs, calls = results.runs, results.calls
    ok = runs[runs["status"] == "ok"]
    tokens = calls["completion_tokens"].fillna(0).groupby(calls["run_id"]).sum()
    return {(str(r.config), str(r.scenario_id), int(r.replicate)): int(tokens.get(r.run_id, 0))
            for r in ok.itertuples(index=False)}


def with_targets(later: list[RunSpec], root: Path) -> list[RunSpec]:
    """Each waiting run with its target (the matched run's generated tokens) in its config, and its id for it."""
    counts = generated_by_run(root)
    out = []
    for r in later:
        key = (matched_to(r), r.scenario.id, r.sample_index)
        targets = {r.scenario.id: counts[key]} if key in counts else {}
        options = {k: v for k, v in r.config.options.items() if k != "match_generated_of"} | {"targets": targets}
        config = r.config.model_copy(update={"options": options})
        out.append(RunSpec(run_id_for(r.scenario, config, r.sample_index), r.scenario, config, r.sample_index))
    return out
