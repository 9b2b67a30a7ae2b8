"""The paper's protocol (PAPER_NOTES §2–3): propose, then T rounds of critique → revise → CRIT → PID,
with interventions at their hook points, then a judge or the mean.

``PaperDebate`` holds one run's state and has one method per phase. Interventions are hooks
(``madbench.debate.interventions.hooks``): at each hook point the debate calls every configured intervention
that implements that hook, in config order, through the registry.

Agents within a phase run concurrently; their events are written in agent
order once the phase completes, so a replay writes the same trace.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, ConfigDict

from madbench.debate.config import AgentConfig, DebateConfig
from madbench.debate.context import RunContext, gather_turns
from madbench.debate.control import PIDState, PIDStep, cash_spread, jsd, pairwise_js, pid_step
from madbench.debate.events import ControllerStep, Divergence, EarlyStop
from madbench.debate.grading import CritScore
from madbench.debate.interventions import INTERVENTIONS, configured, hooks_at, max_retries
from madbench.debate.interventions.hooks import HOOKS, RevisionRequest
from madbench.debate.outcome import Outcome
from madbench.debate.protocols.plan import Call, Check, Firing, Plan, Step
from madbench.debate.protocols.protocol import Protocol
from madbench.debate.schemas import BasicCritique, BasicCritiqueItem, BasicProposal, Claim, Critique, CritiqueItem, Proposal
from madbench.debate.task import ReceivedCritique
from madbench.debate.validation import Validated, cap_weights


class Options(BaseModel):
    """The paper protocol's knobs are the config's own fields (rounds, pid, interventions …)."""
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


def scores_proposals(cfg: DebateConfig) -> bool:
    """With no debate round, CRIT grades the proposals (round 0) when rounds are scored."""
    return cfg.rounds == 0 and cfg.score_rounds


def judged(cfg: DebateConfig) -> bool:
    return cfg.aggregation == "judge"


def _firing(name: str, p: BaseModel) -> Firing:
    """The intervention's chance to act, at the rates its module names (it fires; it fires again)."""
    rates = INTERVENTIONS[name].FIRING_RATES
    return Firing(name, rates[0], max_retries(name, p), rates[1] if len(rates) > 1 else None)


def _turn(a: AgentConfig, phase: str, variant: str = "", check: Check | None = None) -> Call:
    return Call(kind=phase, role=a.role, phase=phase, agent=a.agent_id, variant=variant, check=check)


def _revision(a: AgentConfig, checks: list[tuple[str, BaseModel]], variant: str = "") -> Call:
    """A revise turn and the check of every ``after_revision`` intervention, which re-asks it nudged on a failure."""
    if len(checks) > 1:
        raise ValueError(f"the call plan models one after_revision check, got {', '.join(n for n, _ in checks)}")
    check = None
    for name, p in checks:
        phase = INTERVENTIONS[name].CHECK_PHASE
        check = Check(_turn(a, phase), _turn(a, "revise", "nudged"), _firing(name, p))
    return _turn(a, "revise", variant, check)


def plan(cfg: DebateConfig, desks: tuple[str, ...] = ()) -> Plan:
    """propose → [CRIT on the proposals, ``scores_proposals``] → each round: critique (the agents with targets) →
    revise (each revision checked by the ``after_revision`` interventions) → each ``after_revise_round``
    intervention's re-revision of every agent → [CRIT → each ``after_crit`` intervention's re-revision and re-score,
    one agent after another] → [judge]: the hook points of ``PaperDebate``."""
    agents, active = cfg.agents, configured(cfg.interventions)
    at = {point: [(n, p) for n, p in active if hasattr(INTERVENTIONS[n], point)] for point in HOOKS}
    steps = [Step("propose", tuple(_turn(a, "propose") for a in agents))]
    if scores_proposals(cfg):
        steps.append(Step("crit", tuple(_turn(a, "crit", "proposal") for a in agents)))
    if cfg.rounds:
        steps.append(Step("critique", tuple(_turn(a, "critique") for a in agents if cfg.targets_of(a.agent_id)), each_round=True))
        steps.append(Step("revise", tuple(_revision(a, at["after_revision"]) for a in agents), each_round=True))
        for name, p in at["after_revise_round"]:
            if len(agents) >= getattr(INTERVENTIONS[name], "MIN_AGENTS", 1):
                steps.append(Step(name, tuple(_revision(a, at["after_revision"], "nudged") for a in agents), each_round=True,
                                  when=_firing(name, p)))
        if cfg.score_rounds:
            steps.append(Step("crit", tuple(_turn(a, "crit") for a in agents), each_round=True))
            for name, p in at["after_crit"]:
                chain = tuple(c for a in agents for c in (_revision(a, at["after_revision"], "nudged"), _turn(a, "crit")))
                steps.append(Step(name, chain, each_round=True, sequential=True, when=_firing(name, p)))
    if judged(cfg):
        steps.append(Step("judge", (Call(kind="judge", role="judge", phase="judge", agent="judge"),)))
    return Plan(protocol="paper", prompts="profiles", rounds=cfg.rounds, steps=tuple(steps))


