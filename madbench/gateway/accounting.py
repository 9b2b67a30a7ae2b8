"""Per-call records and their totals (per run, per batch), plus the cost budget (reservations, then settlement).

A ``Totals`` is an account. The gateway keeps one for everything it answered (``Gateway.totals``, its own
statistics) and adds each call, as it settles, to the account of whoever asked too (``complete(...,
account=...)``): a run's account counts that run's calls and nothing else, however many runs share the
gateway. The run's trace has one ``llm_call`` event per answered call and one ``llm_failure`` per failed one,
written as the call settles, so a run's account and its trace always agree.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from contextvars import ContextVar
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .errors import BudgetExhausted
from .request import LLMRequest


class Attempt(BaseModel):
    """One try at the provider, or one event on the way (cache, fallback, validation)."""

    model_config = ConfigDict(extra="forbid")
    model: str
    #: ok | rate_limited | transient | fatal | invalid | cache_corrupt | fallback | cancelled | outraced (a hedged
    #: request closed because its other copy answered first: madbench.gateway.hedging)
    kind: str
    reason: str | None = None
    wait_s: float = 0.0
    latency_s: float = 0.0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    #: Of ``prompt_tokens``, those the provider served from its prompt cache (OpenAI ``prompt_tokens_details.
    #: cached_tokens``, Anthropic ``cache_read_input_tokens``) and those it wrote to it (Anthropic
    #: ``cache_creation_input_tokens``); billed at their own rates (``LiteLLMProvider.cost``). None: not reported.
    cached_tokens: int | None = None
    cache_write_tokens: int | None = None
    cost_usd: float | None = None
    #: The same tokens at the synchronous list price with no prompt-cache discount: what a provider batch and the
    #: prompt cache are measured against (the report's realised saving). None when the model has no price.
    list_cost_usd: float | None = None
    #: The provider batch that answered this attempt (batch mode), None for a synchronous call.
    provider_batch: str | None = None
    #: The rejected answer itself, for an ``invalid`` attempt (what the model wrote, for diagnosis).
    response: str | None = None
    #: True for an attempt of a hedge (the second copy of a slow request); None for any other.
    hedge: bool | None = None


#: Attempt kinds that are no retry: an answer, and a hedged request closed because its copy answered first.
NOT_RETRIES = ("ok", "outraced")


class Completion(BaseModel):
    """A validated answer and everything needed to account for it."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)
    key: str
    messages_hash: str
    model_requested: str
    model_used: str
    #: What the provider reported serving (``RawResponse.model_served``); None where it reported nothing, or for an
    #: answer cached before it was recorded.
    model_served: str | None = None
    is_llm: bool
    cached: bool
    content: str
    #: sha256 of ``content`` exactly as returned (``cache.answer_sha256``): traces record it, so an answer the cache
    #: later serves differently is caught (``madbench cache verify``, and a resumed run).
    answer_sha256: str
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
        return sum(1 for a in self.attempts if a.kind not in NOT_RETRIES)

    @property
    def cached_tokens(self) -> int:
        """Prompt tokens of this call's billed attempts served from the provider's prompt cache (0 for an answer
        from madbench's own cache: nothing was billed for it now)."""
        return sum(a.cached_tokens or 0 for a in self.attempts)

    @property
    def cache_write_tokens(self) -> int:
        return sum(a.cache_write_tokens or 0 for a in self.attempts)


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
    #: Prompt tokens served from (read) and written to the providers' prompt caches, in the calls paid for now.
    cached_tokens: int = 0
    cache_write_tokens: int = 0
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
        self.cached_tokens += c.cached_tokens
        self.cache_write_tokens += c.cache_write_tokens
        if c.cost_usd is None:
            self.calls_with_unknown_cost += 1
        elif not c.cached:
            self.cost_usd += c.cost_usd
        self.latency_s += c.latency_s

    def add_failure(self, attempts: list[dict[str, Any]]) -> None:
        self.failed += 1
        self.http_attempts += sum(1 for a in attempts if a.get("latency_s", 0) > 0)
        self.retries += len(attempts)


#: Completion tokens reserved for a request that sets no ``max_tokens``. Its true bound, the model's output limit,
#: would reserve tens of times what an answer here costs; an answer longer than this settles above its reservation.
UNBOUNDED_COMPLETION_TOKENS = 4096
#: Chat-template tokens per message, and for priming the reply, on top of the text (OpenAI's are 3 and 3).
TEMPLATE_TOKENS = 8


def max_tokens(request: LLMRequest) -> tuple[int, int]:
    """Upper bounds on the (prompt, completion) tokens one attempt at ``request`` is billed.

    Byte-level BPE tokenisers (OpenAI's, Anthropic's, Llama's) never make a token of less than one byte, so the UTF-8
    bytes of what is sent (messages, response schema, tools) bound the prompt; ``max_tokens`` bounds the completion.
    The limiter's chars/3.5 is an estimate, not a bound: digits and non-ASCII text take more tokens than that."""
    sent = sum(len(m.content.encode()) for m in request.messages)
    for extra in (request.response_schema, request.tools):
        if extra:
            sent += len(json.dumps(extra).encode())
    return sent + TEMPLATE_TOKENS * (len(request.messages) + 1), request.max_tokens or UNBOUNDED_COMPLETION_TOKENS


