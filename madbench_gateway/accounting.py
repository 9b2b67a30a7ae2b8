"""Per-call records and their totals (per run, per batch), plus the cost budget.

A ``Totals`` is an account. The gateway keeps one for everything it answered (``Gateway.totals``, its own
statistics) and adds each call, as it settles, to the account of whoever asked too (``complete(...,
account=...)``): a run's account counts that run's calls and nothing else, however many runs share the
gateway. The run's trace has one ``llm_call`` event per answered call and one ``llm_failure`` per failed one,
written as the call settles, so a run's account and its trace always agree.
"""

from __future__ import annotations

import threading
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .errors import BudgetExhausted


class Attempt(BaseModel):
    """One try at the provider, or one event on the way (cache, fallback, validation)."""

    model_config = ConfigDict(extra="forbid")
    model: str
    kind: str  # ok | rate_limited | transient | fatal | invalid | cache_corrupt | fallback
    reason: str | None = None
    wait_s: float = 0.0
    latency_s: float = 0.0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost_usd: float | None = None
    #: The rejected answer itself, for an ``invalid`` attempt (what the model wrote, for diagnosis).
    response: str | None = None


class Completion(BaseModel):
    """A validated answer and everything needed to account for it."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)
    key: str
    messages_hash: str
    model_requested: str
    model_used: str
    is_llm: bool
    cached: bool
    content: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    #: None means unknown (model not in litellm's cost map), never "free".
    cost_usd: float | None = None
    latency_s: float
    queued_s: float = 0.0
    overhead_s: float = 0.0
    attempts: list[Attempt] = Field(default_factory=list)
    validation_retries: int = 0
    weight_policy: str = "strict"
    value: Any = Field(default=None, exclude=True)

    @property
    def retries(self) -> int:
        return sum(1 for a in self.attempts if a.kind not in ("ok",))


def total_cost(attempts: list[Attempt]) -> tuple[float | None, bool]:
    """Sum of known costs, and whether every billed attempt had a known cost."""
    billed = [a for a in attempts if a.prompt_tokens is not None]
    known = [a.cost_usd for a in billed if a.cost_usd is not None]
    return (sum(known) if billed else 0.0), len(known) == len(billed)


class Totals(BaseModel):
    """What a set of calls cost. ``calls`` are answered calls (cached or not), ``failed`` the calls that raised
    ``GatewayFailure``: the two are disjoint. Tokens count every answered call (a cached answer carries the
    tokens it was first answered with); ``cost_usd`` counts only what was paid for now, so not cached answers.
    A failed call adds no tokens or cost here (its attempts are in the ``GatewayFailure``; the budget is charged)."""

    calls: int = 0
    cached: int = 0
    failed: int = 0
    http_attempts: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    calls_with_unknown_cost: int = 0
    latency_s: float = 0.0

    def add(self, c: Completion) -> None:
        self.calls += 1
        self.cached += c.cached
        self.http_attempts += sum(1 for a in c.attempts if a.latency_s > 0)
        self.retries += c.retries
        self.prompt_tokens += c.prompt_tokens or 0
        self.completion_tokens += c.completion_tokens or 0
        if c.cost_usd is None:
            self.calls_with_unknown_cost += 1
        elif not c.cached:
            self.cost_usd += c.cost_usd
        self.latency_s += c.latency_s

    def add_failure(self, attempts: list[dict[str, Any]]) -> None:
        self.failed += 1
        self.http_attempts += sum(1 for a in attempts if a.get("latency_s", 0) > 0)
        self.retries += len(attempts)


class Budget:
    """A cost ceiling shared by the gateways of one process (the runner shares it across workers)."""

    def __init__(self, max_cost_usd: float | None):
        self.max_cost_usd = max_cost_usd
        self.spent_usd = 0.0
        self._lock = threading.Lock()

    def check(self) -> None:
        if self.max_cost_usd is not None and self.spent_usd >= self.max_cost_usd:
            raise BudgetExhausted(f"budget of ${self.max_cost_usd:.2f} reached (spent ${self.spent_usd:.4f}); no new calls start")

    def charge(self, cost: float | None) -> None:
        if cost:
            with self._lock:
                self.spent_usd += cost
