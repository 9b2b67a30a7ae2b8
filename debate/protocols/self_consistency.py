"""`self_consistency`: independent samples of the config's agents' proposals, combined (a compute baseline).

Self-consistency (Wang et al., "Self-Consistency Improves Chain of Thought Reasoning in Language Models", ICLR
2023) samples one prompt N times and keeps the majority answer; against a debate, the baseline that isolates the
debate is a vote over the *same agents'* independent answers (arXiv 2508.17536). So the samples are the config's
agents' ``propose`` prompts, unchanged, drawn round-robin (draw i is agent i mod n, so every role is drawn within one
of the others); they differ only in their sample index (so each has its own cache key), and spend no token on
critique, CRIT or a judge.

How many draws:

* ``samples: N``: N draws, all at once.
* ``targets`` (scenario id → the matched debate's spend on it, in ``match``'s unit; the batch derives it from the
  matched config's runs with ``match_generated_of``): draw until the run's spend comes nearest that target. The
  unit is the scenario: a fixed N matches a debate only on average (a debate's length varies by scenario and so
  does a proposal's, by 0.91–1.21x of the tokens in a measured case), while stopping on the scenario's own count
  leaves an error of at most half a draw. Draws go in waves (``next_wave``): as many as the tokens still owed would
  take at the mean draw so far, halved (a short first draw must not send a wave past the target), so that
  the last draws go one by one and the run stops where one more
  draw would take it further from the target than stopping does.

What the spend is measured in (``match``), on both sides: the debate's is every call of its run (calls.parquet:
proposals, critiques, revisions, and its judge and CRIT scoring calls, which steer its revisions), the baseline's
every draw (it calls nothing else).

* ``generated`` (the default): completion tokens, what sampling buys (a proposal's prompt is the memo, the same
  for every draw).
* ``total``: prompt + completion tokens. A draw's prompt is the memo, so a total-matched baseline draws far fewer
  samples than a generated-matched one, but sees as many tokens as the debate read and wrote.
* ``cost``: dollars, what the answers cost at the model's price (a cached answer at what it cost when first asked:
  the draws the debate already made count, as they do in the debate's own cost). A model without a price cannot be
  matched on cost: the run fails naming the call.

Each way, the other two are reported beside it (runs.parquet, ``madbench stats``).

Sample ``j`` of agent ``a`` at replicate ``k`` asks with sample index ``k + j·SAMPLE_STRIDE``: each agent's draw 0 is
its own proposal in the debate at replicate k (the same request, one cache entry), and no two samples of two
replicates coincide.

Combining, with w_{i,t} the weight sample i gives ticker t:

* ``mean``: w_t = (1/N) Σ_i w_{i,t} (cash alike), trimmed to ``max_tickers`` as the paper's mean is
  (``paper.mean_allocation``).
* ``majority``: the medoid proposal under L1, argmin_i Σ_j Σ_t |w_{i,t} − w_{j,t}| (cash a coordinate; ties to the
  earliest draw). A vote over portfolios: the proposal nearest all the others, so the held portfolio is one a
  sample proposed, and valid as that sample was (Kaufman & Rousseeuw, "Clustering by means of medoids", 1987).
* ``median``: the per-ticker median m_t = median_i w_{i,t}, made feasible. For every threshold x, "at least x on
  t" wins a majority of the samples exactly when x ≤ m_t (odd N): the median is the per-ticker majority vote on an
  ordered answer (Black, "On the Rationale of Group Decision-making", J. Political Economy 56(1), 1948), but the
  tickers' medians together can be a portfolio no sample proposed. The held medians are rescaled to 1 − median cash;
  when fewer tickers are held than the constraints need (``min_holdings``, and enough names to carry
  ``max_weight``), the next tickers by vote share (then mean weight, then name) join at their mean weight; over
  ``max_tickers``, the largest medians stay.

A rule-based analyst (``rules/…``) is deterministic: N samples of it would collapse to one. Each sampled task
therefore carries its sample (``SampledTask.sample``: index and temperature), which an LLM never sees (the
context is not sent, nor part of the cache key) and the rule-based answerer uses to draw that sample
(``madbench.scoring.rule_answers``); at temperature 0 the samples are identical, and ``x_distinct_samples`` says so.
"""

