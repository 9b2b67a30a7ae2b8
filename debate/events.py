"""Every event a run's trace holds, as one pydantic model each: the writer, the store, the report,
``madbench trace show`` and re-scoring all read and write these.

A trace line is ``{"seq", "prev", "event", "t", ...fields}``; ``event`` names the model. Fields that
older versions did not write have defaults, so a trace written before a field existed still reads.
Unknown fields are rejected: a trace that does not match its model is an error, never a guess.
"""

from __future__ import annotations

from collections.abc import Container
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from madbench.debate.grading import CritScore, RCAVerdict


class Event(BaseModel):
    model_config = ConfigDict(extra="forbid")
    #: Position in the trace and the SHA-256 of the previous line: the hash chain (set by the writer).
    seq: int = -1
    prev: str = ""
    #: Wall-clock time of writing, seconds since the epoch (set by the writer).
    t: float = 0.0


class RunStart(Event):
    event: Literal["run_start"] = "run_start"
    run_id: str
    attempt: int
    resumed: bool
    repaired: list[str] = Field(default_factory=list)
    scenario: dict[str, Any]
    config: dict[str, Any]
    config_hash: str
    sample_index: int
    prompt_hashes: dict[str, str] = Field(default_factory=dict)
    python: str | None = None
    #: The results format this attempt was written in (``madbench.results.FORMAT_VERSION``); None before it was recorded.
    format_version: int | None = None


class MemoShown(Event):
    event: Literal["memo"] = "memo"
    sha256: str
    as_of: str
    n_items: int
    ids: list[str]
    #: The memo's text, so a trace reads without the data pack (absent in early traces).
    text: str | None = None


class LLMCall(Event):
    event: Literal["llm_call"] = "llm_call"
    agent: str
    phase: str
    round: int
    label: str
    key: str
    messages_hash: str | None = None
    model_requested: str
    model_used: str
    #: The model the provider reported serving (e.g. a dated snapshot of ``model_used``); None where it reported none
    #: and in traces before it was recorded.
    model_served: str | None = None
    #: The request's sampling parameters (temperature, max_tokens, top_p, seed, sample_index): what `madbench diff`
    #: shows of the first request two runs sent differently (absent in traces before it was recorded).
    request_params: dict[str, Any] | None = None
    #: The provider of ``model_used`` (``openai``, ``anthropic``, ``gemini``, ``rules``...: its litellm prefix), which
    #: differs from the requested one's after a fallback across providers (absent in traces before it existed).
    provider: str | None = None
    is_llm: bool
    cached: bool
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost_usd: float | None = None
    latency_s: float
    overhead_ms: float | None = None
    validation_retries: int = 0
    weight_policy: str | None = None
    attempts: list[dict[str, Any]] = Field(default_factory=list)
    response: str | None = None
    #: sha256 of the exact answer the gateway returned, cached or fresh (absent in traces before it existed):
    #: what ``madbench cache verify`` and a resumed run compare the cache's answer with.
    answer_sha256: str | None = None


class LLMFailure(Event):
    event: Literal["llm_failure"] = "llm_failure"
    agent: str
    phase: str
    round: int
    label: str
    reason: str
    attempts: list[dict[str, Any]] = Field(default_factory=list)


class Turn(Event):
    """One validated agent (or judge, or stage) answer."""
    event: Literal["turn"] = "turn"
    agent: str
    role: str
    phase: str
    round: int
    label: str
    output: dict[str, Any]
    weights: dict[str, float] | None = None
    cash: float | None = None
    policy_notes: list[str] = Field(default_factory=list)
    model: str
    #: The provider that answered (as on ``LLMCall``; absent in traces before it existed).
    provider: str | None = None
    is_llm: bool


class Crit(Event):
    event: Literal["crit"] = "crit"
    agent: str
    role: str
    round: int
    label: str
    score: CritScore
    audit: dict[str, Any] = Field(default_factory=dict)
    #: What was graded (the argument, the critiques it received and, since 0.2, what it revised and the values of
    #: the evidence it cites), so ``madbench rescore`` can grade it again without the debate.
    task: dict[str, Any] | None = None


class RCA(Event):
    event: Literal["rca"] = "rca"
    agent: str
    phase: str
    round: int
    verdict: RCAVerdict


class Divergence(Event):
    """Jensen-Shannon divergence of the agents' allocations after a phase."""
    event: Literal["divergence"] = "divergence"
    phase: str
    round: int
    jsd: float
    pairwise: dict[str, float] = Field(default_factory=dict)
    cash_spread: float | None = None


class Intervention(Event):
    event: Literal["intervention"] = "intervention"
    name: str
    round: int
    agent: str | None = None
    level: int | None = None
    verdict: str | None = None
    reason: str
    action: str
    feedback: str | None = None