def _peer_view(ctx: RunContext, outputs: dict[str, Validated], agent: AgentConfig) -> list[dict]:
    roles = {a.agent_id: a.role for a in ctx.config.agents}
    return [{"agent_id": t, "role": roles[t], "output": outputs[t].value.model_dump_json(indent=1)}
            for t in ctx.config.targets_of(agent.agent_id)]


def _divergence(ctx: RunContext, phase: str, round_: int, outputs: dict[str, Validated]) -> float:
    ids = sorted(outputs)
    weights = [outputs[a].held_weights for a in ids]
    cash = [outputs[a].cash_weight for a in ids]
    value = jsd(weights, cash)
    ctx.trace.write(Divergence(phase=phase, round=round_, jsd=value,
                   pairwise=pairwise_js({a: outputs[a].held_weights for a in ids}), cash_spread=cash_spread(cash)))
    return value


def _jsd(outputs: dict[str, Validated], ids: list[str]) -> float:
    return jsd([outputs[a].held_weights for a in ids], [outputs[a].cash_weight for a in ids])


def _claims(turn: Validated) -> list[Claim]:
    """The claims of a proposal or a revision (a basic-tier one makes none)."""
    if not isinstance(turn.value, Proposal | BasicProposal):
        raise TypeError(f"a {type(turn.value).__name__} answer is no argument with claims")
    return turn.value.claims


def mean_allocation(ctx: RunContext, finals: dict[str, Validated]) -> tuple[dict[str, float], float, list[str]]:
    """Unweighted mean of the final allocations, made feasible for max_tickers if the union exceeds it."""
    n = len(finals)
    weights = {t: sum(v.held_weights[t] for v in finals.values()) / n for t in ctx.universe}
    cash = sum(v.cash_weight for v in finals.values()) / n
    notes = []
    c = ctx.constraints
    held = [t for t in ctx.universe if weights[t] > 0]
    if c.max_tickers is not None and len(held) > c.max_tickers:
        keep = sorted(held, key=lambda t: (-weights[t], t))[: c.max_tickers]
        dropped = sorted(set(held) - set(keep))
        invested = sum(weights[t] for t in keep)
        weights = cap_weights({t: (weights[t] / invested * (1 - cash) if t in keep else 0.0) for t in ctx.universe}, c.max_weight)
        notes.append(f"mean held {len(held)} tickers > max_tickers {c.max_tickers}: dropped {', '.join(dropped)} and rescaled")
    return weights, cash, notes