from __future__ import annotations

import copy
import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from madbench.data.errors import InputError
from madbench.data.scenario import Constraints
from madbench.debate.config import DebateConfig
from madbench.debate.context import RunContext, gather_turns
from madbench.debate.control import cash_spread, jsd, pairwise_js
from madbench.debate.events import Divergence
from madbench.debate.outcome import Outcome
from madbench.debate.protocols.paper import mean_allocation
from madbench.debate.protocols.plan import Call, Plan, Step
from madbench.debate.protocols.protocol import Protocol
from madbench.debate.task import AgentTask
from madbench.debate.validation import Validated, cap_weights
from madbench.gateway.accounting import Completion, Totals

P = "self_consistency"
#: Sample i of replicate k asks with sample index k + i·SAMPLE_STRIDE (replicate indices stay below it).
SAMPLE_STRIDE = 1_000_000
#: The most samples one run may draw (a bound on cost; a debate of 20 rounds is about 60 calls per agent).
MAX_SAMPLES = 200
#: What a matched run's spend is measured in (``Options.match``), and the name its target has in the run's extras
#: (``Outcome.extras``: runs.parquet's ``x_target_…`` column).
MATCH_UNITS = {"generated": "target_generated_tokens", "total": "target_total_tokens", "cost": "target_cost_usd"}
MatchUnit = Literal["generated", "total", "cost"]


class Options(BaseModel):
    """How many draws: ``samples`` N; ``match_tokens_of`` a debate config with a ``pilot`` results dir (the batch
    resolves N from mean tokens per run); or ``match_generated_of`` (the batch resolves ``targets``, each scenario's
    spend in ``match``'s unit in that config's runs, in this batch or, generated tokens only, in a ``pilot``)."""
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    samples: int | None = Field(None, ge=1, le=MAX_SAMPLES)
    combine: Literal["mean", "majority", "median"] = "mean"
    #: A config name in the pilot's runs.parquet: N = its mean tokens per run ÷ its mean tokens per proposal.
    match_tokens_of: str | None = None
    #: A config name: each scenario's draws stop at that config's run's spend on the scenario (the same replicate; in
    #: ``match``'s unit, every call of the run) in this batch (``madbench run`` runs it first: runner/matching.py), or
    #: its generated tokens in ``pilot`` if given.
    match_generated_of: str | None = None
    #: The pilot's results directory (relative to this config file), read when the batch is loaded.
    pilot: str | None = None
    #: What the draws are matched on: the matched run's generated (completion) tokens, its total (prompt +
    #: completion) tokens, or its cost in dollars; ``targets`` are in this unit.
    match: MatchUnit = "generated"
    #: Scenario id → the spend (in ``match``'s unit) a run on it draws up to (resolved from the pilot, or given).
    targets: dict[str, int | float] | None = None

    @model_validator(mode="after")
    def _one_way(self):
        matched = [k for k in ("match_tokens_of", "match_generated_of") if getattr(self, k) is not None]
        if len(matched) > 1:
            raise ValueError("give match_tokens_of or match_generated_of, not both")
        if (self.match_tokens_of is not None) != (self.pilot is not None) and self.match_generated_of is None:
            raise ValueError("match_tokens_of and pilot go together: the config to match and the results dir that ran it")
        ways = [w for w, on in (("samples", self.samples is not None), ("a match", bool(matched)),
                                ("targets", self.targets is not None)) if on]
        if len(ways) != 1:
            raise ValueError("give one of samples (N), match_tokens_of or match_generated_of with pilot, or targets "
                             f"(got {', '.join(ways) or 'none'})")
        if self.match != "generated" and self.match_generated_of is None and self.targets is None:
            raise ValueError(f"match: {self.match} says what match_generated_of or targets are measured in: give one "
                             "of them")
        if self.match != "generated" and self.pilot is not None:
            raise ValueError(f"match: {self.match} is matched within the batch (runner/matching.py); a pilot gives "
                             "generated tokens only: drop pilot, or match: generated")
        return self


