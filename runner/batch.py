"""Batch specs (``configs/batches/*.yaml``) and their expansion into runs.

A batch names a scenario source, debate configs (optionally crossed with a
grid of overrides), replicates, and where results and the cache go. Every
path is resolved relative to the batch file. The expansion is deterministic,
and each run's id hashes its content (scenario, resolved config, replicate,
prompt templates), so renaming a file changes nothing and editing a template
gives new runs.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, field_validator, model_validator

from madbench.data.errors import InputError, format_validation_error
from madbench.data.market.calendar import quarter_range
from madbench.data.names import Name, safe_name_text
from madbench.data.scenario import Scenario, load_scenarios
from madbench.data.scenario_gen import draw_scenarios
from madbench.data.templates import read_yaml
from madbench.debate.config import DebateConfig
from madbench.debate.config_file import load_debate_config, parse_debate_config
from madbench.debate.protocols import protocol_of, protocol_options
from madbench.debate.protocols.self_consistency import MAX_SAMPLES, config_problems, samples_for
from madbench.debate.protocols.self_consistency import Options as SelfConsistencyOptions
from madbench.gateway import ModelRouting
from madbench.gateway.hedging import HedgeSettings
from madbench.gateway.models import ModelSpec
from madbench.gateway.routing_profiles import Deployment, load_routing_profile, with_deployment
from madbench.results import BatchDirs, ResultsDir
from madbench.runner.leakage_reference import reference_arms
from madbench.runner.pairs import check_pairs
from madbench.runner.pipeline import config_identity, run_ids_for
from madbench.runner.provider_batches import ProviderBatchOptions
from madbench.runner.sequential import SequentialSpec
from madbench.runner.sweep import SweepSpec
from madbench.scoring.scorers import scorer_for

#: The most runs one batch expands to (configs × grid cells × scenarios × replicates) unless `madbench run
#: --max-runs N` allows more: checked arithmetically from the spec before anything is allocated.
MAX_RUNS = 100_000
#: The most runs any batch may have, ``--max-runs`` or not. The driver builds every run before the first starts (a
#: ``RunSpec`` of about 0.2 KB and a manifest entry of about 1.1 KB a run) and writes the manifest whole at the start
#: and end of an invocation (its changes between are journaled: madbench.results.records.ManifestJournal). Expanding
#: 100,000 runs took 0.32 s on 2 loaded cores (3 µs a run: each scenario is serialized once per config and each run
#: costs one hash, ``run_ids_for``) and a manifest of 20,000 runs 0.15 s. At a million runs that is 1.3 GB and seconds
#: before the first call; ten million would not fit in a laptop's memory. A larger study is several batches (each its
#: own results directory, sharing one cache).
MAX_RUNS_CEILING = 1_000_000
#: The most runner actors a batch may ask for: each holds about 250 MB (litellm imported), so 256 are 64 GB, more
#: than a large node; a bigger cluster runs more batches side by side.
MAX_WORKERS = 256
#: The most runs in flight at once (each an asyncio task in an actor, holding its memo and trace open).
MAX_IN_FLIGHT = 10_000
#: The most attempts after the first a failed run gets: a run failing 10 times in a row fails for a reason to fix.
MAX_RETRIES = 10
#: The most cells a `grid` may have (the product of its value lists' lengths); each is a config to build.
MAX_GRID_CELLS = 1_000


class ScenarioMake(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    quarters: str
    count: int = Field(ge=1)
    min_tickers: int = Field(3, ge=1)
    max_tickers: int = Field(12, ge=1)
    seed: int = 0


class ScenarioSource(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    file: str | None = None
    #: A subset of the file's scenario ids (default: all).
    ids: list[str] | None = None
    #: Scenarios drawn from the pack; with a ``file`` too, they follow the file's (e.g. post-cutoff quarters added to
    #: the paper's scenarios). A list draws several blocks, in order (e.g. one before a model's cutoff, one after).
    make: ScenarioMake | list[ScenarioMake] | None = None

    @property
    def draws(self) -> list[ScenarioMake]:
        return [] if self.make is None else self.make if isinstance(self.make, list) else [self.make]

    @model_validator(mode="after")
    def _one(self):
        if self.file is None and not self.draws:
            raise ValueError("give `file`, `make`, or both")
        if self.ids is not None and self.file is None:
            raise ValueError("`ids` selects from a `file`")
        if self.ids is not None and not self.ids:
            raise ValueError("`ids: []` selects no scenario: list at least one id, or leave `ids` out to take them all")
        if self.ids is not None:
            twice = sorted(i for i, n in Counter(self.ids).items() if n > 1)
            if twice:
                raise ValueError(f"`ids` lists {', '.join(twice)} more than once: each scenario is one run per config "
                                 "and replicate; list each id once")
        return self


class ConfigPair(BaseModel):
    """A treatment and its matched control, by config name: the same design with only ``factor`` changed."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    control: str
    treatment: str
    #: What the treatment changes: dotted config paths with * wildcards (e.g. interventions, agents.*.tier, models),
    #: or ``roles`` (a change of role set). Checked when the batch loads, on what the arms run (runner/pairs.py).
    factor: list[str] = Field(min_length=1)


