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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from debate.config import DebateConfig
from debate.config_file import load_debate_config, parse_debate_config
from madbench_data.errors import InputError, format_validation_error
from madbench_data.market.calendar import quarter_range
from madbench_data.scenario import Scenario, load_scenarios
from madbench_data.scenario_gen import draw_scenarios
from madbench_data.templates import read_yaml
from madbench_gateway import ModelRouting
from madbench_gateway.models import ModelSpec
from runner.pipeline import run_id_for
from scoring.debate_scorer import scorer_for


class ScenarioMake(BaseModel):
    model_config = ConfigDict(extra="forbid")
    quarters: str
    count: int = Field(ge=1)
    min_tickers: int = Field(3, ge=1)
    max_tickers: int = Field(12, ge=1)
    seed: int = 0


class ScenarioSource(BaseModel):
    model_config = ConfigDict(extra="forbid")
    file: str | None = None
    #: A subset of the file's scenario ids (default: all).
    ids: list[str] | None = None
    make: ScenarioMake | None = None

    @model_validator(mode="after")
    def _one(self):
        if (self.file is None) == (self.make is None):
            raise ValueError("give exactly one of `file` or `make`")
        if self.ids is not None and self.file is None:
            raise ValueError("`ids` selects from a `file`")
        return self


class ConfigPair(BaseModel):
    """A treatment and its matched control, by config name: the same design with only ``factor`` changed."""

    model_config = ConfigDict(extra="forbid")
    control: str
    treatment: str
    #: The fields of the resolved configs that differ, as dotted paths with * wildcards (e.g. interventions,
    #: agents.*.tier); tests/runner/test_paper_batches.py checks that nothing else does.
    factor: list[str] = Field(min_length=1)


class BatchSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    description: str = ""
    scenarios: ScenarioSource
    configs: list[str] = Field(min_length=1)
    #: Optional: which config is the matched control of which treatment (for paired comparisons).
    pairs: list[ConfigPair] = Field(default_factory=list)
    #: Overrides crossed with every config, e.g. {rounds: [1, 2, 3]}.
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    #: A count (0..n-1) or explicit sample indices.
    replicates: int | list[int] = 1
    #: Every role and phase on this model: a model string (e.g. rules/auto) or a full spec with api_base,
    #: api_key_env and rate limits; else each config's own routing.
    model: str | ModelSpec | None = None
    pack: str | None = None
    evidence: list[str] = Field(default_factory=list)
    #: Parent of the batch's results directory, relative to the batch file like every path here.
    results_dir: str = "results"
    cache_dir: str | None = None
    max_cost_usd: float | None = Field(None, gt=0)
    #: Attempts per run before it is recorded as failed.
    retries: int = Field(1, ge=0)
    max_in_flight: int = Field(16, ge=1)
    #: Runner actors (each imports litellm once: about 250 MB and 5 s).
    workers: int = Field(2, ge=1)

    @property
    def sample_indices(self) -> list[int]:
        return list(range(self.replicates)) if isinstance(self.replicates, int) else list(self.replicates)


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
    m = spec.scenarios.make
    return draw_scenarios(pack, quarter_range(m.quarters), m.count, m.min_tickers, m.max_tickers, m.seed)


def resolve_configs(spec: BatchSpec, base: Path, where: str) -> list[DebateConfig]:
    configs = []
    for i, name in enumerate(spec.configs):
        cfg = load_debate_config(_rel(base, name))
        keys = sorted(spec.grid)
        for values in itertools.product(*(spec.grid[k] for k in keys)) if keys else [()]:
            override = dict(zip(keys, values))
            data = cfg.model_dump(mode="json") | override
            if override:
                data["name"] = cfg.name + "".join(f"+{k}={v}" for k, v in override.items())
            c = parse_debate_config(data, f"{where}: configs[{i}] with grid {override}" if override else f"{where}: configs[{i}]")
            if spec.model:
                c = c.model_copy(update={"models": ModelRouting.single(spec.model)})
            scorer_for(c)  # its rubric and CRIT prompt exist
            configs.append(c)
    names = [c.name for c in configs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise InputError(where, f"configs: two configs share the name {', '.join(dupes)}", "give each config a distinct `name`")
    return configs


def expand(spec: BatchSpec, scenarios: list[Scenario], configs: list[DebateConfig]) -> list[RunSpec]:
    runs = []
    for config in configs:
        for scenario in scenarios:
            for k in spec.sample_indices:
                runs.append(RunSpec(run_id_for(scenario, config, k), scenario, config, k))
    return runs