class SampleDraw(BaseModel):
    model_config = ConfigDict(extra="forbid")
    index: int
    temperature: float


class SampledTask(AgentTask):
    """A propose task that names its sample: the rule-based answerer draws from it (an LLM never sees it)."""
    sample: SampleDraw


def config_problems(cfg: DebateConfig) -> list[str]:
    """What a self_consistency config sets that the protocol would silently ignore."""
    problems = []
    if not cfg.agents:
        problems.append("agents: self_consistency samples the config's agents, and it has none")
    if cfg.rounds != 0 or cfg.aggregation != "mean" or cfg.interventions:
        problems.append("self_consistency has no rounds, judge or interventions: set rounds: 0, aggregation: mean, "
                        "interventions: []")
    return problems


def samples_for(tokens_per_run: float, tokens_per_sample: float) -> int:
    """N whose tokens come nearest a run's: round(tokens per run ÷ tokens per sample), at least 1."""
    if not (tokens_per_sample > 0 and math.isfinite(tokens_per_run)):
        raise ValueError(f"cannot match {tokens_per_run} tokens per run with {tokens_per_sample} per sample")
    return max(1, round(tokens_per_run / tokens_per_sample))


def sample_index(replicate: int, i: int) -> int:
    if replicate >= SAMPLE_STRIDE:
        raise ValueError(f"replicate {replicate}: self_consistency needs replicate indices below {SAMPLE_STRIDE:,}")
    return replicate + i * SAMPLE_STRIDE


def vote_shares(samples: list[dict[str, float]], universe: list[str]) -> dict[str, float]:
    """The share of samples holding each ticker (weight > 0)."""
    return {t: sum(1 for s in samples if s.get(t, 0.0) > 0) / len(samples) for t in universe}


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def medoid(samples: list[dict[str, float]], cash: list[float], universe: list[str]) -> int:
    """The index of the L1 medoid: argmin_i Σ_j (Σ_t |w_{i,t} − w_{j,t}| + |c_i − c_j|), the earliest on a tie."""
    vec = [[s.get(t, 0.0) for t in universe] + [c] for s, c in zip(samples, cash, strict=True)]
    total = [sum(sum(abs(x - y) for x, y in zip(a, b, strict=True)) for b in vec) for a in vec]
    return min(range(len(vec)), key=lambda i: (total[i], i))


def next_wave(target: float, spent: float, drawn: int, cap: int) -> int:
    """Draws to ask next toward a ``target`` spend (generated tokens, total tokens or dollars), ``spent`` on ``drawn``
    draws so far: 0 once one more draw (at the mean so far, m) would land further from the target than stopping, i.e.
    when spent + m/2 ≥ target; else ⌊0.5 · (target − spent)/m⌋, at least 1 and at most ``cap`` − ``drawn``."""
    if drawn >= cap:
        return 0
    if drawn == 0:
        return 1
    m = spent / drawn
    if m <= 0 or spent + m / 2 >= target:
        return 0
    return max(1, min(cap - drawn, int(0.5 * (target - spent) / m)))


class DrawSpend(Totals):
    """The draws' own account, which credits the run's as well (the run's totals stay what the gateway counts), and
    keeps what their answers cost, a cached answer at its first cost (``Totals.cost_usd`` counts only what was paid
    now): the same measure as the matched run's calls.parquet ``cost_usd``."""
    answered_usd: float = 0.0
    unpriced: list[str] = []
    _run: Totals = PrivateAttr()

    @classmethod
    def crediting(cls, run: Totals) -> DrawSpend:
        spend = cls()
        spend._run = run
        return spend

    def add(self, c: Completion) -> None:
        super().add(c)
        self._run.add(c)
        if c.cost_usd is None:
            self.unpriced.append(c.model_used)
        else:
            self.answered_usd += c.cost_usd

    def add_failure(self, attempts) -> None:
        super().add_failure(attempts)
        self._run.add_failure(attempts)

    def spent(self, match: MatchUnit) -> float:
        """What the draws spent so far, in ``match``'s unit."""
        if match == "generated":
            return self.completion_tokens
        if match == "total":
            return self.prompt_tokens + self.completion_tokens
        return self.answered_usd


