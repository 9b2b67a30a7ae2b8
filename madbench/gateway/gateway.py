"""The one path every LLM call takes: cache → limiter → provider → validation.

    completion = await gateway.complete(request, spec, validate, account=run_totals)

* A cache hit returns without touching the limiter or the network.
* A miss queues at the limiter of (provider, model, api_base), calls the
  provider once per attempt (the provider's own retries are off), and
  classifies the outcome: 429 → wait Retry-After (capped) and retry, the
  limiter shrinks concurrency; timeout/5xx → jittered exponential backoff;
  fatal → stop. A model that stays rate-limited or broken hands over to the
  next model of its fallback chain.
* The answer is validated (``validate`` raises ``OutputInvalid``); a failure
  goes back to the model as feedback, up to ``max_validation_retries``.
* Only a validated answer is cached. Anything else raises ``GatewayFailure``
  with every attempt and its reason.
* Every call is counted, as it settles, in the gateway's own ``totals`` and in
  the caller's ``account`` (a run's ``Totals``): runs that share a gateway each
  see their own calls only.
* Each request sent reserves its maximum cost from the budget first (it waits
  while calls in flight hold what it needs; ``BudgetExhausted`` when it cannot
  fit under the cap) and settles it to what was billed, failed calls too: see
  ``_reserved``.
* A request still unanswered past its model's latency quantile is sent again
  (a hedge, ``hedging.py``): through the same limiter and budget; the first
  answer wins and the other request is closed (``_raced``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import random
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from madbench.data.errors import InputError

from .accounting import Attempt, Budget, Completion, Totals, max_tokens, reserving, total_cost
from .cache import ResponseCache, answer_sha256
from .errors import (
    CallCancelled,
    FatalProviderError,
    GatewayFailure,
    NoAnswer,
    OutputInvalid,
    ProviderError,
    RateLimited,
    TransientError,
)
from .hedging import Hedger, HedgeSettings
from .limiter import LimiterPool
from .models import ModelSpec, SchemaScope, as_spec, spec_cost
from .providers import Provider, Providers
from .providers.base import Race, RawResponse, racing
from .providers.batching import current_party
from .request import LLMRequest, Message
from .secrets import redact, redact_known
from .single_flight import SingleFlight

Validator = Callable[[str, ModelSpec], Any]

FEEDBACK = ("Your previous answer could not be accepted:\n{error}\n\n"
            "Answer again with one JSON object that satisfies every rule above. Output only the JSON.")


def passthrough(content: str, spec: ModelSpec) -> str:
    return content


def estimate_tokens(request: LLMRequest) -> float:
    """A conservative pre-call estimate for the TPM bucket (settled against real usage afterwards)."""
    chars = sum(len(m.content) for m in request.messages)
    return chars / 3.5 + (request.max_tokens or 512)


class _Exhausted(Exception):
    """This model gave up (rate limits or provider errors); try the next one in the chain."""


@dataclasses.dataclass
class _Sending:
    """What became of one request (one budget reservation): whether it reached the provider (it may bill from then
    on), whether its answer came (counted at what it billed), and, for a request in a hedge's race, what the hedger
    watches and the answer that beat it."""

    sent: bool = False
    answered: bool = False
    #: This request's attempts (a copy in a race keeps its own, merged into the call's when the race ends).
    attempts: list[Attempt] = dataclasses.field(default_factory=list)
    #: When the try now at the provider was sent (monotonic); None while none is. ``moved`` is set at each change.
    at: float | None = None
    moved: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    race: Race | None = None
    hedge: bool = False
    #: The other copy's answer, once it won: its prompt tokens price this request's bound.
    beaten_by: RawResponse | None = None

    def moving(self, at: float | None) -> None:
        self.at = at
        self.moved.set()

    @property
    def lost(self) -> bool:
        return self.race is not None and self.race.lost


#: The copies of a raced request: each one's task and what became of it (the first copy first).
_Legs = dict["asyncio.Task[tuple[RawResponse, float]]", _Sending]


#: How long a call cancelled with its request at the provider waits for the answer, to count it at what it billed
#: rather than at its reserved maximum (a failed run's report waits that long at most for its sibling turns).
CANCELLED_ANSWER_PATIENCE_S = 15.0


class Gateway:
    def __init__(self, cache: ResponseCache | None = None, limiters: LimiterPool | None = None,
                 budget: Budget | None = None, use_cache: bool = True, guard: Callable[[], None] | None = None,
                 providers: Providers | None = None, replay: bool = False, hedging: HedgeSettings | None = None):
        self.cache = cache
        #: Replay (``madbench replay``): every answer from the cache; a call that would reach a provider (one whose
        #: answers are cached: a model behind an API or a local server) is refused, never sent.
        self.replay = replay
        #: Requests sent to model providers (every attempt, retries included; not the rule-based analysts and scorers,
        #: which are code in this process): what replay shows is 0.
        self.requests = 0
        # Who answers each model: the composition root's registry (madbench.runner.wiring), else the gateway's own.
        self.providers = providers or Providers.declared()
        # Raises (errors.DriverGone) once whoever this gateway works for is gone: checked before every answer is
        # taken or paid for, so an orphaned runner actor stops calling and committing (see runner.lock).
        self.guard = guard
        self.flight = cache.single_flight() if cache is not None else SingleFlight(None)
        self.limiters = limiters or LimiterPool()
        self.budget = budget or Budget(None)
        self.use_cache = use_cache and cache is not None
        self.totals = Totals()
        #: Provider attempts begun or ended, per party (the run a call belongs to, ``current_party``): a runner's
        #: watchdog reads a run whose count moves as alive even while its trace does not (a slow answer, retries).
        self.activity: Counter[str | None] = Counter()
        self._prepared: dict[str, ModelSpec] = {}
        #: Slow requests sent twice (hedging.py): each model's latencies seen here, and the cap's counts.
        self.hedger = Hedger(hedging)
        self._hedged_specs: dict[str, bool] = {}

    def prepare(self, spec: ModelSpec) -> tuple[ModelSpec, Provider]:
        provider = self.providers.for_model(spec.model)
        key = spec.model_dump_json()
        if key not in self._prepared:
            self._prepared[key] = provider.prepare(spec)
        return self._prepared[key], provider

    def schema_scope(self, spec: ModelSpec) -> SchemaScope:
        """How narrowly the schema sent to ``spec`` is fitted (``Providers.schema_scope``)."""
        return self.providers.schema_scope(spec)

    def cache_key(self, request: LLMRequest, spec: ModelSpec | str | None = None) -> str:
        """The key ``complete`` stores this request's answer under (without calling anything)."""
        prepared, provider = self.prepare(as_spec(spec or request.model))
        return self._keyed(request, prepared, provider)[1]

    @staticmethod
    def _keyed(request: LLMRequest, spec: ModelSpec, provider: Provider) -> tuple[LLMRequest, str]:
        """The request as sent to ``spec``, and its cache key (the endpoint stands in by its stable identity)."""
        request = request.model_copy(update={"model": spec.model, "api_base": spec.api_base})
        return request, request.model_copy(update={"api_base": provider.endpoint_identity(spec)}).cache_key()

    async def complete(self, request: LLMRequest, spec: ModelSpec | str | None = None,
                       validate: Validator = passthrough, account: Totals | None = None) -> Completion:
        """One validated answer. ``account`` (the caller's ``Totals``, e.g. one run's) is credited with this call,
        answered or failed, besides the gateway's own ``totals``."""
        self._check_guard()
        spec, provider = self.prepare(as_spec(spec or request.model))  # may start a local server: not overhead
        t0 = time.perf_counter()
        request, key = self._keyed(request, spec, provider)
        attempts: list[Attempt] = []
        try:
            return await self._complete(request, key, spec, provider, validate, account, attempts, t0)
        except asyncio.CancelledError:
            records = [a.model_dump() for a in attempts]
            if any(a.cost_usd for a in attempts):
                for totals in self._accounts(account):
                    totals.add_failure(records)
            raise CallCancelled(records) from None

    async def _complete(self, request: LLMRequest, key: str, spec: ModelSpec, provider: Provider, validate: Validator,
                        account: Totals | None, attempts: list[Attempt], t0: float) -> Completion:
        cacheable = self.use_cache and provider.cacheable
        if not cacheable:
            return await self._fresh(request, key, spec, provider, validate, account, attempts, t0, cacheable)
        hit = await self._from_cache(key, request, spec, validate, attempts, t0)
        if hit is not None:
            return self._answered(hit, account)
        # Identical requests in flight are sent once (single_flight.py).
        async with self.flight.hold(key, provider.waiting_for_peer):
            if await self._cache.has(key):  # answered by another caller while this one waited
                hit = await self._from_cache(key, request, spec, validate, attempts, t0)
                if hit is not None:
                    self._cache.take_back_miss(spec.model)
                    return self._answered(hit, account)
            return await self._fresh(request, key, spec, provider, validate, account, attempts, t0, cacheable)

    def _check_guard(self) -> None:
        if self.guard is not None:
            self.guard()

    async def _fresh(self, request: LLMRequest, key: str, spec: ModelSpec, provider: Provider, validate: Validator,
                     account: Totals | None, attempts: list[Attempt], t0: float, cacheable: bool) -> Completion:
        """Ask the provider (the fallback chain in turn), validate, cache and account the answer."""
        if self.replay and (cacheable or provider.is_llm):
            raise InputError(f"the cache {self.cache.directory if self.cache else '(none)'}",
                             f"replay needs an answer of {spec.model} it does not hold (key {key[:16]}); a provider "
                             "would be called, and replay calls none", "give replay the response cache the results "
                             "were made with (--cache-dir), copied with them")
        self.budget.check()
        waited = 0.0
        for candidate in [spec, *spec.fallbacks]:
            cand_spec, cand_provider = (spec, provider) if candidate is spec else self.prepare(as_spec(candidate))
            if candidate is not spec:
                attempts.append(Attempt(model=cand_spec.model, kind="fallback", reason=f"moving to {cand_spec.model}"))
            reserving.set({"key": key, "model": cand_spec.model})  # the ledger's name for the calls it reserves
            try:
                raw, value, rounds, w = await self._validated(request, cand_spec, cand_provider, validate, attempts)
            except _Exhausted:
                continue
            except (GatewayFailure, OutputInvalid) as exc:
                raise self._failed(str(exc), attempts, account) from None
            waited += w
            cost, complete_cost = total_cost(attempts)  # already settled with the budget, attempt by attempt
            completion = Completion(
                key=key, messages_hash=request.messages_hash(), model_requested=spec.model, model_used=raw.model_used,
                model_served=raw.model_served, is_llm=cand_provider.is_llm, cached=False, content=raw.content, answer_sha256=answer_sha256(raw.content),
                prompt_tokens=sum(a.prompt_tokens or 0 for a in attempts),
                completion_tokens=sum(a.completion_tokens or 0 for a in attempts),
                cost_usd=cost if complete_cost else None,
                latency_s=time.perf_counter() - t0, queued_s=waited,
                overhead_s=max(0.0, time.perf_counter() - t0 - waited - sum(a.latency_s + a.wait_s for a in attempts)),
                attempts=attempts, validation_retries=rounds, weight_policy=cand_spec.weight_policy or "strict", value=value,
            )
            if cacheable:
                self._cache.put(key, spec.model, {"response": {
                    "content": raw.content, "model_used": raw.model_used, "model_served": raw.model_served,
                    "is_llm": cand_provider.is_llm,
                    "prompt_tokens": completion.prompt_tokens, "completion_tokens": completion.completion_tokens,
                    "cost_usd": completion.cost_usd, "weight_policy": completion.weight_policy}})
            self._check_guard()  # paid and cached (a resumed run gets it free), but not handed to an orphan's trace
            return self._answered(completion, account)
        chain = " → ".join(as_spec(c).model for c in [spec, *spec.fallbacks])
        last = next((a.reason for a in reversed(attempts) if a.reason), "no attempt made")
        raise self._failed(f"every model in the chain gave up ({chain}); last error: {last}", attempts, account)

    def _answered(self, completion: Completion, account: Totals | None) -> Completion:
        # No await between here and the caller's trace write: an account never runs ahead of its trace.
        for totals in self._accounts(account):
            totals.add(completion)
        return completion

    def _failed(self, reason: str, attempts: list[Attempt], account: Totals | None) -> GatewayFailure:
        """Count a failed call and build its error (what its attempts billed, answers rejected by validation
        included, was settled with the budget as each was answered)."""
        records = [a.model_dump() for a in attempts]
        for totals in self._accounts(account):
            totals.add_failure(records)
        return GatewayFailure(redact(reason), records)

    @property
    def _cache(self) -> ResponseCache:
        assert self.cache is not None  # only a gateway with a cache has use_cache, and reads or writes it
        return self.cache

    def _accounts(self, account: Totals | None) -> tuple[Totals, ...]:
        return (self.totals,) if account is None or account is self.totals else (self.totals, account)

    async def _from_cache(self, key: str, request: LLMRequest, spec: ModelSpec, validate: Validator, attempts: list[Attempt],
                    t0: float) -> Completion | None:
        seen = len(self._cache.corrupt)
        body = await self._cache.lookup(key, spec.model)
        for event in self._cache.corrupt[seen:]:
            attempts.append(Attempt(model=spec.model, kind="cache_corrupt", reason=event.reason))
        if body is None:
            return None
        resp = body["response"]
        try:
            value = validate(resp["content"], spec)
        except OutputInvalid as exc:
            # Validation rules changed since this answer was stored: recompute rather than serve it.
            await self._cache.forget(key)
            attempts.append(Attempt(model=spec.model, kind="cache_corrupt", reason=f"cached answer fails validation now: {exc}"))
            return None
        return Completion(
            key=key, messages_hash=request.messages_hash(), model_requested=spec.model, model_used=resp["model_used"],
            model_served=resp.get("model_served"), is_llm=resp["is_llm"], cached=True, content=resp["content"], answer_sha256=answer_sha256(resp["content"]),
            prompt_tokens=resp["prompt_tokens"],
            completion_tokens=resp["completion_tokens"], cost_usd=resp["cost_usd"], latency_s=time.perf_counter() - t0,
            overhead_s=time.perf_counter() - t0, attempts=attempts, weight_policy=resp["weight_policy"], value=value)

    async def _validated(self, request: LLMRequest, spec: ModelSpec, provider: Provider, validate: Validator,
                         attempts: list[Attempt]) -> tuple[RawResponse, Any, int, float]:
        messages = list(request.messages)
        waited = 0.0
        for round_ in range(spec.retry.max_validation_retries + 1):
            raw, w = await self._requested(request.model_copy(update={"messages": messages, "model": spec.model,
                                                                      "api_base": spec.api_base}), spec, provider, attempts)
            waited += w
            try:
                return raw, validate(raw.content, spec), round_, waited
            except OutputInvalid as exc:
                attempts[-1] = attempts[-1].model_copy(update={"kind": "invalid", "reason": redact(str(exc))[:1000],
                                                                "response": redact(raw.content)})
                if round_ == spec.retry.max_validation_retries:
                    raise OutputInvalid(redact(f"{spec.model}: answer still invalid after {round_} feedback retries: {exc}")) from None
                messages = [*messages, Message(role="assistant", content=raw.content),
                            Message(role="user", content=FEEDBACK.format(error=exc))]
        raise AssertionError("unreachable")

    def hedges(self, spec: ModelSpec, provider: Provider) -> bool:
        """Whether ``spec``'s slow requests are hedged: never in replay, for a provider that is not ``hedgeable`` or
        with the setting off; else as the spec says, and by default when its price is known (hedging.py)."""
        if self.replay or not provider.hedgeable or not self.hedger.settings.enabled:
            return False
        if spec.hedge is not None:
            return spec.hedge
        key = spec.model_dump_json()
        if key not in self._hedged_specs:
            self._hedged_specs[key] = spec_cost(provider, spec, 1, 1) is not None
        return self._hedged_specs[key]

    async def _requested(self, request: LLMRequest, spec: ModelSpec, provider: Provider,
                         attempts: list[Attempt]) -> tuple[RawResponse, float]:
        """One request's answer: ``_reserved``, raced against a hedge where ``spec`` hedges."""
        if not self.hedges(spec, provider):
            return await self._reserved(request, spec, provider, attempts, _Sending())
        return await self._raced(request, spec, provider, attempts)

    async def _raced(self, request: LLMRequest, spec: ModelSpec, provider: Provider,
                     attempts: list[Attempt]) -> tuple[RawResponse, float]:
        """``request`` sent once and, once that has waited its model's hedging delay at the provider with no answer
        and the cap allows, sent again (each copy under its own reservation and limiter lease). The first answer
        wins: the other copy is cancelled, its request closed and counted (``_answer``). A copy that fails leaves the
        other to answer; when both fail, the first's error stands. Either way both copies' attempts are the call's,
        the winner's last."""
        self.hedger.requests += 1
        first = _Sending(race=Race())
        legs: _Legs = {asyncio.ensure_future(self._leg(request, spec, provider, first)): first}
        try:
            key, task = spec.limit_key(), next(iter(legs))
            # Hedged past the quantile while the cap's share for that allows, else past the straggler quantile from
            # the reserve (hedging.py); each delay read afresh as answers come and requests wait.
            for straggler in (False, True):
                if not await _due(task, first, functools.partial(self.hedger.delay, key, straggler=straggler)):
                    break  # answered (or failed) before it was due
                if self._hedge_fits(request, spec, provider) and self.hedger.take(straggler):
                    hedge = _Sending(race=Race(), hedge=True)
                    legs[asyncio.ensure_future(self._leg(request, spec, provider, hedge))] = hedge
                    break
            winner = await _first_answer(legs)
        except BaseException:
            # The call is cancelled (or this failed): each copy still in flight stops as a cancelled call does.
            for t in legs:
                t.cancel()
            await asyncio.shield(asyncio.wait(list(legs)))
            attempts.extend(_merged(legs, None))
            _read_outcomes(legs)
            raise
        if winner is None:  # every copy failed: the first's error, with every attempt
            attempts.extend(_merged(legs, None))
            _read_outcomes(legs)
            error = next(iter(legs)).exception()
            assert error is not None
            raise error
        answer: tuple[RawResponse, float] = winner.result()
        for t, leg in legs.items():
            if not t.done():
                leg.beaten_by = answer[0]
                assert leg.race is not None
                leg.race.lost = True
                t.cancel()
        await asyncio.wait(list(legs))
        for t, leg in legs.items():
            if t is not winner and not t.cancelled() and t.exception() is None:  # answered in the same instant
                leg.attempts[-1] = leg.attempts[-1].model_copy(update={
                    "kind": "outraced", "reason": "answered too, just after the other copy of this hedged request: its "
                                                  "answer was dropped, counted at what it billed"})
        attempts.extend(_merged(legs, winner))
        _read_outcomes(legs)  # a copy that failed before the other answered: its attempts say why
        return answer

    async def _leg(self, request: LLMRequest, spec: ModelSpec, provider: Provider,
                   sending: _Sending) -> tuple[RawResponse, float]:
        """One copy of a raced request, in its own task: its provider sees the race (``racing``)."""
        racing.set(sending.race)
        return await self._reserved(request, spec, provider, sending.attempts, sending)

    def _hedge_fits(self, request: LLMRequest, spec: ModelSpec, provider: Provider) -> bool:
        """Whether a hedge's maximum cost fits under the budget beside what is spent and held (as this process knows
        it): a hedge is optional, and one that cannot fit must not be the call that marks the budget reached."""
        cap = self.budget.max_cost_usd
        if cap is None:
            return True
        amount = spec_cost(provider, spec, *max_tokens(request)) or 0.0
        return self.budget.spent_usd + self.budget.ledger.reserved_usd + amount <= cap

    async def _reserved(self, request: LLMRequest, spec: ModelSpec, provider: Provider,
                        attempts: list[Attempt], sending: _Sending) -> tuple[RawResponse, float]:
        """``_call`` under a budget reservation of the request's maximum cost, settled to what its attempts billed
        (429s and errors bill nothing; a model without a known price reserves and settles 0).

        Reserved per request sent, not per ``complete``: a feedback retry or a fallback model is a new request
        whose maximum is known only when it is made, and a call's whole chain would hold many times what it
        spends. Reserved before the limiter's queue, so a refusal holds no lease."""
        prompt, completion = max_tokens(request)
        reserved = spec_cost(provider, spec, prompt, completion) or 0.0
        token = await self.budget.reserve(reserved)
        first = len(attempts)
        try:
            answer = await self._call(request, spec, provider, attempts, sending)
        except asyncio.CancelledError:
            # Cancelled with a request at the provider (a failed run stops its sibling turns): ``_answer`` waited for
            # its answer and recorded what it billed. One whose answer never came is settled at the maximum it was
            # reserved for, as its bill is never reported to us: spend never under-reports. A copy that lost a race
            # between tries (none at the provider) billed what its tries did.
            unknown = sending.sent and not sending.answered and not (sending.lost and sending.at is None)
            if unknown:
                attempts.append(Attempt(model=spec.model, kind="cancelled", prompt_tokens=prompt,
                                        completion_tokens=completion, cost_usd=reserved,
                                        reason="cancelled with the request at the provider and no answer came: "
                                               "counted at its reserved maximum, as its bill is never reported"))
            await asyncio.shield(self.budget.settle(token, reserved if unknown else total_cost(attempts[first:])[0]))
            raise
        except BaseException:
            await self.budget.settle(token, total_cost(attempts[first:])[0])
            raise
        await self.budget.settle(token, total_cost(attempts[first:])[0])
        return answer

    async def _call(self, request: LLMRequest, spec: ModelSpec, provider: Provider, attempts: list[Attempt],
                    sending: _Sending) -> tuple[RawResponse, float]:
        """One answer from one model, retrying 429s and transient errors; raises _Exhausted when it gives up.
        ``sending.sent`` turns true once a request has gone to the provider (it may bill it from then on)."""
        limiter = self.limiters.get(spec.limit_key(), spec.limits) if provider.rate_limited else None
        provider.warm()  # before the lease: see Provider.warm
        tries = {"rate_limited": 0, "transient": 0}
        bounds = {"rate_limited": spec.retry.max_rate_limit_retries, "transient": spec.retry.max_transient_retries}
        waited = 0.0
        first_transient: float | None = None
        est = estimate_tokens(request)
        while True:
            lease = await limiter.acquire(est) if limiter else None
            if lease:
                waited += lease["waited_s"]
            # A lease is handed back on every way out, a cancelled call's (a failed run cancels its sibling turns)
            # included: one never released holds a concurrency slot until lease_timeout_s and stalls later calls.
            release = limiter.release if limiter is not None and lease is not None else None
            lease_id: Any = lease["lease_id"] if lease is not None else None
            try:
                self._check_guard()  # after the wait, which may be long: nothing is paid for an orphan
                start = time.perf_counter()
                try:
                    raw = await self._attempt(request, spec, provider, attempts, sending, start)
                except (RateLimited, TransientError) as exc:
                    # 429s honour Retry-After (capped) and tell the limiter; other transient errors back off.
                    kind = exc.kind
                    retry_after = getattr(exc, "retry_after", None)
                    if release is not None:
                        done, release = release, None
                        await done(lease_id, "rate_limited" if kind == "rate_limited" else "error", None, retry_after)
                    pause, gives_up, first_transient = self._pause(spec, kind, retry_after, tries, bounds, first_transient)
                    attempts.append(Attempt(model=spec.model, kind=kind, reason=redact(exc.reason),
                                            latency_s=time.perf_counter() - start, wait_s=0.0 if gives_up else pause))
                    if gives_up:
                        raise _Exhausted() from None
                    await asyncio.sleep(pause)
                    continue
                except FatalProviderError as exc:
                    if release is not None:
                        done, release = release, None
                        await done(lease_id, "error")
                    attempts.append(Attempt(model=spec.model, kind=exc.kind, reason=redact(exc.reason),  # fatal, refused, truncated
                                            latency_s=time.perf_counter() - start, **exc.billed))  # a refusal is billed
                    named = exc.reason if spec.model in exc.reason else f"{spec.model}: {exc.reason}"  # named once
                    raise GatewayFailure(redact(named), []) from None
                latency = time.perf_counter() - start
                used = _tokens_used(raw)
                if release is not None:
                    done, release = release, None
                    await done(lease_id, "ok", used)
            except BaseException:
                if release is not None:  # shielded: a second cancellation must not leave the slot taken either
                    # A cancelled call whose answer came (``_answer``) used what the provider counted, like any answer.
                    used = _tokens_used(attempts[-1]) if sending.answered and attempts else None
                    await asyncio.shield(release(lease_id, "error" if used is None else "ok", used))
                raise
            attempts.append(self._answer_attempt(spec, provider, raw, latency))
            return raw, waited

    async def _attempt(self, request: LLMRequest, spec: ModelSpec, provider: Provider, attempts: list[Attempt],
                       sending: _Sending, start: float) -> RawResponse:
        """One try at the provider (``_answer``), counted (``requests``, ``activity``), its time at the provider
        watched by the hedger (``sending.at``) and, answered, learned from."""
        party = current_party.get()
        sending.sent = True
        sending.moving(time.monotonic())
        self.requests += provider.is_llm or provider.cacheable
        self.activity[party] += 1
        hedged = self.hedges(spec, provider)
        if hedged:  # while it waits, its age tells the hedger's quantile that some requests take at least this long
            self.hedger.sent(spec.limit_key(), id(sending), time.monotonic())
        try:
            raw = _scrubbed(await self._answer(request, spec, provider, attempts, sending, start))
        except (RateLimited, TransientError):
            sending.moving(None)
            raise
        finally:
            self.activity[party] += 1
            if hedged:
                self.hedger.settled(spec.limit_key(), id(sending))
        sending.moving(None)
        if hedged:
            self.hedger.observe(spec.limit_key(), time.perf_counter() - start)
        return raw

    async def _answer(self, request: LLMRequest, spec: ModelSpec, provider: Provider, attempts: list[Attempt],
                      sending: _Sending, start: float) -> RawResponse:
        """The provider's answer to ``request``, sent now. A caller cancelled while the request is at the provider (a
        failed run stops its sibling turns, as does an orphaned actor's run at its guard) still waits for the
        answer, which the provider bills whether or not it is read: it is recorded as a cancelled attempt at what it
        billed (``sent["answered"]``), and the cancellation goes on. One whose answer does not come within
        ``CANCELLED_ANSWER_PATIENCE_S`` (or an error, or a second cancellation) is left to ``_reserved`` to count at
        its maximum. A copy of a hedged request whose other copy answered first is not waited for: ``_outraced``."""
        call = asyncio.ensure_future(provider.complete(request, spec))
        try:
            return await asyncio.shield(call)
        except asyncio.CancelledError:
            if call.cancelled():  # the request itself was cancelled, not only its caller: no answer will come
                raise
            if sending.lost:
                await self._outraced(call, request, spec, provider, attempts, sending, start)
                raise
            raw = None
            try:
                done, _ = await asyncio.wait({call}, timeout=CANCELLED_ANSWER_PATIENCE_S)
                raw = call.result() if done else None
            except NoAnswer:
                raw = None  # a timeout or a dropped connection says nothing of what was billed: its maximum
            except ProviderError as exc:
                # The provider answered with an error: it billed nothing, or (a refusal) what the error says.
                attempts.append(Attempt(model=spec.model, kind="cancelled", latency_s=time.perf_counter() - start,
                                        reason=redact(f"cancelled with the request at the provider, which answered "
                                                      f"{exc.kind}: {exc.reason}")[:1000], **exc.billed))
                sending.answered = True
                raise asyncio.CancelledError() from None
            except BaseException:
                raw = None
            if raw is None:
                call.cancel()
                raise asyncio.CancelledError() from None
            attempts.append(self._answer_attempt(spec, provider, raw, time.perf_counter() - start).model_copy(
                update={"kind": "cancelled", "reason": "cancelled with the request at the provider: its answer was "
                                                       "waited for and counted at what it billed, then dropped"}))
            sending.answered = True
            raise

    async def _outraced(self, call: asyncio.Future[RawResponse], request: LLMRequest, spec: ModelSpec,
                        provider: Provider, attempts: list[Attempt], sending: _Sending, start: float) -> None:
        """Close a raced copy's request (its provider closes the connection: ``racing``) and record it as
        ``outraced``: at what it billed if its answer came all the same, else at a bound of what it may have billed,
        the winner's prompt tokens (the same prompt) and the request's whole completion allowance. Without the
        winner's token count it is left to ``_reserved``, which counts it at its reserved maximum."""
        call.cancel()
        await asyncio.wait({call})
        note = "closed when the other copy of this hedged request answered first"
        if not call.cancelled() and call.exception() is None:
            attempts.append(self._answer_attempt(spec, provider, call.result(), time.perf_counter() - start).model_copy(
                update={"kind": "outraced", "reason": f"{note}; its answer came all the same and was dropped"}))
            sending.answered = True
            return
        winner = sending.beaten_by
        prompt = winner.prompt_tokens if winner is not None else None
        completion = max_tokens(request)[1]
        bound = spec_cost(provider, spec, prompt, completion)
        if bound is None:
            return
        attempts.append(Attempt(model=spec.model, kind="outraced", latency_s=time.perf_counter() - start,
                                prompt_tokens=prompt, cost_usd=bound, list_cost_usd=bound,
                                reason=f"{note}; counted at a bound of its bill ({prompt} prompt tokens, as the "
                                       f"winner's, and its {completion} completion tokens allowed)"))
        sending.answered = True

    def _pause(self, spec: ModelSpec, kind: str, retry_after: float | None, tries: dict[str, int], bounds: dict[str, int],
               first_transient: float | None) -> tuple[float, bool, float | None]:
        """(the wait before the next try, whether the call gives up, when its first transient failure was): a 429
        honours Retry-After (capped), other transient errors back off; the call gives up past its retries, and a
        transient failure also only past the outage patience, counted from the first."""
        tries[kind] += 1
        pause = self._backoff(spec, tries[kind]) if retry_after is None else retry_after
        if kind == "rate_limited":
            pause = min(pause, spec.limits.retry_after_cap_s)
        gives_up = tries[kind] > bounds[kind]
        if kind == "transient":
            first_transient = first_transient or time.monotonic()
            gives_up = gives_up and time.monotonic() - first_transient >= spec.retry.outage_patience_s
        return pause, gives_up, first_transient

    @staticmethod
    def _answer_attempt(spec: ModelSpec, provider: Provider, raw: RawResponse, latency: float) -> Attempt:
        """The attempt that got an answer, priced as billed and, beside it, at the synchronous list price."""
        cost = spec_cost(provider, spec, raw.prompt_tokens, raw.completion_tokens, cached_tokens=raw.cached_tokens,
                             cache_write_tokens=raw.cache_write_tokens)
        return Attempt(model=spec.model, kind="ok", latency_s=latency, prompt_tokens=raw.prompt_tokens,
                       completion_tokens=raw.completion_tokens, cached_tokens=raw.cached_tokens,
                       cache_write_tokens=raw.cache_write_tokens, cost_usd=cost,
                       list_cost_usd=spec_cost(provider, spec, raw.prompt_tokens, raw.completion_tokens, batch=False),
                       provider_batch=raw.extra.get("provider_batch"))

    @staticmethod
    def _backoff(spec: ModelSpec, n: int) -> float:
        """Exponential backoff with jitter: base·2^(n−1), capped, times U(0.5, 1)."""
        return min(spec.retry.backoff_max_s, spec.retry.backoff_base_s * 2.0 ** (n - 1)) * random.uniform(0.5, 1.0)


