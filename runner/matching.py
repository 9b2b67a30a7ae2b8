"""Runs matched to another config's spend within the batch (``self_consistency`` with ``match_generated_of`` and no
pilot): they wait for the runs they match, then draw up to those runs' spend.

``madbench run`` runs a batch with such configs in two waves (``split``): first every other run, then each matched
run with its target, the spend of the matched config's run on the same scenario and replicate in this batch's results
(``with_targets``), in the unit its ``match`` option names (``spent_by_run``): generated (completion) tokens, total
(prompt + completion) tokens, or dollars. The spend is every call of the matched run in calls.parquet, its judge and
CRIT (scoring) calls included: they steer the debate's revisions, so they are part of what it spends. The target goes
into the run's config (``options.targets``, with ``match`` when it is not the default), so it is part of the run's
identity: a matched run is the draws up to that target, and a re-run debate with another spend gives another matched
run rather than a stale one. A matched run whose debate did not finish, or whose cost is unknown (a call without a
price) when it is matched on cost, gets no target and fails loudly (the protocol names the scenario).
"""

from __future__ import annotations

from pathlib import Path

from madbench.debate.protocols import protocol_of
from madbench.debate.protocols.self_consistency import MatchUnit, Options
from madbench.results import BatchDirs, ResultsDir
from madbench.runner.batch import RunSpec
from madbench.runner.pipeline import run_id_for


def matched_to(r: RunSpec) -> str | None:
    """The config a run matches within the batch, or None."""
    return protocol_of(r.config).matched_to(r.config)


def split(runs: list[RunSpec]) -> tuple[list[RunSpec], list[RunSpec]]:
    """(runs to run first, runs that wait for them)."""
    later = [r for r in runs if matched_to(r)]
    return [r for r in runs if not matched_to(r)], later


def match_unit(r: RunSpec) -> MatchUnit:
    return Options.model_validate(r.config.options).match


def spent_by_run(root: Path, match: MatchUnit = "generated") -> dict[tuple[str, str, int], int | float]:
    """(config, scenario id, replicate) → what each finished run in a results directory spent over all its calls
    (calls.parquet, every phase): completion tokens (``generated``), prompt + completion tokens (``total``) or the
    answers' dollars (``cost``, a cached answer at its first cost; a run with a call of unknown cost is left out)."""
    dirs = BatchDirs(root)
    if not dirs.table("runs").is_file() or not dirs.table("calls").is_file():
        return {}
    results = ResultsDir(root)
    runs, calls = results.runs, results.calls
    ok = runs[runs["status"] == "ok"]
    by_run = calls.groupby("run_id")
    if match == "cost":
        priced = by_run["cost_usd"].apply(lambda c: c.notna().all())
        spent = calls["cost_usd"].fillna(0.0).groupby(calls["run_id"]).sum()[priced]
        return {(str(r.config), str(r.scenario_id), int(r.replicate)): float(spent.get(r.run_id, 0.0))
                for r in ok.itertuples(index=False) if priced.get(r.run_id, True)}
    columns = ["completion_tokens"] + (["prompt_tokens"] if match == "total" else [])
    tokens = calls[columns].fillna(0).sum(axis=1).groupby(calls["run_id"]).sum()
    return {(str(r.config), str(r.scenario_id), int(r.replicate)): int(tokens.get(r.run_id, 0))
            for r in ok.itertuples(index=False)}


def with_targets(later: list[RunSpec], root: Path) -> list[RunSpec]:
    """Each waiting run with its target (the matched run's spend, in the unit of its ``match``) in its config, and
    its id for it. ``match`` at its default, generated tokens, is left out of the options: the run's identity is
    then what it was before the option existed."""
    spent = {m: spent_by_run(root, m) for m in sorted({match_unit(r) for r in later})}
    out = []
    for r in later:
        key, match = (matched_to(r), r.scenario.id, r.sample_index), match_unit(r)
        targets = {r.scenario.id: spent[match][key]} if key in spent[match] else {}
        drop = {"match_generated_of"} | ({"match"} if match == "generated" else set())
        options = {k: v for k, v in r.config.options.items() if k not in drop} | {"targets": targets}
        config = r.config.model_copy(update={"options": options})
        out.append(RunSpec(run_id_for(r.scenario, config, r.sample_index), r.scenario, config, r.sample_index))
    return out