def median_allocation(samples: list[dict[str, float]], cash: list[float], universe: list[str],
                      c: Constraints) -> tuple[dict[str, float], float, list[str]]:
    """The per-ticker median allocation made feasible (see the module docstring): (weights, cash, notes)."""
    n = len(samples)
    med = {t: _median([s.get(t, 0.0) for s in samples]) for t in universe}
    mean = {t: sum(s.get(t, 0.0) for s in samples) / n for t in universe}
    share = vote_shares(samples, universe)
    c_med = _median(cash) if c.allow_cash else 0.0
    need = min(len(universe), max(c.min_holdings, math.ceil((1 - c_med) / c.max_weight - 1e-9)))
    held = {t: med[t] for t in universe if med[t] > 0}
    notes = []
    if len(held) < need:
        # Valid samples hold enough names between them (those with cash at or below the median each do).
        extra = sorted((t for t in universe if t not in held and mean[t] > 0),
                       key=lambda t: (-share[t], -mean[t], t))[: need - len(held)]
        held |= {t: mean[t] for t in extra}
        notes.append(f"majority held {len(held) - len(extra)} ticker(s), fewer than the {need} the constraints need: "
                     f"added {', '.join(extra)} by vote share at their mean weight")
    if c.max_tickers is not None and len(held) > c.max_tickers:
        keep = sorted(held, key=lambda t: (-held[t], -share[t], t))[: c.max_tickers]
        notes.append(f"majority held {len(held)} tickers > max_tickers {c.max_tickers}: dropped "
                     f"{', '.join(sorted(set(held) - set(keep)))}")
        held = {t: held[t] for t in keep}
    total = sum(held.values())
    weights = cap_weights({t: held.get(t, 0.0) / total * (1 - c_med) for t in universe}, c.max_weight)
    return weights, c_med, notes


def expected_draws(opt: Options, n_agents: int) -> int:
    """Draws a run makes: N, or when matched on generated tokens one round of the agents (the draws' count is the
    scenario's; the estimator's calibration from a pilot measures it)."""
    if opt.samples is not None:
        return opt.samples
    if opt.targets is None and opt.match_generated_of is None:
        raise ValueError("match_tokens_of is unresolved (runner.batch.resolve_samples resolves it)")
    return n_agents