class Ledger:
    """A budget's arithmetic: what was spent, what the calls in flight hold, and whether one more call fits.

    Not thread-safe by itself: ``Budget`` holds a lock around it, and the batch's Ray actor (runner/budget.py)
    serves one call at a time. ``reached`` (set when a call cannot fit even once every hold is settled) stops
    every later call too."""

    def __init__(self, cap_usd: float | None, spent_usd: float = 0.0, reached: str | None = None):
        self.cap_usd, self.spent_usd, self.reached = cap_usd, spent_usd, reached
        self.held: dict[int, float] = {}
        self._last = 0

    @property
    def reserved_usd(self) -> float:
        return sum(self.held.values())  # summed afresh: no float residue from many adds and subtracts

    def check(self) -> None:
        if self.reached is not None:
            raise BudgetExhausted(self.reached + "; no new calls start")
        if self.cap_usd is not None and self.spent_usd >= self.cap_usd:
            raise BudgetExhausted(f"budget of ${self.cap_usd:g} reached (spent ${self.spent_usd:.4f}); no new calls start")

    def reserve(self, amount: float) -> int | None:
        """Hold ``amount`` (a call's maximum cost) and return its token; None while it fits only once calls in
        flight settle what they hold; ``BudgetExhausted`` when it cannot fit even then (spent only grows). Spent
        plus every hold never passes the cap, so the calls in flight at once stay under it together."""
        self.check()
        if self.cap_usd is not None:
            if self.spent_usd + amount > self.cap_usd:
                self.reached = (f"budget of ${self.cap_usd:g} reached: ${self.spent_usd:.4f} spent, and the next call "
                                f"may cost up to ${amount:.4f}")
                raise BudgetExhausted(self.reached + "; no new paid calls start")
            if self.spent_usd + self.reserved_usd + amount > self.cap_usd:
                return None
        self._last += 1
        self.held[self._last] = amount
        return self._last

    def settle(self, token: int | None, cost: float | None) -> None:
        """Release ``token``'s hold (0 or None: nothing was held) and add what the call really cost (None: unknown)."""
        if token:
            del self.held[token]
        self.spent_usd += cost or 0.0


#: How long a reservation waits for calls in flight to settle their holds before it gives up (without marking the
#: budget reached: a lost actor's holds are never settled). Longer than a slow call's queue, retries and answer.
HOLD_PATIENCE_S = 600.0
#: Seconds between two tries of a waiting reservation.
HOLD_POLL_S = 0.25


#: The request a reservation is for (its cache key and model), set by the gateway before it reserves: a ledger that
#: journals its calls names them with it, so that a call a crash left in flight can be told apart later.
reserving: ContextVar[dict[str, str] | None] = ContextVar("madbench_reserving", default=None)


class Budget:
    """The cost ceiling the gateway asks before each paid request: ``reserve`` its maximum cost, ``settle`` the
    reservation to what was billed, ``check`` before a call starts.

    A reservation that fits only once calls in flight settle waits for them (up to ``HOLD_PATIENCE_S``); one that
    cannot fit at all raises ``BudgetExhausted`` and marks the budget reached. This class keeps the ledger in the
    process (``madbench llm ask``, tests, the gateways of one process); ``madbench.runner.budget.RayBudget`` overrides
    ``_hold`` and ``settle`` to share one ledger, kept by a Ray actor, across a whole batch."""

    def __init__(self, max_cost_usd: float | None, spent_usd: float = 0.0):
        self.ledger = Ledger(max_cost_usd, spent_usd)
        self._lock = threading.Lock()

    @property
    def max_cost_usd(self) -> float | None:
        return self.ledger.cap_usd

    @property
    def spent_usd(self) -> float:
        return self.ledger.spent_usd

    def check(self) -> None:
        """Raise ``BudgetExhausted`` once the cap is reached."""
        self.ledger.check()

    async def reserve(self, amount: float) -> int:
        """A token for ``settle`` (0: nothing held), once ``amount`` fits beside the holds of the calls in flight."""
        deadline = time.monotonic() + HOLD_PATIENCE_S
        while (token := await self._hold(amount)) is None:
            if time.monotonic() >= deadline:
                raise BudgetExhausted(f"waited {HOLD_PATIENCE_S:g} s for calls in flight to settle, and a call of up to "
                                      f"${amount:.4f} still does not fit beside them under the budget of "
                                      f"${self.ledger.cap_usd:g}; no new paid calls start")
            await asyncio.sleep(HOLD_POLL_S)
        return token

    async def _hold(self, amount: float) -> int | None:
        with self._lock:
            return self.ledger.reserve(amount)

    async def settle(self, token: int | None, cost: float | None) -> None:
        with self._lock:
            self.ledger.settle(token, cost)
