"""Totals of a run's calls and its critical path (``Tally``), and a batch's wall time (``batch_wall_s``).

Wall time is one run's critical path (phases sequential, agents within a phase concurrent), and for a batch the
slowest of that and each model's rate limits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from madbench.gateway.models import ModelSpec, RateLimits
from madbench.runner.estimate.assumptions import BATCH_STARTUP_S, LATENCY_CV, VALIDATION_FEEDBACK_TOKENS
from madbench.runner.estimate.pricing import cost, counts_tokens, price
from madbench.runner.estimate.shapes import Shape

#: E[max of k standard normals], k = 1..10 (order-statistic tables).
_MAX_NORMAL = (0.0, 0.5642, 0.8463, 1.0294, 1.1630, 1.2672, 1.3522, 1.4236, 1.4850, 1.5388)


def straggler_factor(k: int, cv: float) -> float:
    """Expected slowest of ``k`` concurrent calls relative to one: ``1 + cv · E[max of k standard normals]``
    (k > 10: ``sqrt(2 ln k)``)."""
    if k <= 1:
        return 1.0
    e = _MAX_NORMAL[k - 1] if k <= len(_MAX_NORMAL) else math.sqrt(2 * math.log(k))
    return 1.0 + cv * e


def batch_wall_s(path_s: list[float], max_in_flight: int, usage: dict[str, LimitUsage]) -> tuple[float, str]:
    """Wall time of a batch and its bottleneck: ``BATCH_STARTUP_S + max(latency bound, each model's limit bound)``.

    * latency bound: runs overlap up to ``C = min(max_in_flight, runs)`` at a time (each runner actor takes up to
      ``max_in_flight`` concurrent runs, so ``workers`` does not cap it): ``max(Σ path / C, max path)``;
    * per rate-limit key (provider, model, api_base), with ``h`` the limits' headroom:
      ``attempts / (rpm·(1−h)/60)``, ``tokens / (tpm·(1−h)/60)`` and ``busy seconds / max_concurrency``.

    429 back-off, provider outages and cache hits are not modelled."""
    if not path_s:
        return 0.0, "nothing to run"
    c = max(1, min(max_in_flight, len(path_s)))
    bounds = {"latency (critical path of the runs in flight)": max(sum(path_s) / c, max(path_s))}
    for key, u in usage.items():
        lim, keep, name = u.limits, 1 - u.limits.headroom, u.label or key
        if lim.rpm:
            bounds[f"rpm of {name}"] = u.attempts / (lim.rpm * keep / 60)
        if lim.tpm:
            bounds[f"tpm of {name}"] = u.tokens / (lim.tpm * keep / 60)
        bounds[f"max_concurrency of {name}"] = u.busy_s / lim.max_concurrency
    name = max(bounds, key=lambda b: bounds[b])
    return BATCH_STARTUP_S + bounds[name], name


@dataclass
class Line:
    """Totals of one (model, kind) in a run or a batch."""
    calls: float = 0.0
    attempts: float = 0.0
    prompt_tokens: float = 0.0
    completion_tokens: float = 0.0
    busy_s: float = 0.0
    cost_usd: float = 0.0
    #: The same calls at the provider's batch-API prices (``execution: batch``).
    cost_batch_usd: float = 0.0


@dataclass
class LimitUsage:
    """What a batch asks of one rate-limit key: HTTP attempts, tokens, and seconds of calls in flight; ``label``
    names the key for a reader (the model, and its api_base if any; the key itself is ``provider|model|api_base``)."""
    limits: RateLimits
    attempts: float = 0.0
    tokens: float = 0.0
    busy_s: float = 0.0
    label: str = ""


def limit_label(spec: ModelSpec) -> str:
    """A rate-limit key as the dry run prints it: ``rules/macro``, ``openai/x at http://host/v1``."""
    return spec.model + (f" at {spec.api_base}" if spec.api_base else "")


@dataclass
class RunEstimate:
    """One run: calls (logical calls, one ``llm_call`` event each), HTTP attempts (with validation retries),
    tokens, cost (None when a model has no price), and its critical path in seconds."""
    calls: float = 0.0
    attempts: float = 0.0
    prompt_tokens: float = 0.0
    completion_tokens: float = 0.0
    cost_usd: float | None = 0.0
    path_s: float = 0.0
    lines: dict[tuple[str, str], Line] = field(default_factory=dict)
    limits: dict[str, LimitUsage] = field(default_factory=dict)
    unpriced: set[str] = field(default_factory=set)


class Tally:
    """Accumulates calls into a ``RunEstimate``; ``v`` is the expected validation retries per call.

    A call with ``v`` expected retries makes ``1 + v`` attempts; each retry re-sends the prompt with the rejected
    answer and ``VALIDATION_FEEDBACK_TOKENS``, so its prompt tokens are ``p + v·(p + answer + feedback)``, its
    completion tokens ``(1 + v)·c`` and its latency ``(1 + v)·L``."""

    def __init__(self, v: float, cv: float = LATENCY_CV):
        self.v, self.cv = v, cv
        self.est = RunEstimate()

    def latency(self, s: Shape) -> float:
        return (1 + self.v) * s.latency_s

    def calls(self, s: Shape, n: float) -> None:
        if n <= 0:
            return
        v, e = self.v, self.est
        # A rule-based answer (a provider that is no LLM) records no tokens, so none are counted: the shape keeps
        # the prompt a model would be sent, the tally what the run's calls will record.
        llm = counts_tokens(s.model)
        prompt = s.prompt + v * (s.prompt + s.answer + VALIDATION_FEEDBACK_TOKENS) if llm else 0.0
        completion = (1 + v) * s.completion if llm else 0.0
        line = e.lines.setdefault((s.model, s.kind), Line())
        line.calls += n
        line.attempts += n * (1 + v)
        line.prompt_tokens += n * prompt
        line.completion_tokens += n * completion
        line.busy_s += n * self.latency(s)
        e.calls += n
        e.attempts += n * (1 + v)
        e.prompt_tokens += n * prompt
        e.completion_tokens += n * completion
        usd = price(s.model, round(prompt), round(completion), declared=s.spec.price)
        if usd is None:
            e.unpriced.add(s.model)
        else:
            line.cost_usd += n * usd
            line.cost_batch_usd += n * (price(s.model, round(prompt), round(completion), batch=True,
                                              declared=s.spec.price) or 0.0)
        u = e.limits.setdefault(s.spec.limit_key(), LimitUsage(s.spec.limits, label=limit_label(s.spec)))
        u.attempts += n * (1 + v)
        u.tokens += n * (prompt + completion)
        u.busy_s += n * self.latency(s)

    def step(self, shapes: list[Shape], times: float = 1.0) -> None:
        """``times`` occurrences of one concurrent step on the critical path: the slowest of its calls
        (``max L · straggler_factor(k)``), in ``ceil(k_m / max_concurrency_m)`` waves when a model's concurrency
        cap is below its share ``k_m`` of the step."""
        if not shapes or times <= 0:
            return
        per_model: dict[str, int] = {}
        for s in shapes:
            per_model[s.spec.limit_key()] = per_model.get(s.spec.limit_key(), 0) + 1
        waves = max(math.ceil(k / next(s.spec.limits.max_concurrency for s in shapes if s.spec.limit_key() == key))
                    for key, k in per_model.items())
        slowest = max(self.latency(s) for s in shapes)
        self.est.path_s += times * waves * slowest * straggler_factor(len(shapes), self.cv)

    def finish(self) -> RunEstimate:
        e = self.est
        e.cost_usd = cost(e)
        return e


def merge(into: RunEstimate, e: RunEstimate) -> None:
    into.calls += e.calls
    into.attempts += e.attempts
    into.prompt_tokens += e.prompt_tokens
    into.completion_tokens += e.completion_tokens
    into.unpriced |= e.unpriced
    for k, line in e.lines.items():
        t = into.lines.setdefault(k, Line())
        for f in ("calls", "attempts", "prompt_tokens", "completion_tokens", "busy_s", "cost_usd", "cost_batch_usd"):
            setattr(t, f, getattr(t, f) + getattr(line, f))
    for key, u in e.limits.items():
        t2 = into.limits.setdefault(key, LimitUsage(u.limits, label=u.label))
        t2.attempts += u.attempts
        t2.tokens += u.tokens
        t2.busy_s += u.busy_s