class PaperDebate:
    """One run of the paper protocol: the per-run state, one method per phase."""

    def __init__(self, ctx: RunContext):
        self.ctx, self.cfg = ctx, ctx.config
        self.agents: list[AgentConfig] = ctx.config.agents
        active = configured(self.cfg.interventions)
        self._hooks = {point: hooks_at(point, active) for point in HOOKS}
        self.state = PIDState(beta=self.cfg.pid.beta0)
        self.round = self.rounds_run = 0
        self.current: dict[str, Validated] = {}
        self.revisions: dict[str, Validated] = {}
        self.received: dict[str, list[tuple[str, CritiqueItem | BasicCritiqueItem]]] = {}
        self.js_in = self.js_rev = 0.0
        self.js_log: dict[str, float] = {}
        self.rho_by_round: list[float] = []
        self.interventions: list[dict] = []

    @property
    def beta(self) -> float:
        return self.state.beta

    @property
    def ids(self) -> list[str]:
        return [a.agent_id for a in self.agents]

    def agent(self, agent_id: str) -> AgentConfig:
        return next(a for a in self.agents if a.agent_id == agent_id)

    async def run(self) -> Outcome:
        await self.propose()
        for t in range(1, self.cfg.rounds + 1):
            if await self.debate_round(t):
                break
        return await self.aggregate()

    # -- propose

    async def propose(self) -> None:
        outs = await gather_turns(*[self._propose(a) for a in self.agents])
        self.current = dict(zip(self.ids, outs, strict=True))
        self.js_log["propose"] = _divergence(self.ctx, "propose", 0, self.current) if len(self.agents) > 1 else 0.0
        if scores_proposals(self.cfg):
            scores = await gather_turns(*[self.ctx.crit(a, 0, self.current[a.agent_id].value, []) for a in self.agents])
            self.rho_by_round.append(sum(s.rho for s in scores) / len(scores))

    async def _propose(self, a: AgentConfig) -> Validated:
        # Round 0 is the proposals (their JSD and, with rounds: 0, their CRIT carry round 0 too); rounds 1..T debate.
        task = self.ctx.base_task(a.agent_id, a.role, "propose", 0, self.beta)
        return await self.ctx.ask(a, "propose", 0, task, {})

    # -- one round: critique → revise → [after_revise_round] → CRIT → [after_crit] → controller

    async def debate_round(self, t: int) -> bool:
        """Run round ``t``; True when the controller stops the debate early."""
        self.round = self.rounds_run = t
        self.js_in = _jsd(self.current, self.ids) if len(self.agents) > 1 else 0.0
        await self.critique_round(t)
        await self.revise_round(t)
        for hook, p in self._hooks["after_revise_round"]:
            await hook(self, p, t)
        step = await self.score_round(t)
        self.js_log[f"revise_{t}"] = self.js_rev
        self.current = self.revisions
        return self.early_stop(t, step)

    async def critique_round(self, t: int) -> None:
        self.received = {a.agent_id: [] for a in self.agents}
        crits = await gather_turns(*[self.critique(a, t) for a in self.agents])
        for a, c in zip(self.agents, crits, strict=True):
            if c is None:
                continue
            if not isinstance(c.value, Critique | BasicCritique):
                raise TypeError(f"{a.agent_id}'s critique turn answered a {type(c.value).__name__}")
            for item in c.value.critiques:
                self.received[item.target_agent].append((a.agent_id, item))

    async def critique(self, a: AgentConfig, t: int) -> Validated | None:
        targets = self.cfg.targets_of(a.agent_id)
        if not targets:
            return None
        current = self.current
        peer_claims = {p: {c.claim_id for c in _claims(current[p])} for p in targets}
        task = self.ctx.base_task(a.agent_id, a.role, "critique", t, self.beta, own=current[a.agent_id].value,
                                  peers={p: current[p].value for p in targets})
        variables = {"peers": _peer_view(self.ctx, current, a), "tone": self.ctx.profiles[a.agent_id].tone(self.beta)}
        return await self.ctx.ask(a, "critique", t, task, variables, peer_claims=peer_claims)

    async def revise_round(self, t: int) -> None:
        outs = await gather_turns(*[self.revise(a, [], "revise") for a in self.agents])
        self.revisions = dict(zip(self.ids, outs, strict=True))
        self.js_rev = self.revision_divergence(t)

    async def revise(self, a: AgentConfig, nudges: list[str], label: str,
                     extra_check: Callable[[Validated], None] | None = None, limits: dict | None = None) -> Validated:
        """One agent's revise turn in the current round, then every ``after_revision`` hook."""
        mine = self.received[a.agent_id]
        own = self.current[a.agent_id].value
        task = self.ctx.base_task(a.agent_id, a.role, "revise", self.round, self.beta, own=own,
                                  critiques_received=[ReceivedCritique(from_agent=f, item=i) for f, i in mine],
                                  nudges=nudges, revision_limits=limits)
        variables = {"own": own.model_dump_json(indent=1), "nudges": nudges,
                     "critiques": [{"from_agent": f, **i.model_dump()} for f, i in mine]}
        request = RevisionRequest(agent=a, round=self.round, task=task, variables=variables, label=label,
                                  extra_check=extra_check)
        out = await self.ask_revision(request)
        for hook, p in self._hooks["after_revision"]:
            out = await hook(self, p, request, out)
        return out

    async def ask_revision(self, request: RevisionRequest) -> Validated:
        return await self.ctx.ask(request.agent, "revise", request.round, request.task, request.variables,
                                  extra_check=request.extra_check, label=request.label)

    def revision_divergence(self, round_: int) -> float:
        """JS divergence of this round's revisions, traced (0 for a single agent, untraced)."""
        return _divergence(self.ctx, "revise", round_, self.revisions) if len(self.agents) > 1 else 0.0

    async def score_round(self, t: int) -> PIDStep | None:
        """CRIT on the revisions, the ``after_crit`` hooks, then the controller (None when rounds are unscored)."""
        if not self.cfg.score_rounds:
            return None
        got = await gather_turns(*[self.crit(a, t) for a in self.agents])
        scores: dict[str, CritScore] = {s.agent_id: s for s in got}
        for hook, p in self._hooks["after_crit"]:
            await hook(self, p, t, scores)
        return self.controller_step(t, scores)

    async def crit(self, a: AgentConfig, t: int, label: str = "crit") -> CritScore:
        """CRIT on ``a``'s revision in round ``t``, shown beside what it revised (its proposal in round 1, its
        previous revision after) and the critiques it received, as the paper's CRIT judge sees it (App. B.15)."""
        return await self.ctx.crit(a, t, self.revisions[a.agent_id].value, self.received[a.agent_id], label,
                                   before=self.current[a.agent_id].value)

    def controller_step(self, t: int, scores: dict[str, CritScore]) -> PIDStep:
        rho_bar = sum(s.rho for s in scores.values()) / len(scores)
        self.rho_by_round.append(rho_bar)
        # s_t compares this round's revisions with what they revised: the proposals in round 1 (control.py).
        self.state, step = pid_step(self.state, rho_bar, self.js_rev, self.cfg.pid, js_before=self.js_in)
        self.ctx.trace.write(ControllerStep(round=t, step=step.model_dump(), state=self.state.model_dump()))
        return step

    def early_stop(self, t: int, step: PIDStep | None) -> bool:
        if step is None or not step.early_stop:
            return False
        self.ctx.trace.write(EarlyStop(round=t, reason=f"converged: ρ̄ {step.rho_bar:.3f} ≥ ρ*, JS {step.js:.4f} < ε "
                                                      f"and |Δρ̄| < Δρ"))
        return True

    # -- aggregation

    async def aggregate(self) -> Outcome:
        if judged(self.cfg):
            weights, cash, notes = await self.judge()
            method = "judge"
        else:
            weights, cash, notes = mean_allocation(self.ctx, self.current)
            method = "mean" if len(self.agents) > 1 else "single"
        rho = self.rho_by_round
        return Outcome(weights=weights, cash=cash, method=method, rounds_run=self.rounds_run,
                       rho_bar=rho[-1] if rho else None, rho_by_round=rho, js=self.js_log,
                       interventions=self.interventions, notes=notes)

    async def judge(self) -> tuple[dict[str, float], float, list[str]]:
        roles = {a.agent_id: a.role for a in self.agents}
        finals = [{"agent_id": k, "role": roles[k], "output": v.value.model_dump_json(indent=1)} for k, v in self.current.items()]
        task = self.ctx.base_task("judge", "judge", "judge", self.rounds_run, self.beta,
                                  peers={k: v.value for k, v in self.current.items()})
        decision = await self.ctx.ask(None, "judge", self.rounds_run, task, {"finals": finals})
        return decision.held_weights, decision.cash_weight, decision.notes


async def run(ctx: RunContext) -> Outcome:
    return await PaperDebate(ctx).run()


__all__ = ["PaperDebate", "mean_allocation", "plan", "run"]


class Paper(Protocol):
    """The paper's debate: the config's agents, rounds, judge and interventions."""
    Options = Options
    prompts = "profiles"
    needs_agents = True
    runs_interventions = True

    def plan(self, cfg: DebateConfig, desks: tuple[str, ...] = ()) -> Plan:
        return plan(cfg, desks)

    async def run(self, ctx: RunContext) -> Outcome:
        return await run(ctx)

    def prompt_hashes(self, name: str) -> dict[str, str]:
        """None of its own: its prompts are the role profiles, hashed per agent with every run's."""
        return {}