def plan(cfg: DebateConfig, desks: tuple[str, ...] = ()) -> Plan:
    """Proposals of the agents (the paper's propose prompt), round-robin, asked concurrently; nothing else."""
    try:
        n = expected_draws(Options.model_validate(cfg.options), len(cfg.agents))
    except ValueError as exc:
        raise ValueError(f"config {cfg.name}: {exc}") from None
    k = len(cfg.agents)
    draws = tuple(Call(kind="propose", role=a.role, phase="propose", agent=a.agent_id, count=n // k + (i < n % k))
                  for i, a in enumerate(cfg.agents))
    return Plan(protocol=P, prompts="profiles", rounds=0,
                steps=(Step("propose", tuple(d for d in draws if d.count)),))


async def _draw(ctx: RunContext, i: int, spend: DrawSpend) -> Validated:
    agents = ctx.config.agents
    agent = agents[i % len(agents)]
    index = sample_index(ctx.sample_index, i // len(agents))
    base = ctx.base_task(agent.agent_id, agent.role, "propose", 0, ctx.config.pid.beta0)
    task = SampledTask(**dict(base), sample=SampleDraw(index=index, temperature=ctx.config.temperature))
    # The same run (trace, gateway, profiles: a shallow copy, nothing re-initialised; its account credits the run's),
    # asking with this sample's index: its own cache key.
    sampled = copy.copy(ctx)
    sampled.sample_index, sampled.account = index, spend
    return await sampled.ask(agent, "propose", 0, task, {}, label=f"propose:sample{i}")


async def _draw_all(ctx: RunContext, opt: Options) -> tuple[list[Validated], int | float | None]:
    """The run's draws, and the target (in ``opt.match``'s unit) they were matched to (None with a fixed N)."""
    spend = DrawSpend.crediting(ctx.account)
    if opt.samples is not None:
        return await gather_turns(*[_draw(ctx, i, spend) for i in range(opt.samples)]), None
    assert opt.targets is not None
    if ctx.scenario.id not in opt.targets:
        raise InputError(f"config {ctx.config.name}", f"options.targets has no {opt.match} target for scenario "
                         f"{ctx.scenario.id} (it has: {', '.join(sorted(opt.targets)) or 'none'})",
                         "run the matched config on this scenario to completion (with match: cost, on a model with a "
                         "price), or add its target")
    target = opt.targets[ctx.scenario.id]
    outs: list[Validated] = []
    while n := next_wave(target, spend.spent(opt.match), len(outs), MAX_SAMPLES):
        outs += await gather_turns(*[_draw(ctx, len(outs) + i, spend) for i in range(n)])
        if opt.match == "cost" and spend.unpriced:
            raise InputError(f"config {ctx.config.name}", f"match: cost, but model {spend.unpriced[0]} has no price (its "
                             "answer's cost is unknown)", "match on generated or total tokens, or give the model a "
                             "price (a model in litellm's cost map)")
    return outs, target


async def run(ctx: RunContext) -> Outcome:
    problems = config_problems(ctx.config)
    opt = Options.model_validate(ctx.config.options)
    if opt.samples is None and opt.targets is None:
        problems.append(f"options.{'match_tokens_of' if opt.match_tokens_of else 'match_generated_of'} is resolved when "
                        "a batch loads: run this config in a batch, or give samples")
    if problems:
        raise InputError(f"config {ctx.config.name}", "; ".join(problems), "fix the self_consistency config")
    outs, target = await _draw_all(ctx, opt)
    generated = ctx.account.completion_tokens
    weights = [v.held_weights for v in outs]
    cash = [v.cash_weight for v in outs]
    ids = [f"sample{i}" for i in range(len(outs))]
    spread = jsd(weights, cash)
    ctx.trace.write(Divergence(phase="propose", round=0, jsd=spread, pairwise=pairwise_js(dict(zip(ids, weights, strict=True))),
                               cash_spread=cash_spread(cash)))
    if opt.combine == "mean":
        final, final_cash, notes = mean_allocation(ctx, dict(zip(ids, outs, strict=True)))
    elif opt.combine == "majority":
        pick = medoid(weights, cash, ctx.universe)
        final, final_cash, notes = dict(weights[pick]), cash[pick], [f"majority: the L1 medoid is sample{pick}"]
    else:
        final, final_cash, notes = median_allocation(weights, cash, ctx.universe, ctx.constraints)
    distinct = len({tuple(round(w[t], 6) for t in ctx.universe) + (round(c, 6),) for w, c in zip(weights, cash, strict=True)})
    return Outcome(weights=final, cash=final_cash, method=f"self_consistency:{opt.combine}", rounds_run=0, rho_bar=None,
                   js={"propose": spread}, notes=notes,
                   extras={"samples": len(outs), "combine": opt.combine, "distinct_samples": distinct,
                           "generated_tokens": generated, MATCH_UNITS["generated"]: None,
                           **({MATCH_UNITS[opt.match]: target} if target is not None else {}),
                           "vote_share": vote_shares(weights, ctx.universe)})


class SelfConsistency(Protocol):
    """Independent samples of the config's agents' proposals, combined (a compute baseline)."""
    Options = Options
    prompts = "profiles"
    matches_spend = True

    def plan(self, cfg: DebateConfig, desks: tuple[str, ...] = ()) -> Plan:
        return plan(cfg, desks)

    async def run(self, ctx: RunContext) -> Outcome:
        return await run(ctx)

    def aggregation(self, cfg: DebateConfig) -> str:
        """Its ``combine``, not the config's aggregation (which it does not use)."""
        return f"{cfg.protocol}:{cfg.options.get('combine') or 'mean'}"

    def matched_to(self, cfg: DebateConfig) -> str | None:
        """The config whose runs in this batch its draws wait for and match, or None."""
        opt = Options.model_validate(cfg.options)
        return opt.match_generated_of if opt.targets is None and opt.pilot is None else None
