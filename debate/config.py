"""Debate configurations (``configs/debate/*.yaml``): every knob of the paper's ablations is a field.

Unknown keys are rejected everywhere. Reading a file (``madbench.debate.config_file``) also resolves every
role profile, protocol and intervention, so a bad name or a template typo fails before any model is called.
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_serializer, model_validator

from madbench.data.blind import BlindOptions
from madbench.data.errors import InputError, format_validation_error
from madbench.data.names import Name
from madbench.data.scenario import Constraints
from madbench.debate.control import PIDConfig
from madbench.debate.schemas import Tier
from madbench.gateway.models import ModelRouting


class AgentConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
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


#: The scorer a config grades with unless it names another (``madbench.scoring.scorers``).
DEFAULT_SCORER = "crit"
#: The largest answer budget a phase may ask for: above every hosted model's output limit (the preflight checks the
#: model's own), low enough that a typo (an extra zero or two) is caught here.
MAX_ANSWER_TOKENS = 1_000_000
Tokens = Annotated[int | None, Field(ge=1, le=MAX_ANSWER_TOKENS)]


class PhaseTokens(BaseModel):
    """Answer budgets per phase (``max_tokens`` of each request); None: the model's default."""
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    propose: Tokens = None
    critique: Tokens = None
    revise: Tokens = None
    judge: Tokens = None
    crit: Tokens = None
    rca: Tokens = None


class DebateConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    name: Name
    description: str = ""
    #: A registered name, an import path into the researcher's own code (``my_lab.jury:Jury``) or an installed
    #: package's entry point (``madbench.debate.protocols.registry``).
    protocol: str = "paper"
    #: The debating agents of a protocol that debates the config's agents (the staged protocols name their own roles).
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
    #: The scorer that grades arguments (CRIT, RCA): a registered name, or an import path to a factory
    #: ``(DebateConfig) -> Scorer`` in the researcher's own code (``madbench.scoring.scorers``).
    scorer: str = DEFAULT_SCORER
    #: Run metrics its runs report in runs.parquet (``madbench.debate.run_metrics``): they read a finished run and
    #: change none of it, so they are not part of a run's identity.
    metrics: list[str] = Field(default_factory=list)
    #: Overrides of the scenario's constraints, field by field.
    constraints: dict[str, Any] | None = None
    require_known_evidence: bool = True
    #: Blind memos (``madbench.data.blind``): pseudonyms for tickers and names, dates relative to the as-of date.
    #: ``blind: true`` is ``{enabled: true}`` with the default options. Off by default.
    blind: BlindOptions = Field(default_factory=lambda: BlindOptions(enabled=False))

    @field_validator("blind", mode="before")
    @classmethod
    def _blind_flag(cls, v):
        return {"enabled": v} if isinstance(v, bool) else v

    @model_serializer(mode="wrap")
    def _blind_only_when_on(self, handler):
        """A config that is not blind dumps as it did before ``blind`` existed, so its run ids and content hash are
        unchanged; a blind one carries its options into both."""
        data = handler(self)
        if isinstance(data, dict):
            # likewise a config on the default scorer and without run metrics
            for key, off in (("blind", not self.blind.enabled), ("scorer", self.scorer == DEFAULT_SCORER),
                             ("metrics", not self.metrics)):
                if off:
                    data.pop(key, None)
        return data

    @model_validator(mode="after")
    def _unique_agents(self):
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

    def identity(self) -> dict[str, Any]:
        """What makes the config's answers what they are: every field but its name, description and run metrics, with
        the models' deployment settings (key variable, limits, api_base) at their defaults (``ModelRouting.identity``)."""
        return self.model_dump(mode="json", exclude={"name", "description", "metrics"}) | {"models": self.models.identity()}

    def content_hash(self) -> str:
        data = self.model_dump(mode="json") | {"models": self.models.identity()}
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