class InterventionCheck(Event):
    event: Literal["intervention_check"] = "intervention_check"
    name: str
    round: int
    fired: bool
    reason: str
    js_prop: float | None = None
    js_rev: float | None = None


class ControllerStep(Event):
    event: Literal["controller"] = "controller"
    round: int
    step: dict[str, Any]
    state: dict[str, Any]


class EarlyStop(Event):
    event: Literal["early_stop"] = "early_stop"
    round: int
    reason: str


class Conviction(Event):
    """The independent-desks protocol's conviction model and its calibrated weights."""
    event: Literal["conviction"] = "conviction"
    convergence: Any = None
    consensus: Any = None
    model: dict[str, Any]
    calibrated: dict[str, Any]
    weights: dict[str, float]
    notes: list[str] = Field(default_factory=list)


class Reflection(Event):
    """The TradingAgents protocol's look back at its previous decision on the universe."""
    event: Literal["reflection"] = "reflection"
    text: str
    source_run: str | None = None
    log: str


class BlindMap(Event):
    """A blind run's pseudonyms (``madbench.data.blind``): the debate saw only ``mapping``'s values; its final allocation,
    backtest and result are in the real tickers (its turns, as the agents wrote them, in pseudonyms)."""
    event: Literal["blind_map"] = "blind_map"
    #: Real ticker → pseudonym.
    mapping: dict[str, str]
    options: dict[str, Any] = Field(default_factory=dict)
    #: The id of the pseudonymised scenario the debate ran on.
    scenario_id: str


class Final(Event):
    event: Literal["final"] = "final"
    weights: dict[str, float]
    cash: float
    method: str
    notes: list[str] = Field(default_factory=list)


class Backtest(Event):
    event: Literal["backtest"] = "backtest"
    metrics: dict[str, Any]
    baselines: dict[str, dict[str, Any]] = Field(default_factory=dict)


class RunEnd(Event):
    event: Literal["run_end"] = "run_end"
    status: Literal["ok", "failed"]
    error: str | None = None
    totals: dict[str, Any] | None = None


AnyEvent = Annotated[RunStart | MemoShown | LLMCall | LLMFailure | Turn | Crit | RCA | Divergence | Intervention | InterventionCheck | ControllerStep | EarlyStop | Conviction | Reflection | BlindMap | Final | Backtest | RunEnd,
                     Field(discriminator="event")]
EVENT_ADAPTER: TypeAdapter[AnyEvent] = TypeAdapter(AnyEvent)


def parse_event(record: dict[str, Any]) -> AnyEvent:
    """The typed event of one trace line (raises ``pydantic.ValidationError`` when it matches no model)."""
    return EVENT_ADAPTER.validate_python(record)


def vouches(record: dict[str, Any], seen_keys: Container[str]) -> bool:
    """Whether an ``llm_call`` record vouches for its answer: a fresh answer (what a provider really returned), or a
    cached one for a key the trace has not seen before (``seen_keys``). A cached answer for a key seen before does not:
    if it differs from the earlier one, it is what an edited cache served (the run then failed on it)."""
    return not record.get("cached") or record["key"] not in seen_keys


def recorded_answers(records: list[dict[str, Any]]) -> dict[str, set[str]]:
    """The answer hashes a trace recorded per cache key, from its raw ``llm_call`` records: those that vouch for their
    answer (``vouches``). So an answer that a later attempt was served from an edited cache (its ``llm_call`` is
    written, then the run fails) never vouches for itself on the next attempt. Events without ``answer_sha256``
    (older traces) record nothing."""
    out: dict[str, set[str]] = {}
    for r in records:
        if r.get("event") == "llm_call" and r.get("answer_sha256") and vouches(r, out.keys()):
            out.setdefault(r["key"], set()).add(r["answer_sha256"])
    return out


#: Any kind of event list: a trace read as its union of event models, or as plain events.
E = TypeVar("E", bound=Event)


def unblinded(events: list[E]) -> list[E]:
    """The events with every turn's weights in real tickers when the run was blind (from its ``BlindMap``), as its
    final allocation and result are; a named run's events as they are."""
    maps = [e for e in events if isinstance(e, BlindMap)]
    if not maps:
        return events
    back = {p: t for t, p in maps[-1].mapping.items()}
    return [e.model_copy(update={"weights": {back[k]: w for k, w in e.weights.items()}})
            if isinstance(e, Turn) and e.weights else e for e in events]


def last_attempt(events: list[E]) -> list[E]:
    """The events of a trace's last attempt (from its last run_start); a resumed run appends a new attempt."""
    starts = [i for i, e in enumerate(events) if isinstance(e, RunStart)]
    return events[starts[-1]:] if starts else events
