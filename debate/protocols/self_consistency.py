"""`self_consistency`: N independent samples of one agent's proposal, combined per ticker (a compute baseline).

Self-consistency (Wang et al., "Self-Consistency Improves Chain of Thought Reasoning in Language Models", ICLR
2023) samples one prompt N times and keeps the majority answer. Here the prompt is the config's one agent's
``propose`` prompt, unchanged; the samples differ only in their sample index (so each has its own cache key), and
spend no token on critique, CRIT or a judge. Given N from a pilot (``match_tokens_of``, resolved by the batch
loader), the baseline spends what a debate spends: "does the debate beat the same compute without debate?".

Sample ``i`` of replicate ``k`` asks with sample index ``k + i·SAMPLE_STRIDE``: sample 0 is the single agent's own
draw at replicate k (the same request, one cache entry), and no two samples of two replicates coincide.

Combining, with w_{i,t} the weight sample i gives ticker t:

* ``mean``: w_t = (1/N) Σ_i w_{i,t} (cash alike), trimmed to ``max_tickers`` as the paper's mean is
  (``paper.mean_allocation``).
* ``majority``: the per-ticker median m_t = median_i w_{i,t}. For every threshold x, "at least x on t" wins a
  majority of the samples exactly when x ≤ m_t (odd N): the median is the per-ticker majority vote on an ordered
  answer (the median voter, Black, "On the Rationale of Group Decision-making", J. Political Economy 56(1), 1948).
  So a ticker is held when at least half the samples hold it. The held medians are rescaled to 1 − median cash;
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

from pydantic import BaseModel, ConfigDict, Field, model_validator

from madbench.data.errors import InputError
from madbench.data.scenario import Constraints
from madbench.debate.config import DebateConfig
from madbench.debate.context import RunContext, gather_turns
from madbench.debate.control import cash_spread, jsd, pairwise_js
from madbench.debate.events import Divergence
from madbench.debate.outcome import Outcome
from madbench.debate.protocols.paper import mean_allocation
from madbench.debate.protocols.plan import Call, Plan, Step
from madbench.debate.task import AgentTask
from madbench.debate.validation import Validated, cap_weights

#: Sample i of replicate k asks with sample index k + i·SAMPLE_STRIDE (replicate indices stay below it).
SAMPLE_STRIDE = 1_000_000
#: The most samples one run may draw (a bound on cost; a debate of 20 rounds is about 60 calls per agent).
MAX_SAMPLES = 200


class Options(BaseModel):
    """``samples`` N, or ``match_tokens_of`` a debate config with a ``pilot`` results dir (the batch resolves N)."""
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    samples: int | None = Field(None, ge=1, le=MAX_SAMPLES)
    combine: Literal["mean", "majority"] = "mean"
    #: A config name in the pilot's runs.parquet: N = its mean tokens per run ÷ its mean tokens per proposal.
    match_tokens_of: str | None = None
    #: The pilot's results directory (relative to this config file), read when the batch is loaded.
    pilot: str | None = None

    @model_validator(mode="after")
    def _one_way(self):
        if (self.match_tokens_of is None) != (self.pilot is None):
            raise ValueError("match_tokens_of and pilot go together: the config to match and the results dir that ran it")
        if self.samples is not None and self.match_tokens_of is not None:
            raise ValueError("give either samples or match_tokens_of with pilot, not both")
        if self.samples is None and self.match_tokens_of is None:
            raise ValueError("give samples (N), or match_tokens_of with pilot to derive N from a pilot's calls.parquet")
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
    if len(cfg.agents) != 1:
        problems.append(f"agents: self_consistency samples one agent, got {len(cfg.agents)}")
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


def majority_allocation(samples: list[dict[str, float]], cash: list[float], universe: list[str],
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


def plan(cfg: DebateConfig, desks: tuple[str, ...] = ()) -> Plan:
    """N proposals of the one agent (the paper's propose prompt), asked concurrently; nothing else is called."""
    n = Options.model_validate(cfg.options).samples
    if n is None:
        raise ValueError(f"config {cfg.name}: match_tokens_of is unresolved (runner.batch.resolve_samples resolves it)")
    agent = cfg.agents[0]
    draws = Call(kind="propose", role=agent.role, phase="propose", agent=agent.agent_id, count=n)
    return Plan(protocol="self_consistency", prompts="profiles", rounds=0, steps=(Step("propose", (draws,)),))


async def _draw(ctx: RunContext, i: int) -> Validated:
    agent = ctx.config.agents[0]
    index = sample_index(ctx.sample_index, i)
    base = ctx.base_task(agent.agent_id, agent.role, "propose", 0, ctx.config.pid.beta0)
    task = SampledTask(**dict(base), sample=SampleDraw(index=index, temperature=ctx.config.temperature))
    # The same run (trace, account, gateway, profiles: a shallow copy, nothing re-initialised), asking with this
    # sample's index: its own cache key.
    sampled = copy.copy(ctx)
    sampled.sample_index = index
    return await sampled.ask(agent, "propose", 0, task, {}, label=f"propose:sample{i}")


async def run(ctx: RunContext) -> Outcome:
    problems = config_problems(ctx.config)
    opt = Options.model_validate(ctx.config.options)
    if opt.samples is None:
        problems.append(f"options.match_tokens_of {opt.match_tokens_of!r} is resolved when a batch loads: run this config "
                        "in a batch, or give samples")
    if problems:
        raise InputError(f"config {ctx.config.name}", "; ".join(problems), "fix the self_consistency config")
    outs = await gather_turns(*[_draw(ctx, i) for i in range(opt.samples)])
    weights = [v.weights for v in outs]
    cash = [v.value.cash_weight for v in outs]
    ids = [f"sample{i}" for i in range(len(outs))]
    spread = jsd(weights, cash)
    ctx.trace.write(Divergence(phase="propose", round=0, jsd=spread, pairwise=pairwise_js(dict(zip(ids, weights, strict=True))),
                               cash_spread=cash_spread(cash)))
    if opt.combine == "mean":
        final, final_cash, notes = mean_allocation(ctx, dict(zip(ids, outs, strict=True)))
    else:
        final, final_cash, notes = majority_allocation(weights, cash, ctx.universe, ctx.constraints)
    distinct = len({tuple(round(w[t], 6) for t in ctx.universe) + (round(c, 6),) for w, c in zip(weights, cash, strict=True)})
    return Outcome(weights=final, cash=final_cash, method=f"self_consistency:{opt.combine}", rounds_run=0, rho_bar=None,
                   js={"propose": spread}, notes=notes,
                   extras={"samples": opt.samples, "combine": opt.combine, "distinct_samples": distinct,
                           "vote_share": vote_shares(weights, ctx.universe)})
