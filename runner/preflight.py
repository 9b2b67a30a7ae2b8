"""Everything that would make a batch fail, found before Ray starts and before any paid call.

Each check collects its problems instead of stopping at the first, so one `madbench run` (or `--dry-run`)
names them all, each with where it comes from:

* every model a run can reach (its fallbacks too) has its key and accepts the configured parameters;
* every scenario's memo builds and its allocation can be backtested: the as-of close, the holding quarter,
  and the history each baseline needs;
* every agent's first prompt renders;
* the cache and results directories are writable.
"""

from __future__ import annotations

import os
from pathlib import Path

from debate.config import DebateConfig
from debate.context import constraints_text
from debate.profiles import load_profile
from eval.backtest import holding_window
from eval.baselines import baseline_metrics
from madbench_data.errors import InputError
from madbench_data.market.pack import Pack
from madbench_data.memo import Memo, build_memo
from madbench_data.scenario import Scenario, check_against_pack
from madbench_gateway.models import ModelSpec, as_spec
from madbench_gateway.providers import provider_for
from runner.batch import RunSpec

#: The phase a staged protocol's stages are routed as (see debate.protocols.staged).
STAGE_PHASES = ("propose", "crit")


def reachable_models(config: DebateConfig) -> list[tuple[str, str, ModelSpec]]:
    """(role, phase, spec) of every model a run of ``config`` may call, fallbacks included."""
    routing = config.models
    if config.protocol == "paper":
        phases = ["propose"] + (["critique", "revise"] if config.rounds else [])
        if config.score_rounds:
            phases.append("crit")
        if any(iv.name == "rca" for iv in config.interventions):
            phases.append("rca")
        pairs = {(a.role, p) for a in config.agents for p in phases}
        if config.aggregation == "judge":
            pairs.add(("judge", "judge"))
    else:  # a staged protocol's roles are its stages: every routed role, and the default
        roles = {"default"} | set(routing.roles) | {k.split(".")[0] for k in routing.role_phases}
        pairs = {(r, p) for r in roles for p in STAGE_PHASES}
    out, seen = [], set()
    for role, phase in sorted(pairs):
        todo = [routing.resolve(role, phase)]
        while todo:
            spec = todo.pop(0)
            if spec.model_dump_json() not in seen:
                seen.add(spec.model_dump_json())
                out.append((role, phase, spec))
            todo += [as_spec(f) for f in spec.fallbacks]
    return out


def model_problems(configs: list[DebateConfig]) -> list[str]:
    """Each distinct problem once, with where it arises (configs, and the roles and phases that reach the model)."""
    where: dict[str, dict[str, set[str]]] = {}
    for config in configs:
        for role, phase, spec in reachable_models(config):
            temperature = config.crit_temperature if phase in ("crit", "rca") else config.temperature
            max_tokens = getattr(config.max_tokens, phase, None)
            for p in provider_for(spec.model).preflight(spec, temperature, max_tokens):
                where.setdefault(p, {}).setdefault(config.name, set()).add(phase if role in (phase, "default")
                                                                            else f"{role} {phase}")
    def places(cs: dict[str, set[str]]) -> str:
        return "; ".join(f"config {c}: {', '.join(sorted(uses))}" for c, uses in sorted(cs.items()))
    return [f"{p} ({places(cs)})" for p, cs in sorted(where.items())]


def scenario_problems(scenarios: list[Scenario], pack: Pack, where: str) -> tuple[dict[str, Memo], list[str]]:
    """The memo of every scenario that has one, and what stops the others from running or being backtested."""
    memos, problems = {}, []
    for s in scenarios:
        here = f"{where}: scenario {s.id}"
        try:
            check_against_pack(s, pack, here)
            memos[s.id] = build_memo(s, pack, here)
            window = holding_window(pack, s.quarter, s.tickers, where=here)
            baseline_metrics(pack, s.quarter, s.tickers, window=window)
        except InputError as exc:  # collected so that every scenario's problem is named in one pass
            problems.append(str(exc))
    return memos, problems


def prompt_problems(configs: list[DebateConfig], scenario: Scenario, memo: Memo) -> list[str]:
    """Render every paper-protocol agent's first prompt on one real memo (templates compile at load already)."""
    problems = []
    for config in configs:
        if config.protocol != "paper":
            continue  # staged prompts are rendered from typed inputs the stage builds; they compile at load
        constraints = config.effective_constraints(scenario.constraints, f"config {config.name}: constraints")
        for a in config.agents:
            profile = load_profile(a.role, a.tier)
            try:
                profile.render("propose", memo=memo.text, universe=list(scenario.tickers),
                               constraints=constraints_text(constraints), agent_id=a.agent_id, role=a.role, round=0,
                               schema="{}")
            except Exception as exc:  # any template failure is a config problem to report with the others
                problems.append(f"config {config.name}: agent {a.agent_id} ({a.role}/{a.tier}) propose prompt: "
                                f"{type(exc).__name__}: {exc}")
    return problems


def writable_problems(dirs: dict[str, Path]) -> list[str]:
    """Each directory, or the nearest folder above it that exists, must be writable (nothing is created here)."""
    problems = []
    for what, d in dirs.items():
        existing = next(p for p in [d, *d.resolve().parents] if p.exists())
        if not existing.is_dir():
            problems.append(f"{d}: the {what} directory's path runs through a file ({existing})")
        elif not os.access(existing, os.W_OK | os.X_OK):
            problems.append(f"{d}: the {what} directory is not writable ({existing} is not writable by this user)")
    return problems


def preflight(runs: list[RunSpec], pack: Pack, where: str, cache_dir: Path, results_root: Path) -> list[str]:
    """Every problem found, as lines naming the file, config or scenario; empty when the batch can start."""
    configs = list({r.config.name: r.config for r in runs}.values())
    scenarios = list({r.scenario.id: r.scenario for r in runs}.values())
    memos, problems = scenario_problems(scenarios, pack, where)
    problems += model_problems(configs)
    if memos:
        first = next(s for s in scenarios if s.id in memos)
        problems += prompt_problems(configs, first, memos[first.id])
    problems += writable_problems({"LLM cache": Path(cache_dir), "results": Path(results_root)})
    return problems


def preflight_error(problems: list[str], where: str) -> InputError:
    """One InputError that lists every problem (the CLI prints it and exits 2)."""
    listing = "\n  - ".join(problems)
    return InputError(where, f"{len(problems)} problem(s) found before any model call:{os.linesep}  - {listing}",
                      "nothing was started; fix them and run the same command again")
