"""Model specifications and routing: which model answers which role and phase.

A config names models by tier (``deep``, ``quick``, as in TradingAgents) or
directly. Resolution order: role+phase, role, phase, default tier. Keys are
never part of a spec; a spec only names the environment variable holding one.
"""

from __future__ import annotations

import re
from typing import Any, Literal, cast
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, field_validator, model_validator

from madbench.gateway.phases import PHASES, Phase

StructuredMode = Literal["json_schema", "json_object_schema", "prompt_only"]
WeightPolicy = Literal["strict", "normalize"]
#: How narrowly the JSON schema sent with a turn is fitted (debate.request_schemas): to the turn (its peers' claims,
#: the critiques it owes answers to) or to the run (its universe and memo IDs only).
SchemaScope = Literal["turn", "run"]
#: The ModelSpec fields that say where a model is reached and how fast, not what it answers: a run's identity sees
#: them at their defaults, and a batch or the command line may override them (``madbench.gateway.routing_profiles``).
DEPLOYMENT_FIELDS: tuple[str, ...] = ("api_base", "api_key_env", "limits")
#: The ModelSpec fields a run's identity leaves out entirely (added after run ids existed: ids stay the same).
UNSEEN_FIELDS: tuple[str, ...] = ("price", "hedge")
#: What an environment variable's name may be (POSIX): anything else given as ``api_key_env`` is most likely the key.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_api_base(value: str | None) -> str | None:
    """``value`` when it is an http(s) URL with a host; else a ValueError that does not repeat it (a URL may carry a
    key in its query or user part). Without this, a typo reaches the provider as a path and fails every call only
    after minutes of retries."""
    if value is None:
        return None
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - parsing it raises for a port that is not a number in range
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or any(c.isspace() for c in value):
        raise ValueError("is not an http(s) URL with a host (write e.g. http://127.0.0.1:8000/v1 or "
                         "https://api.openai.com/v1)")
    return value


def check_api_key_env(value: str | None) -> str | None:
    """``value`` when it names an environment variable; else a ValueError that does not repeat it (it is likely a key)."""
    if value is not None and not ENV_NAME.fullmatch(value):
        raise ValueError("must name an environment variable (e.g. OPENAI_API_KEY), not hold a key")
    return value


class RateLimits(BaseModel):
    """Limits of one (provider, model, api_base), enforced across the whole cluster."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    rpm: PositiveFloat | None = None
    tpm: PositiveFloat | None = None
    max_concurrency: int = Field(8, ge=1, le=10_000)
    #: Requests that may start back-to-back before pacing at rpm/60 per second.
    burst: float = Field(1.0, ge=1.0, le=10_000)
    #: Share of rpm and tpm left unused. Providers count arrivals over a sliding minute; requests paced exactly
    #: at the limit arrive a few ms early or late, and at saturation that is a 429 for every other late one.
    headroom: float = Field(0.02, ge=0.0, lt=0.5)
    #: Upper bound on an honoured Retry-After header.
    retry_after_cap_s: float = Field(60.0, gt=0, le=3600)
    #: Successful calls in a row before the adaptive concurrency grows by one.
    increase_after: int = Field(10, ge=1, le=10_000)
    #: A lease not released within this time (a crashed caller) is reclaimed.
    lease_timeout_s: float = Field(900.0, gt=0, le=86_400)


class RetryPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    timeout_s: float = Field(120.0, gt=0, le=3600)
    #: Timeouts, 5xx and connection errors; jittered exponential backoff.
    max_transient_retries: int = Field(5, ge=0, le=100)
    #: A provider outage (every try failing with 5xx or no connection) is waited out for this long, counted from
    #: the call's first transient failure, even past max_transient_retries: runs pause instead of failing.
    outage_patience_s: float = Field(300.0, ge=0, le=86_400)
    #: 429s before moving to the next model in the fallback chain.
    max_rate_limit_retries: int = Field(8, ge=0, le=100)
    backoff_base_s: float = Field(1.0, gt=0, le=600)
    backoff_max_s: float = Field(30.0, gt=0, le=3600)
    #: Answers that fail the schema or domain checks, retried with the error as feedback.
    max_validation_retries: int = Field(2, ge=0, le=10)


class ModelPrice(BaseModel):
    """A model's list price, declared where litellm's cost map has none (a model newer than the map, or one it lists
    at $0): what the estimate, the cost cap and the recorded spend use for it instead."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)
    #: US dollars per million prompt tokens (cached ones too: a bound from above where the provider discounts them).
    input_usd_per_mtok: float = Field(ge=0, le=10_000)
    #: US dollars per million completion tokens.
    output_usd_per_mtok: float = Field(ge=0, le=10_000)
    #: The batch API's share of the price (OpenAI, Anthropic, Vertex and Bedrock charge half).
    batch_discount: float = Field(0.5, gt=0, le=1)

    def cost(self, prompt_tokens: int, completion_tokens: int, batch: bool = False) -> float:
        """USD = (prompt · input + completion · output) / 10⁶, times ``batch_discount`` in provider batch mode."""
        usd = (prompt_tokens * self.input_usd_per_mtok + completion_tokens * self.output_usd_per_mtok) / 1e6
        return usd * (self.batch_discount if batch else 1.0)


