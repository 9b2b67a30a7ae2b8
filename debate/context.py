"""One run's context and the single way an agent turn is asked, validated and traced.

Every turn renders its profile's template, sends it through the gateway with
the phase schema (tickers enumerated), validates it against the scenario and
memo (retrying with feedback inside the gateway), and writes the call and the
validated output to the trace. A turn that cannot be completed raises
``DebateFailure``: the run fails with that reason, nothing is patched up.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from madbench.data.memo import Memo
from madbench.data.scenario import Constraints, Scenario
from madbench.debate.config import AgentConfig, DebateConfig
from madbench.debate.envelope import ANSWER_IN, ENVELOPE_KEY, envelope_outline, unwrap
from madbench.debate.events import LLMCall, LLMFailure, Turn
from madbench.debate.grading import CritScore, RCAVerdict, Scorer
from madbench.debate.profiles import Profile, load_profile
from madbench.debate.request_schemas import enveloped, request_schema, run_schema
from madbench.debate.schemas import Tier
from madbench.debate.task import AgentTask
from madbench.debate.trace import TraceWriter
from madbench.debate.validation import TurnRules, Validated, schema_outline, validate_turn
from madbench.gateway import GatewayFailure, LLMRequest, Message, Totals
from madbench.gateway.accounting import Completion
from madbench.gateway.errors import CallCancelled, OutputInvalid
from madbench.gateway.gateway import Validator, passthrough
from madbench.gateway.models import ModelSpec, SchemaScope

T = TypeVar("T")

#: The request fields a trace records with each call (``LLMCall.request_params``).
REQUEST_PARAMS = {"temperature", "max_tokens", "top_p", "seed", "sample_index"}


class DebateFailure(Exception):
    """A turn could not produce a valid answer within its retries; the run fails with this reason."""


async def gather_turns(*turns: Awaitable[T]) -> list[T]:
    """Run turns concurrently, like ``asyncio.gather``; when one fails, the others are cancelled before the error
    propagates, so a failed run stops calling (and paying for) models and writes nothing after its ``run_end``."""
    tasks = [asyncio.ensure_future(turn) for turn in turns]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)  # wait until every sibling has stopped
        raise


def constraints_text(c: Constraints) -> str:
    parts = [f"weights between 0 and {c.max_weight:g} per ticker", f"at least {c.min_holdings} tickers with weight > 0"]
    if c.max_tickers:
        parts.append(f"at most {c.max_tickers} tickers with weight > 0")
    parts.append("weights plus cash_weight sum to 1 (cash allowed)" if c.allow_cash else
                 "fully invested: weights sum to 1 and cash_weight is 0")
    return "; ".join(parts)


class TurnGateway(Protocol):
    """What a run's context asks of its gateway: a blind run's wraps the gateway to rewrite what it sends."""

    async def complete(self, request: LLMRequest, spec: ModelSpec | str | None = None, validate: Validator = passthrough,
                       account: Totals | None = None) -> Completion: ...

    def schema_scope(self, spec: ModelSpec) -> SchemaScope: ...


@dataclass
class RunContext:
    run_id: str
    scenario: Scenario
    memo: Memo
    constraints: Constraints
    config: DebateConfig
    gateway: TurnGateway
    trace: TraceWriter
    scorer: Scorer
    sample_index: int = 0
    profiles: dict[str, Profile] = field(default_factory=dict)
    judge_profile: Profile | None = None
    memo_ids: set[str] = field(default_factory=set)
    memo_text: str = ""
    #: Where the run's results live (a protocol's persistent state, such as a decision log, goes here).
    workdir: Path | None = None
    #: Realised performance of holdings over an earlier quarter, for protocols that look back at outcomes:
    #: ``(quarter, weights, where) → metrics`` with ``total_return_pct``, ``spy_return_pct``,
    #: ``excess_return_pct`` and ``sharpe``. The runner supplies it from the backtest (the debate never imports it).
    past_performance: Callable[[Any, dict[str, float], str], Any] | None = None
    #: This run's calls, tokens and cost: the gateway credits every call asked through ``complete`` here (the
    #: gateway's own totals are shared by every run on it). One ``llm_call`` or ``llm_failure`` event each.
    account: Totals = field(default_factory=Totals)
    #: The answer hashes this run's earlier attempts recorded, by cache key (``events.recorded_answers`` of the
    #: trace the runner has already read): a resumed run that the cache serves a different answer for one of them
    #: fails (``complete``).
    recorded_answers: dict[str, set[str]] = field(default_factory=dict)
    _run_schema: dict[str, Any] | None = field(default=None, init=False, repr=False)

    def __post_init__(self):
        for a in self.config.agents:
            self.profiles[a.agent_id] = load_profile(a.role, a.tier)
        if self.config.aggregation == "judge":
            self.judge_profile = load_profile("judge", self.config.judge_tier)
        self.memo_ids = self.memo.evidence_ids
        self.memo_text = self.memo.text

    @property
    def universe(self) -> list[str]:
        return list(self.scenario.tickers)

    def turn_rules(self, peer_claims: dict[str, set[str]] | None = None,
                   owed_responses: list[tuple[str, str]] | None = None, tier: Tier = "causal") -> TurnRules:
        return TurnRules(self.universe, self.constraints, self.memo_ids, peer_claims or {},
                         self.config.require_known_evidence, owed_responses, tier)

    def run_schema(self) -> dict[str, Any]:
        """The envelope every enveloped turn of this run is sent (request_schemas.run_schema), built once."""
        if self._run_schema is None:
            tiers = {a.tier for a in self.config.agents} | ({self.config.judge_tier} if self.judge_profile else set())
            self._run_schema = run_schema(self.turn_rules(), tiers)
        return self._run_schema

    def base_task(self, agent_id: str, role: str, phase: str, round_: int, beta: float, **kw) -> AgentTask:
        return AgentTask(agent_id=agent_id, role=role, phase=phase, universe=self.universe, constraints=self.constraints,
                         evidence=self.memo.items, beta=beta, round=round_, **kw)

    async def complete(self, *, who: str, role: str, phase: str, round_: int, system: str, user: str,
                        schema: dict | None, context: dict, temperature: float, validate: Callable[[str, Any], Any],
                        label: str) -> Completion:
        spec = self.config.models.resolve(role, phase)
        max_tokens = getattr(self.config.max_tokens, phase, None)
        request = LLMRequest(model=spec.model, messages=[Message(role="system", content=system), Message(role="user", content=user)],
                             temperature=temperature, max_tokens=max_tokens, response_schema=schema,
                             sample_index=self.sample_index, context=context)
        try:
            c = await self.gateway.complete(request, spec, validate, account=self.account)
        except GatewayFailure as exc:
            self.trace.write(LLMFailure(agent=who, phase=phase, round=round_, label=label, reason=exc.reason,
                            attempts=exc.attempts))
            raise DebateFailure(f"{who} {label} (round {round_}): {exc.reason}") from None
        except CallCancelled as exc:
            if any(a.get("cost_usd") for a in exc.attempts):  # what the budget counted is in the trace too
                self.trace.write(LLMFailure(agent=who, phase=phase, round=round_, label=label,
                                            reason="cancelled: the run stopped", attempts=exc.attempts))
            raise
        self.trace.write(LLMCall(agent=who, phase=phase, round=round_, label=label, key=c.key,
                        messages_hash=c.messages_hash, model_requested=c.model_requested, model_used=c.model_used,
                        model_served=c.model_served, request_params=request.model_dump(include=REQUEST_PARAMS),
                        provider=ModelSpec(model=c.model_used).provider, is_llm=c.is_llm, cached=c.cached, prompt_tokens=c.prompt_tokens,
                        completion_tokens=c.completion_tokens, cost_usd=c.cost_usd, latency_s=round(c.latency_s, 4),
                        overhead_ms=round(c.overhead_s * 1e3, 3), validation_retries=c.validation_retries,
                        weight_policy=c.weight_policy, attempts=[a.model_dump() for a in c.attempts], response=c.content,
                        answer_sha256=c.answer_sha256))
        recorded = self.recorded_answers.get(c.key)
        if c.cached and recorded and c.answer_sha256 not in recorded:
            # The checksum of a cache entry can be recomputed by whoever edits it; the trace's hash cannot. The
            # served answer is traced above (what the run was given), then the run fails. Fresh answers (cache off,
            # an entry pruned) may differ legitimately and are not checked.
            raise DebateFailure(f"{who} {label} (round {round_}): the cache served an answer (sha256 {c.answer_sha256[:12]}) "
                                f"other than the one this run recorded for the same request (sha256 {min(recorded)[:12]}), "
                                f"cache key {c.key}: the entry was edited or replaced since. `madbench cache verify` lists "
                                "such entries and its --drop deletes them, so that the call is asked again")
        return c

    async def ask(self, agent: AgentConfig | None, phase: str, round_: int, task: AgentTask, variables: dict[str, Any],
                  peer_claims: dict[str, set[str]] | None = None,
                  extra_check: Callable[[Validated], None] | None = None, label: str | None = None) -> Validated:
        """Ask an agent (or the judge, when ``agent`` is None) for one validated turn."""
        profile = self.profiles[agent.agent_id] if agent else self.judge_profile
        if profile is None:
            raise RuntimeError(f"config {self.config.name}: the judge was asked, but a config without a judge has no judge profile (a bug)")
        who, role = (agent.agent_id, agent.role) if agent else ("judge", "judge")
        owed = [(rc.from_agent, rc.item.target_claim) for rc in task.critiques_received] if phase == "revise" else None
        tier = agent.tier if agent else self.config.judge_tier  # picks the output schema (debate.schemas.schema_for)
        rules = self.turn_rules(peer_claims, owed, tier)
        task = task.model_copy(update={"tier": tier})
        schema = request_schema(phase, rules)  # the prompt's outline names this turn's own targets
        # Sent with the run's envelope, the schema that leads a provider's prompt cache is the same for every call
        # (request_schemas.run_schema); the answer is then this phase's object under ENVELOPE_KEY.
        wrapped = enveloped(phase, self.gateway.schema_scope(self.config.models.resolve(role, phase)))
        outline = envelope_outline(schema_outline(schema)) if wrapped else schema_outline(schema)
        # The system message is the run's shared prefix (debate.profiles): the same bytes for every agent and phase,
        # so a provider's prompt cache serves it after the first call; the user message is this turn's own part.
        shared = {"memo": self.memo_text, "universe": self.universe, "constraints": constraints_text(self.constraints)}
        system = profile.render_context(**shared)
        user = profile.user_prompt(phase, **shared, agent_id=who, role=role, round=round_, schema=outline, **variables)

        def validate(content: str, spec) -> Validated:
            v = validate_turn(phase, unwrap(content) if wrapped else content, rules, spec.weight_policy or "strict")
            if extra_check:
                extra_check(v)
            return v

        c = await self.complete(who=who, role=role, phase=phase, round_=round_, system=system, user=user,
                                 schema=self.run_schema() if wrapped else schema,
                                 context={**task.model_dump(mode="json"), **({ANSWER_IN: ENVELOPE_KEY} if wrapped else {})},
                                 temperature=self.config.temperature,
                                 validate=validate, label=label or phase)
        v: Validated = c.value
        self.trace.write(Turn(agent=who, role=role, phase=phase, round=round_, label=label or phase,
                        output=v.value.model_dump(mode="json"), weights=v.weights,
                        cash=getattr(v.value, "cash_weight", None), policy_notes=v.notes, model=c.model_used,
                        provider=ModelSpec(model=c.model_used).provider, is_llm=c.is_llm))
        return v

    async def crit(self, agent: AgentConfig, round_: int, argument, received: list[tuple[str, Any]],
                   label: str = "crit", before=None) -> CritScore:
        return await self.scorer.crit(self, agent, round_, argument, received, label, before=before)

    async def rca(self, agent: AgentConfig, phase: str, round_: int, before, after,
                  received: list[tuple[str, Any]]) -> RCAVerdict:
        return await self.scorer.rca(self, agent, phase, round_, before, after, received)


def raise_if(problems: list[str]) -> None:
    if problems:
        raise OutputInvalid("; ".join(problems))
