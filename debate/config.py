"""Debate configurations (``configs/debate/*.yaml``): every knob of the paper's ablations is a field.

Unknown keys are rejected everywhere. ``load_debate_config`` also resolves
every role profile, protocol and intervention, so a bad name or a template
typo fails here, before any model is called.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from debate.control import PIDConfig
from debate.scenario import Constraints, read_yaml
from eval.errors import InputError, format_validation_error
from runner.gateway.models import ModelRouting

Tier = Literal["basic", "causal", "enriched"]


class AgentConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: str
    tier: Tier = "causal"
    #: Defaults to the role; set it when two agents share a role.
    id: str | None = None

    @property
    def agent_id(self) -> str:
        return self.id or self.role


class InterventionConfig(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str


class PhaseTokens(BaseModel):
    model_config = ConfigDict(extra="forbid")
    propose: int | None = None
    critique: int | None = None
    revise: int | None = None
    judge: int | None = None
    crit: int | None = None
    rca: int | None = None


class DebateConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    description: str = ""
    protocol: str = "paper"
    #: The debating agents of the `paper` protocol (the staged protocols name their own roles).
    agents: list[AgentConfig] = Field(default_factory=list)
    #: Protocol-specific knobs, validated by the protocol's own options model (e.g. desks: enable_research_manager).
    options: dict[str, Any] = Field(default_factory=dict)
    #: T_max. 0 means no debate: proposals only (the single-agent and multi-agent-mean baselines).
    rounds: int = Field(1, ge=0, le=20)
    aggregation: Literal["judge", "mean"] = "mean"
    judge_tier: Tier = "causal"
    #: Who critiques whom: "all" (every other agent) or a map agent → list of targets.
    critique_targets: Literal["all"] | dict[str, list[str]] = "all"
    models: ModelRouting = Field(default_factory=ModelRouting)
    temperature: float = Field(0.7, ge=0, le=2)
    crit_temperature: float = Field(0.0, ge=0, le=2)
    max_tokens: PhaseTokens = Field(default_factory=PhaseTokens)
    pid: PIDConfig = Field(default_factory=PIDConfig)
    #: CRIT rubric: a name in configs/rubrics/ (uniform, role-aware) or a file.
    crit_rubric: str = "uniform"
    #: Score each round's revisions with CRIT (the controller needs it; off only for proposal-only baselines).
    score_rounds: bool = True
    interventions: list[InterventionConfig] = Field(default_factory=list)
    #: Overrides of the scenario's constraints, field by field.
    constraints: dict[str, Any] | None = None
    require_known_evidence: bool = True

    @model_validator(mode="after")
    def _unique_agents(self):
        if self.protocol == "paper" and not self.agents:
            raise ValueError("agents: the paper protocol needs at least one agent")
        ids = [a.agent_id for a in self.agents]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"agent ids must be unique (repeated: {', '.join(dupes)}); give each an `id`")
        if isinstance(self.critique_targets, dict):
            for a, targets in self.critique_targets.items():
                unknown = sorted(({a} | set(targets)) - set(ids))
                if unknown:
                    raise ValueError(f"critique_targets names unknown agent(s): {', '.join(unknown)}")
        if self.aggregation == "judge" and self.rounds == 0 and len(self.agents) == 1:
            raise ValueError("a single agent without debate has nothing to judge: use aggregation: mean")
        return self

    def effective_constraints(self, scenario_constraints: Constraints, where: str) -> Constraints:
        if not self.constraints:
            return scenario_constraints
        try:
            return Constraints.model_validate({**scenario_constraints.model_dump(exclude={"fully_invested"}), **self.constraints})
        except ValidationError as exc:
            raise InputError(where, "constraints: " + format_validation_error(exc), "fix the override") from None

    def targets_of(self, agent_id: str) -> list[str]:
        ids = [a.agent_id for a in self.agents]
        if self.critique_targets == "all":
            return [i for i in ids if i != agent_id]
        return list(self.critique_targets.get(agent_id, []))

    def content_hash(self) -> str:
        return hashlib.sha256(json.dumps(self.model_dump(mode="json"), sort_keys=True).encode()).hexdigest()


def parse_debate_config(data: Any, where: str) -> DebateConfig:
    try:
        cfg = DebateConfig.model_validate(data)
    except ValidationError as exc:
        raise InputError(where, format_validation_error(exc), "fix the listed fields (unknown keys are rejected)") from None
    check_names(cfg, where)
    return cfg


def load_debate_config(path: str | Path) -> DebateConfig:
    p = Path(path)
    if not p.is_file():
        raise InputError(p, "debate config not found", "give a YAML file such as configs/debate/causal-debate-3.yaml")
    return parse_debate_config(read_yaml(p), str(p))


def check_names(cfg: DebateConfig, where: str) -> None:
    """Resolve every profile, protocol and intervention now, so errors surface before any LLM call."""
    from debate.interventions import INTERVENTIONS, parse_intervention
    from debate.profiles import load_profile
    from debate.protocols import PROTOCOLS
    if cfg.protocol not in PROTOCOLS:
        raise InputError(where, f"protocol: unknown protocol {cfg.protocol!r}", f"use one of: {', '.join(PROTOCOLS)}")
    from debate.protocols import protocol_options
    protocol_options(cfg, where)
    for i, agent in enumerate(cfg.agents):
        load_profile(agent.role, agent.tier, where=f"{where}: agents[{i}]")
    if cfg.aggregation == "judge":
        load_profile("judge", cfg.judge_tier, where=f"{where}: judge_tier")
    for i, iv in enumerate(cfg.interventions):
        if iv.name not in INTERVENTIONS:
            raise InputError(where, f"interventions[{i}].name: unknown intervention {iv.name!r}",
                             f"use one of: {', '.join(INTERVENTIONS)}")
        parse_intervention(iv, f"{where}: interventions[{i}]")
    from scoring.crit_judge import load_crit_prompt
    from scoring.rubric import load_rubric
    load_crit_prompt()
    load_rubric(cfg.crit_rubric)