def _scrubbed(raw: RawResponse) -> RawResponse:
    """``raw`` with any known key in its answer scrubbed (a provider that echoes the key; known keys only: an answer
    is no error text)."""
    clean = redact_known(raw.content, named=False)
    return raw if clean == raw.content else dataclasses.replace(raw, content=clean)


def _tokens_used(answer: RawResponse | Attempt) -> int | None:
    """The tokens an answer used, as its provider counted them (what the limiter's token bucket settles to)."""
    return None if answer.prompt_tokens is None else answer.prompt_tokens + (answer.completion_tokens or 0)


#: Seconds between two looks at a model's hedging delay while it is unknown (too few answers, or too many requests
#: still waiting to tell its quantile): the first phase of a batch learns it from its own answers.
DELAY_RECHECK_S = 1.0


async def _due(task: asyncio.Future[Any], sending: _Sending, delay_of: Callable[[float], float | None]) -> bool:
    """Wait until ``task``'s try now at the provider has been there ``delay_of(now)`` seconds (True), or ``task`` ends
    (False). The clock starts at each try's send: a try waiting at the limiter or backing off is not slow at the
    provider. The delay is read again at each wake (it moves as answers come and requests wait; unknown, it is looked
    at every ``DELAY_RECHECK_S``)."""
    while not task.done():
        now = time.monotonic()
        delay = delay_of(now) if sending.at is not None else None
        if sending.at is not None and delay is not None and sending.at + delay <= now:
            return True
        timeout = None if sending.at is None else DELAY_RECHECK_S if delay is None else sending.at + delay - now
        sending.moved.clear()
        moved = asyncio.ensure_future(sending.moved.wait())
        try:
            await asyncio.wait([task, moved], timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            moved.cancel()
    return False


async def _first_answer(legs: _Legs) -> asyncio.Task[tuple[RawResponse, float]] | None:
    """The first of ``legs`` to end with an answer (the first leg's when both end at once), None when all fail."""
    pending = set(legs)
    while pending:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        answered = [t for t in legs if t in done and not t.cancelled() and t.exception() is None]
        if answered:
            return answered[0]
    return None


def _merged(legs: _Legs, winner: asyncio.Task[tuple[RawResponse, float]] | None) -> list[Attempt]:
    """The attempts of every copy of a raced request, a hedge's marked, the winner's last (its answer is the call's
    last attempt, which validation may mark invalid)."""
    order = [t for t in legs if t is not winner] + ([winner] if winner is not None else [])
    return [a.model_copy(update={"hedge": True}) if legs[t].hedge else a for t in order for a in legs[t].attempts]


def _read_outcomes(legs: _Legs) -> None:
    """Each ended copy's error read, so that none is reported as never retrieved (its attempts record it)."""
    for t in legs:
        if t.done() and not t.cancelled():
            t.exception()