class ModelSpec(BaseModel):
    """One model endpoint and how to talk to it."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    model: str
    api_base: str | None = None
    #: Name of the environment variable holding the key (the key itself is never configured).
    api_key_env: str | None = None
    limits: RateLimits = Field(default_factory=RateLimits)
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    #: Tried in order on persistent rate limits or provider errors.
    fallbacks: list[ModelSpec | str] = Field(default_factory=list)
    #: None: the provider's default (strict for real providers, normalize for the local base model).
    weight_policy: WeightPolicy | None = None
    structured_output: StructuredMode | None = None
    #: ``turn``: each turn's schema names only its peers' claims and the critiques it owes, so a constrained decoder
    #: cannot target anything else. ``run``: only the run's universe and memo IDs, so the schema is the same bytes
    #: for every agent and round of a phase; hosted providers put the schema at the head of their prompt cache
    #: (OpenAI before the system message, Anthropic's tools before it), and a per-turn schema would make every call
    #: a cache miss. Validation checks targets exactly either way. None: the provider's default (run for hosted
    #: APIs, turn for the local model).
    schema_scope: SchemaScope | None = None
    #: Fold the system message into the user turn (models without a chat template).
    merge_system: bool | None = None
    #: Send the structured task beside the prompt (``madbench_context`` in the body). Only madbench's
    #: simulated provider reads it; never set it for a real provider.
    send_context: bool = False
    #: The model's price where litellm's cost map has none (or lists $0 for a hosted model); None: the map's.
    price: ModelPrice | None = None
    #: Hedge this model's slow requests (madbench.gateway.hedging): True or False; None, the default, hedges it when
    #: its price is known (every hedge is counted) and never when it is not. A deployment setting: run ids ignore it.
    hedge: bool | None = None

    @property
    def provider(self) -> str:
        return self.model.split("/", 1)[0] if "/" in self.model else "openai"

    @field_validator("api_base")
    @classmethod
    def _http_endpoint(cls, value: str | None) -> str | None:
        return check_api_base(value)

    @field_validator("api_key_env")
    @classmethod
    def _no_key_material(cls, value: str | None) -> str | None:
        return check_api_key_env(value)

    def limit_key(self) -> str:
        """Limits are shared per (provider, model, api_base)."""
        return f"{self.provider}|{self.model}|{self.api_base or ''}"


def as_spec(value: ModelSpec | str) -> ModelSpec:
    return value if isinstance(value, ModelSpec) else ModelSpec(model=value)


def spec_identity(value: ModelSpec | str) -> dict[str, Any] | str:
    """``value`` as a run identity sees it: its deployment fields (and its fallbacks') at their defaults, and a spec
    left with nothing but its model written as that model string, so that a tier given limits or a key variable is
    the same runs as the bare model string."""
    if isinstance(value, str):
        return value
    # A price changes what is counted, and hedging how fast it is answered, not what is answered; both left out
    # entirely, so that ids from before the fields existed stay the same.
    data = value.model_dump(mode="json", exclude=set(UNSEEN_FIELDS)) | {"fallbacks": [spec_identity(f) for f in value.fallbacks]}
    defaults = ModelSpec(model=value.model).model_dump(mode="json", exclude=set(UNSEEN_FIELDS))
    data |= {f: defaults[f] for f in DEPLOYMENT_FIELDS}
    return value.model if data == defaults else data


def _rule_tiers() -> dict[str, ModelSpec | str]:
    return {"deep": "rules/auto", "quick": "rules/auto"}


class ModelRouting(BaseModel):
    """Models per role and phase, by tier name or inline spec."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    tiers: dict[str, ModelSpec | str] = Field(default_factory=lambda: _rule_tiers())
    default: str = "quick"
    roles: dict[str, str | ModelSpec] = Field(default_factory=dict)
    phases: dict[Phase, str | ModelSpec] = Field(default_factory=dict)
    #: Keys like "value.critique".
    role_phases: dict[str, str | ModelSpec] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check_names(self) -> ModelRouting:
        for where, table in (("roles", self.roles), ("phases", self.phases), ("role_phases", self.role_phases)):
            for name, choice in table.items():
                if where == "role_phases" and (name.count(".") != 1 or name.split(".")[1] not in PHASES):
                    raise ValueError(f"role_phases key {name!r} must be ROLE.PHASE with PHASE in {', '.join(PHASES)}")
                self._tier_or_spec(choice, f"{where}.{name}")
        self._tier_or_spec(self.default, "default")
        return self

    def _tier_or_spec(self, choice: str | ModelSpec, where: str) -> ModelSpec:
        if isinstance(choice, ModelSpec):
            return choice
        if choice in self.tiers:
            return as_spec(self.tiers[choice])
        if "/" in choice:
            return ModelSpec(model=choice)
        raise ValueError(f"{where}: {choice!r} is neither a tier ({', '.join(self.tiers)}) nor a model string like openai/gpt-4o-mini")

    def configured(self, role: str, phase: str) -> ModelSpec:
        """The spec routed to ``role`` in ``phase`` as configured: ``rules/auto`` stays itself (``resolve`` answers it
        per role), so two arms on one rule-based routing compare as one model."""
        phases = cast("dict[str, str | ModelSpec]", self.phases)  # keyed by Phase, a str
        for table, name in ((self.role_phases, f"{role}.{phase}"), (self.roles, role), (phases, phase)):
            if name in table:
                return self._tier_or_spec(table[name], name)
        return self._tier_or_spec(self.default, "default")

    def resolve(self, role: str, phase: str) -> ModelSpec:
        spec = self.configured(role, phase)
        if spec.model == "rules/auto":
            spec = spec.model_copy(update={"model": f"rules/{role if phase not in ('judge', 'crit', 'rca') else phase}"})
        return spec

    def named_specs(self) -> list[ModelSpec]:
        """Every model spec the routing names (tiers, roles, phases, role-phases, its default), fallbacks included,
        as written: ``rules/auto`` stays itself, and a tier's name is found through its tier."""
        found: list[ModelSpec] = []
        todo: list[str | ModelSpec] = [*self.tiers.values(), *self.roles.values(), *self.phases.values(),
                                       *self.role_phases.values(), self.default]
        while todo:
            choice = todo.pop()
            spec = choice if isinstance(choice, ModelSpec) else as_spec(choice) if "/" in choice else None
            if spec is None:
                continue  # a tier's name: its spec is among the tiers' values
            found.append(spec)
            todo += spec.fallbacks
        return found

    def identity(self) -> dict[str, Any]:
        """The routing as a run identity sees it: every spec through ``spec_identity``."""
        data = self.model_dump(mode="json")
        for table in ("tiers", "roles", "phases", "role_phases"):
            data[table] = {k: spec_identity(v) for k, v in getattr(self, table).items()}
        return data

    @classmethod
    def single(cls, model: str | ModelSpec) -> ModelRouting:
        """Every role and phase on one model (the CLI's --model)."""
        return cls(tiers={"deep": model, "quick": model}, default="quick")


def spec_cost(provider: Any, spec: ModelSpec, prompt_tokens: int | None, completion_tokens: int | None,
              cached_tokens: int | None = None, cache_write_tokens: int | None = None,
              batch: bool | None = None) -> float | None:
    """US dollars of one attempt of ``spec``: at its declared ``price`` when it has one, else its provider's
    (``Provider.cost``: litellm's cost map; None when unknown, never a made-up 0). ``batch`` None: as the provider
    bills (a provider-batch provider at batch prices, ``bills_batches``)."""
    if spec.price is not None:
        if prompt_tokens is None or completion_tokens is None:
            return None
        at_batch = getattr(provider, "bills_batches", False) if batch is None else batch
        return spec.price.cost(prompt_tokens, completion_tokens, batch=at_batch)
    extra = {} if batch is None else {"batch": batch}
    cost: float | None = provider.cost(spec.model, prompt_tokens, completion_tokens, cached_tokens=cached_tokens,
                                       cache_write_tokens=cache_write_tokens, **extra)
    return cost