class LeakageAuditSpec(BaseModel):
    """``leakage_audit:``: before any debate, audit the blind arm's memos (runner/leakage_gate.py)."""

    model_config = ConfigDict(extra="forbid")
    #: What a probed model whose hit rate's 95% interval lies above chance does to the batch: ``refuse`` to start any
    #: debate, or ``warn`` on stderr and run it (the audit is recorded either way).
    on_leak: Literal["refuse", "warn"] = "refuse"
    #: A memoryless model (``rules/…``): each config of a declared pair runs again on it as ``<name>+reference``, so
    #: that named − blind has a reference for what blinding costs a model that remembers nothing
    #: (runner/leakage_reference.py; ``madbench stats`` reports the difference in differences).
    reference: str | None = None

    @field_validator("reference")
    @classmethod
    def _memoryless(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith("rules/"):
            raise ValueError(f"reference: {v!r} is no memoryless model; name a rule-based one, e.g. rules/auto (it reads "
                             "only the memo's numbers, so it can recall nothing)")
        return v


class BatchRouting(BaseModel):
    """How the batch's configs reach their models: a routing profile in place of each config's own routing, and
    deployment overrides per tier (a run's identity sees neither limits, nor key variables, nor api_base)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    #: A name in configs/routing/: every config on it, its own routing replaced (as `model` does with one model).
    profile: str | None = None
    #: Tier name → its api_base, api_key_env or limits (field by field), in every config that has the tier.
    tiers: dict[str, Deployment] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _a_bare_name_is_a_profile(cls, value: Any) -> Any:
        # `routing: rules` is how a debate config names its profile; in a batch it means the same
        return {"profile": value} if isinstance(value, str) else value


class BatchSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    name: Name
    description: str = ""
    scenarios: ScenarioSource
    configs: list[str] = Field(min_length=1)
    #: Optional: which config is the matched control of which treatment (for paired comparisons).
    pairs: list[ConfigPair] = Field(default_factory=list)
    #: Overrides crossed with every config, e.g. {rounds: [1, 2, 3]}.
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    #: A count (0..n-1) or explicit sample indices; strict: `true` or `"3"` is an error, not 1 or 3.
    replicates: StrictInt | list[StrictInt] = 1
    #: Every role and phase on this model: a model string (e.g. rules/auto) or a full spec with api_base,
    #: api_key_env and rate limits; else each config's own routing.
    model: str | ModelSpec | None = None
    routing: BatchRouting = Field(default_factory=BatchRouting)
    pack: str | None = None
    evidence: list[str] = Field(default_factory=list)
    #: Parent of the batch's results directory, relative to the batch file like every path here.
    results_dir: str = "results"
    cache_dir: str | None = None
    max_cost_usd: float | None = Field(None, gt=0)
    #: Attempts per run before it is recorded as failed.
    retries: int = Field(1, ge=0, le=MAX_RETRIES)
    max_in_flight: int = Field(16, ge=1, le=MAX_IN_FLIGHT)
    #: Runner actors (each imports litellm once: about 250 MB and 5 s).
    workers: int = Field(2, ge=1, le=MAX_WORKERS)
    #: Seconds a run may make no progress (its trace and its provider attempts unchanged; a wait for a provider batch
    #: is the collector's to watch) before the watchdog fails it with that reason and replaces its runner actor
    #: (runner/dispatch.py). Recorded in the manifest with the rest of the spec.
    stall_timeout_s: float = Field(600.0, gt=0, le=7 * 24 * 3600)
    #: ``sync`` (each call when it is made) or ``batch``: through the provider's batch API at about half the price,
    #: one provider batch per debate phase (runner/provider_batches.py; the full form sets its window and polling).
    execution: Literal["sync", "batch"] | ProviderBatchOptions = "sync"
    #: A group-sequential design on one declared pair: looks at planned counts of complete pairs, and a stop once the
    #: answer is known (runner/sequential.py).
    sequential: SequentialSpec | None = None
    #: Many arms raced against one control, losing arms dropped at looks, the family-wise error held
    #: (runner/sweep.py).
    sweep: SweepSpec | None = None
    #: The identification probe and residue pass of `madbench leakage audit` on the batch's own blind memos before
    #: any debate, recorded in <results>/leakage_audit/ (runner/leakage_gate.py); needs a blind config.
    leakage_audit: LeakageAuditSpec | None = None
    #: Hedged requests (madbench.gateway.hedging): a slow request sent a second time, the first answer taken; on for
    #: priced models, at most ``max_share`` (5%) more requests. ``hedging: {enabled: false}`` turns it off.
    hedging: HedgeSettings = Field(default_factory=HedgeSettings)

    @field_validator("model", "results_dir", "cache_dir")
    @classmethod
    def _not_empty(cls, v):
        # `model: ""` would run the configs' own models and `results_dir: ""` write into the batch file's folder
        if isinstance(v, str) and not v.strip():
            raise ValueError("is empty: give a value, or leave the field out")
        return v

    @field_validator("execution", mode="before")
    @classmethod
    def _execution(cls, v):
        # The mapping form is the batch mode's options: validated as those alone, so that a mistake in one of them is
        # reported as that, not beside "should be 'sync' or 'batch'".
        if isinstance(v, dict):
            if v.get("mode") == "sync":
                raise ValueError("the mapping form sets provider batch mode's options; for synchronous calls write "
                                 "`execution: sync`")
            return ProviderBatchOptions.model_validate(v)
        return v

    @model_validator(mode="after")
    def _one_routing(self):
        if self.model is not None and self.routing.profile is not None:
            raise ValueError("give `model` (one model everywhere) or `routing.profile` (a routing profile), not both")
        if self.sequential is not None and self.sweep is not None:
            raise ValueError("sweep: a batch is a sweep (many arms against one control) or a sequential experiment (one "
                             "pair), not both: keep one of `sweep:` and `sequential:`")
        if self.sequential is not None and self.sequential.pair not in [p.treatment for p in self.pairs]:
            raise ValueError(f"sequential.pair: {self.sequential.pair!r} is not the treatment of a declared pair (the "
                             f"batch's: {', '.join(p.treatment for p in self.pairs) or 'none'}); declare it under `pairs:`")
        if self.sequential is not None and self.grid:
            raise ValueError("sequential: a design compares one pair of configs; a grid makes more (drop the grid)")
        if "routing" in self.grid:
            raise ValueError("grid: a routing is no grid axis (a profile is applied as a config file is read): list "
                             "one config per routing, or run the batch once per `--routing NAME`")
        return self

    @field_validator("replicates")
    @classmethod
    def _replicates(cls, v):
        if isinstance(v, int):
            if v < 1:
                raise ValueError(f"a count of replicates must be at least 1 (got {v}); write 1 for one run per "
                                 "scenario and config, or a list of sample indices such as [0, 1]")
            return v
        if not v:
            raise ValueError("an empty list of replicates runs nothing: list at least one sample index, e.g. [0]")
        negative = [k for k in v if k < 0]
        if negative:
            raise ValueError(f"sample indices must be non-negative (got {', '.join(map(str, negative))})")
        twice = sorted(k for k, n in Counter(v).items() if n > 1)
        if twice:
            raise ValueError(f"sample index {', '.join(map(str, twice))} is listed more than once: the same index is "
                             "the same run; list distinct indices")
        return v

    @property
    def provider_batches(self) -> ProviderBatchOptions | None:
        """The provider batch mode's options, or None for synchronous calls."""
        if self.execution == "sync":
            return None
        return ProviderBatchOptions() if self.execution == "batch" else self.execution

    @property
    def n_replicates(self) -> int:
        return self.replicates if isinstance(self.replicates, int) else len(self.replicates)

    @property
    def grid_cells(self) -> int:
        return math.prod(len(v) for v in self.grid.values())

    @property
    def sample_indices(self) -> list[int]:
        return list(range(self.replicates)) if isinstance(self.replicates, int) else list(self.replicates)


def check_size(spec: BatchSpec, where: str, max_runs: float | None = None, n_scenarios: int | None = None) -> int:
    """The number of runs ``spec`` expands to, computed from its counts alone (nothing is built); an ``InputError``
    when the grid has more than ``MAX_GRID_CELLS`` cells or an empty value list, or the runs exceed ``max_runs``
    (default ``MAX_RUNS``). ``n_scenarios`` unknown (a file not yet read): the spec's own lower bound is used."""
    limit = MAX_RUNS if max_runs is None else max_runs
    empty = sorted(k for k, v in spec.grid.items() if not v)
    if empty:
        raise InputError(where, f"grid.{empty[0]}: an empty list of values crosses to no run at all",
                         "give it at least one value, or remove it from `grid`")
    cells = spec.grid_cells
    if cells > MAX_GRID_CELLS:
        sizes = " × ".join(f"{len(v)} {k}" for k, v in sorted(spec.grid.items()))
        raise InputError(where, f"grid: {sizes} = {cells:,} cells, over the limit of {MAX_GRID_CELLS:,} "
                         "(MAX_GRID_CELLS)", "cross fewer values, or split the grid into several batches")
    at_least = ""
    if n_scenarios is None:  # the file is not read yet: it holds at least one scenario
        src = spec.scenarios
        n_scenarios = sum(m.count for m in src.draws) + (len(src.ids) if src.ids else 1 if src.file else 0)
        at_least = "" if src.file is None or src.ids else "at least "
    total = len(spec.configs) * cells * n_scenarios * spec.n_replicates
    if total > limit:
        raise too_many_runs(where, f"{len(spec.configs)} config(s) × {cells:,} grid cell(s) × {at_least}{n_scenarios:,} "
                            f"scenario(s) × {spec.n_replicates:,} replicate(s) = {at_least}{total:,}", total, limit)
    return total


def check_max_runs(max_runs: int | None) -> None:
    """``--max-runs``: a positive number of runs, at most ``MAX_RUNS_CEILING``."""
    if max_runs is not None and max_runs < 1:
        raise InputError("--max-runs", f"{max_runs} allows no run", "give a positive number of runs")
    if max_runs is not None and max_runs > MAX_RUNS_CEILING:
        raise InputError("--max-runs", f"{max_runs:,} is over the {MAX_RUNS_CEILING:,} runs any batch may have (every run "
                         "is built in memory before the first starts, and listed in the manifest)",
                         f"split the study into batches of at most {MAX_RUNS_CEILING:,} runs (each its own results "
                         "directory; they can share one cache)")


def too_many_runs(where: str, product: str, total: int, limit: int | float) -> InputError:
    """A batch of ``total`` runs over ``limit``: what to pass to allow it, or, past ``MAX_RUNS_CEILING``, to split it."""
    fix = (f"shrink replicates, scenarios or grid, or pass `madbench run --max-runs {total}` if you mean it"
           if total <= MAX_RUNS_CEILING else
           f"split it into batches of at most {MAX_RUNS_CEILING:,} runs (the most any batch may have; fewer replicates, "
           "scenarios or grid cells each)")
    return InputError(where, f"the batch expands to {product} runs, over the limit of {limit:,} runs", fix)


@dataclass(frozen=True)
class RunSpec:
    run_id: str
    scenario: Scenario
    config: DebateConfig
    sample_index: int


def load_batch(path: str | Path) -> tuple[BatchSpec, Path]:
    p = Path(path)
    if not p.is_file():
        raise InputError(p, "batch file not found", "give a YAML file such as configs/batches/rules-35.yaml")
    try:
        return BatchSpec.model_validate(read_yaml(p)), p.resolve().parent
    except ValidationError as exc:
        raise InputError(p, format_validation_error(exc), "fix the listed fields (unknown keys are rejected)") from None


def _rel(base: Path, value: str) -> Path:
    q = Path(value).expanduser()
    return q if q.is_absolute() else (base / q)


def resolve_scenarios(spec: BatchSpec, base: Path, pack, where: str) -> list[Scenario]:
    """The file's scenarios (or those of ``ids``), then the drawn ones; an id in both is an error."""
    listed = _file_scenarios(spec, base, where) if spec.scenarios.file else []
    drawn = [s for m in spec.scenarios.draws
             for s in draw_scenarios(pack, quarter_range(m.quarters), m.count, m.min_tickers, m.max_tickers, m.seed)]
    ids = [s.id for s in listed + drawn]
    twice = sorted(i for i, n in Counter(ids).items() if n > 1)
    if twice:
        raise InputError(where, f"scenarios: drawn ids also in the file or in another draw: {', '.join(twice)}",
                         "change scenarios.make.seed (or a draw's quarters) or rename the file's scenarios")
    return listed + drawn


def _file_scenarios(spec: BatchSpec, base: Path, where: str) -> list[Scenario]:
    if spec.scenarios.file:
        path = _rel(base, spec.scenarios.file)
        if not path.is_file():
            raise InputError(where, f"scenarios.file: {spec.scenarios.file} not found (looked for {path}; relative paths "
                             "are read from the batch file's folder)", "fix the path, or write it absolute")
        scenarios = load_scenarios(path)
        if spec.scenarios.ids is not None:
            known = {s.id: s for s in scenarios}
            missing = [i for i in spec.scenarios.ids if i not in known]
            if missing:
                raise InputError(where, f"scenarios.ids: not in {path}: {', '.join(missing)}", "fix the ids")
            scenarios = [known[i] for i in spec.scenarios.ids]
        return scenarios
    return []


def resolve_configs(spec: BatchSpec, base: Path, where: str) -> list[DebateConfig]:
    check_size(spec, where, max_runs=math.inf)  # the grid's cells, before building any
    configs = []
    for i, name in enumerate(spec.configs):
        cfg = load_debate_config(_rel(base, name))
        keys = sorted(spec.grid)
        for values in itertools.product(*(spec.grid[k] for k in keys)) if keys else [()]:
            override = dict(zip(keys, values, strict=True))
            data = cfg.model_dump(mode="json") | override
            if override:
                # a grid value's text is kept to a name's characters: the config's name becomes a file name
                data["name"] = cfg.name + "".join(safe_name_text(f"+{k}={v}") for k, v in override.items())
            c = parse_debate_config(data, f"{where}: configs[{i}] with grid {override}" if override else f"{where}: configs[{i}]")
            c = c.model_copy(update={"models": batch_routing(spec, c.models, where)})
            if protocol_of(c).matches_spend:
                c = resolve_samples(c, _rel(base, name).parent, f"{where}: configs[{i}] ({c.name})")
            scorer_for(c)  # its rubric and CRIT prompt exist
            configs.append(c)
    configs += reference_arms(spec, configs, where)
    unused = sorted(set(spec.routing.tiers) - {t for c in configs for t in c.models.tiers})
    if unused:
        raise InputError(where, f"routing.tiers.{unused[0]}: no config of the batch has this tier (theirs: "
                         f"{', '.join(sorted({t for c in configs for t in c.models.tiers}))})",
                         "name one of their tiers (in the batch file's routing.tiers or in --set)")
    names = [c.name for c in configs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise InputError(where, f"configs: two configs share the name {', '.join(dupes)}", "give each config a distinct `name`")
    check_pairs(spec.pairs, configs, where)  # on the arms as they run: this batch's routing and resolved samples
    return configs


def batch_routing(spec: BatchSpec, own: ModelRouting, where: str) -> ModelRouting:
    """The routing a config with routing ``own`` runs on in this batch: the batch's `model` or routing profile in
    its place, if any, and the batch's deployment overrides on the tiers it has."""
    routing = own
    if spec.model:
        routing = ModelRouting.single(spec.model)
    elif spec.routing.profile:
        routing = load_routing_profile(spec.routing.profile, f"{where}: routing.profile").routing()
    return with_deployment(routing, spec.routing.tiers, where)


def with_settings(spec: BatchSpec, settings: dict[str, Any], where: str) -> BatchSpec:
    """``spec`` with ``settings`` ({tier: {field: value}}, e.g. from ``--set``) merged over its ``routing.tiers``."""
    tiers = {k: v.model_dump(mode="json", exclude_unset=True) for k, v in spec.routing.tiers.items()}
    for tier, fields in settings.items():
        mine = tiers.setdefault(tier, {})
        for key, value in fields.items():
            mine[key] = mine.get(key, {}) | value if isinstance(value, dict) and isinstance(mine.get(key), dict) else value
    try:
        routing = BatchRouting.model_validate({"profile": spec.routing.profile, "tiers": tiers})
    except ValidationError as exc:
        raise InputError(where, format_validation_error(exc, "routing"), "set api_base, api_key_env, hedge or "
                         "limits.<rpm|tpm|max_concurrency|…> of a tier") from None
    return spec.model_copy(update={"routing": routing})


def pilot_tokens(pilot: Path, config: str, where: str) -> tuple[float, float, int]:
    """(mean tokens per run, mean tokens per proposal, runs) of ``config``'s finished runs in a pilot's results
    directory: tokens are prompt + completion of every call in its ``calls.parquet``, a proposal is a ``propose``
    call. An ``InputError`` when the pilot, the config or its tokens are missing."""
    dirs = BatchDirs(pilot)
    if not dirs.table("runs").is_file() or not dirs.table("calls").is_file():
        raise InputError(where, f"options.pilot: no runs.parquet and calls.parquet in {pilot} (relative paths are read "
                         "from the config file's folder)", "give the results directory of a finished pilot batch")
    results = ResultsDir(pilot)
    runs, calls = results.runs, results.calls
    present = sorted(set(runs["config"]))
    ok = runs[(runs["config"] == config) & (runs["status"] == "ok")] if config in present else runs.iloc[:0]
    if ok.empty:
        raise InputError(where, f"options.match_tokens_of: the pilot {pilot} has no finished run of {config!r} "
                         f"(it has: {', '.join(present) or 'none'})", "run that config in the pilot, or name one it ran")
    mine = calls[calls["run_id"].isin(set(ok["run_id"]))] if "run_id" in calls.columns else calls.iloc[:0]
    tokens = mine["prompt_tokens"].fillna(0) + mine["completion_tokens"].fillna(0) if len(mine) else pd.Series(dtype=float)
    proposals = tokens[mine["phase"] == "propose"] if len(mine) else tokens
    if proposals.empty or not proposals.mean() > 0:
        raise InputError(where, f"options.match_tokens_of: the pilot's {config} runs in {pilot} record no tokens for a "
                         "proposal (rule-based answers count none, and staged protocols make no `propose` call)",
                         "match on a pilot of a paper-protocol config run on a real model, or give samples")
    per_run = tokens.groupby(mine["run_id"]).sum().reindex(ok["run_id"], fill_value=0.0).mean()
    return float(per_run), float(proposals.mean()), len(ok)


def pilot_generated(pilot: Path, config: str, where: str) -> dict[str, int]:
    """Scenario id → the mean generated (completion) tokens per finished run of ``config`` on it in a pilot's results
    directory (its replicates averaged): what a generated-token-matched baseline draws up to on that scenario."""
    per_run, _, _ = pilot_tokens(pilot, config, where)  # the pilot, the config and its tokens exist
    results = ResultsDir(pilot)
    runs, calls = results.runs, results.calls
    ok = runs[(runs["config"] == config) & (runs["status"] == "ok")]
    mine = calls[calls["run_id"].isin(set(ok["run_id"]))]
    by_run = mine["completion_tokens"].fillna(0).groupby(mine["run_id"]).sum().reindex(ok["run_id"], fill_value=0)
    by_scenario = by_run.groupby(ok.set_index("run_id")["scenario_id"]).mean()
    if not (by_scenario > 0).all():
        raise InputError(where, f"options.match_generated_of: the pilot's {config} runs in {pilot} generate no tokens on "
                         f"{', '.join(sorted(by_scenario.index[by_scenario <= 0]))} (rule-based answers count none)",
                         "match on a pilot run on a model that counts tokens (a provider, or `madbench sim serve`)")
    return {str(k): int(round(v)) for k, v in by_scenario.items()}


def resolve_samples(cfg: DebateConfig, config_dir: Path, where: str) -> DebateConfig:
    """A ``self_consistency`` config, checked, with ``match_tokens_of`` + ``pilot`` replaced by the concrete
    ``samples`` N they give (``self_consistency.samples_for``), so the run identity records N, not a path; how N was
    matched is appended to the description (outside the identity)."""
    problems = config_problems(cfg)
    if problems:
        raise InputError(where, "; ".join(problems), "fix the self_consistency config")
    opt = protocol_options(cfg, where)
    if not isinstance(opt, SelfConsistencyOptions):
        raise TypeError(f"{where}: resolve_samples reads a self_consistency config, not a {cfg.protocol} one")
    if opt.match_generated_of is not None and opt.pilot is not None:
        pilot = _rel(config_dir, opt.pilot)
        targets = pilot_generated(pilot, opt.match_generated_of, where)
        note = (f"draws matched per scenario to {opt.match_generated_of}'s generated tokens in {pilot} "
                f"({min(targets.values()):,} to {max(targets.values()):,})")
        options = {k: v for k, v in cfg.options.items() if k not in ("match_generated_of", "pilot")} | {"targets": targets}
        return cfg.model_copy(update={"options": options, "description": f"{cfg.description.strip()} [{note}]".strip()})
    if opt.match_tokens_of is None:
        return cfg
    assert opt.pilot is not None  # Options refuses match_tokens_of without its pilot
    pilot = _rel(config_dir, opt.pilot)
    per_run, per_sample, n_runs = pilot_tokens(pilot, opt.match_tokens_of, where)
    n = samples_for(per_run, per_sample)
    if n > MAX_SAMPLES:
        raise InputError(where, f"options.match_tokens_of: {opt.match_tokens_of} spends {per_run:,.0f} tokens per run, "
                         f"{n} proposals of {per_sample:,.0f}: over the {MAX_SAMPLES} samples a run may draw",
                         "match a smaller debate, or give samples")
    note = (f"N = {n} samples matched to {opt.match_tokens_of}: {per_run:,.0f} tokens per run ÷ {per_sample:,.0f} per "
            f"proposal over {n_runs} pilot run(s) in {pilot}")
    # As if the file said `samples: N` in place of the two keys: the same identity as that file's runs.
    options = {k: v for k, v in cfg.options.items() if k not in ("match_tokens_of", "pilot")} | {"samples": n}
    return cfg.model_copy(update={"options": options,
                                  "description": f"{cfg.description.strip()} [{note}]".strip()})


def expand(spec: BatchSpec, scenarios: list[Scenario], configs: list[DebateConfig], where: str = "batch",
           max_runs: int | None = None) -> list[RunSpec]:
    """Every (config, scenario, replicate) as a run: its size checked first (``check_size``), and an ``InputError``
    naming both sources when two of them would be one run (the same run id)."""
    limit = MAX_RUNS if max_runs is None else max_runs
    total = len(configs) * len(scenarios) * spec.n_replicates
    if total > limit:
        raise too_many_runs(where, f"{len(configs)} config(s) × {len(scenarios):,} scenario(s) × {spec.n_replicates:,} "
                            f"replicate(s) = {total:,}", total, limit)
    runs: list[RunSpec] = []
    seen: dict[str, RunSpec] = {}
    for config in configs:
        identity = config_identity(config)
        for scenario in scenarios:
            for k, run_id in zip(spec.sample_indices, run_ids_for(scenario, config, spec.sample_indices, identity),
                                 strict=True):
                run = RunSpec(run_id, scenario, config, k)
                first = seen.setdefault(run.run_id, run)
                if first is not run:
                    raise InputError(where, f"two runs of the batch are one run (id {run.run_id}): {_source(first)} "
                                     f"and {_source(run)} have the same content", _collision_fix(first, run))
                runs.append(run)
    return runs


def _source(r: RunSpec) -> str:
    return f"scenario {r.scenario.id} × config {r.config.name} × replicate {r.sample_index}"


def _collision_fix(a: RunSpec, b: RunSpec) -> str:
    if a.config.name != b.config.name:
        return (f"configs {a.config.name} and {b.config.name} resolve to the same debate: make them differ, or list "
                "one of them")
    if a.scenario.id == b.scenario.id:
        return f"scenario id {a.scenario.id} appears twice in the scenario source: give each scenario a distinct id"
    return "list each scenario and replicate once"
