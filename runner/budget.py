"""One cost budget per batch: shared by all its runner actors, and carried over from one invocation to the next.

``<results>/budget.json`` records what the batch has spent (``spent_usd``), under which cap (``cap_usd``), and
whether a call was refused at that cap (``reached``). The driver reads it when it starts (``read_budget``) and
starts one ``BudgetActor`` for the batch (a named Ray actor on the driver's node, ``madbench-budget-<pid>-<dir>``)
that keeps the ledger (``madbench.gateway.accounting.Ledger``). Every runner actor's gateway asks it through a
``RayBudget`` before each paid request: it reserves the request's maximum cost, and settles the reservation to
what was billed. A reservation waits while spent plus every hold plus its own would pass the cap, and is refused
(the budget is reached) when spent plus its own would. So calls in flight on many actors at once stay under the cap
together, and the batch stops only when the next call cannot fit.

Persistence: the actor rewrites budget.json (atomically) after every reservation and settlement and when it first
refuses a reservation; the reservations not yet settled are journaled in it (``in_flight_usd``, by call id). A
crash (kill -9 of the driver) leaves those there. The runner actor that made a call also appends what it billed to
``budget-settled.jsonl`` as it settles, before it tells the ledger: an actor outlives its killed driver for a few
seconds, so a call in flight at the kill usually gets its answer and its line, though no ledger is left to tell. The
next invocation counts each call left in flight at what its line says it billed and, where there is none yet, at its
reserved maximum, and keeps it in ``counted_at_max``: a line that comes later (the driver was restarted before the
killed one's actors had their answers) corrects it at the next read. The journal is only appended to, never
rewritten, so no late line is lost. So the spend never under-reports, the cap holds across crashes, and the
recorded spend matches the provider's bill once the answers came (``madbench bench kills`` measures both). A driver
joined through the Ray client keeps its results directory on its own machine, where the actor (on the head) cannot
write: there the driver writes budget.json itself (``persist``) every few seconds and at the end, so a crash loses
at most those seconds' spend. The leakage probe, which runs in the driver before any actor starts, keeps its
ledger in a ``JournaledBudget`` that journals each of its calls in budget.json the same way.

Re-running the same command continues from the recorded spend. A batch stopped at its cap stays stopped while
the cap is not raised: the driver runs nothing and says so. Raising ``max_cost_usd`` (or removing it) continues.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from madbench.data.atomic import atomic_write_text
from madbench.data.errors import InputError
from madbench.gateway.accounting import Budget, Ledger, reserving
from madbench.gateway.errors import BudgetExhausted, DriverGone
from madbench.gateway.providers.batching import current_party
from madbench.results.layout import BUDGET as BUDGET_FILE
from madbench.results.layout import BUDGET_SETTLED
from madbench.runner.lock import WriterGuard

#: The prefix of a ``JournaledBudget``'s call ids: its calls run in the driver and die with it, so no late answer
#: ever corrects one a crash left in flight (it stays at its maximum).
PROBE_CALLS = "probe-"
#: The prefix ``BudgetRecord`` gives an earlier madbench's unnamed reservations: no line can name them either.
UNNAMED_CALLS = "unnamed-"
#: The call ids a crash may leave in flight that no late settlement line will name: each stays at its maximum.
FINAL_AT_MAX = (PROBE_CALLS, UNNAMED_CALLS)


class CallTag(BaseModel):
    """What the ledger knows of a paid call besides its cost: the run it belongs to (None: the leakage probe's), the
    model, and the request's cache key (``reserving``); None where a reservation did not say (an earlier madbench)."""

    model_config = ConfigDict(extra="forbid")
    run_id: str | None = None
    model: str | None = None
    key: str | None = None


class UntracedCall(CallTag):
    """A paid call the ledger counts that no run's trace records: one a crash left in flight (``orphaned``), or one of
    the leakage probe's, which runs before any trace (its ``cost_usd`` known once it settled). calls.parquet gets a row
    for each (``madbench.runner.store.ledger_rows``), so that its cost sums to the ledger's spend."""

    reserved_usd: float = Field(ge=0)
    #: What it billed, when known as it was recorded (a probe call that settled); else ``budget-settled.jsonl`` says
    #: it, or it counts at ``reserved_usd``, as ``read_budget`` counts it.
    cost_usd: float | None = Field(None, ge=0)
    orphaned: bool


class BudgetRecord(BaseModel):
    """What ``budget.json`` holds."""

    model_config = ConfigDict(extra="forbid")
    cap_usd: float | None = None
    spent_usd: float = Field(0.0, ge=0)
    #: Why an invocation stopped at this cap (a call that could not fit); None while calls may go on.
    reached: str | None = None
    #: The reservations (maximum costs) of the paid calls in flight when this was written, by call id
    #: (``<invocation>-<n>``): journaled before each request is sent, removed when it settles. A crash leaves them
    #: here, and the next invocation counts each at what ``budget-settled.jsonl`` says it billed, else at its maximum.
    in_flight_usd: dict[str, float] = Field(default_factory=dict)
    #: Calls a crash left in flight that no line of ``budget-settled.jsonl`` named when they were counted: ``spent_usd``
    #: holds each at its reserved maximum, and a line that comes later corrects it (``read_budget``).
    counted_at_max: dict[str, float] = Field(default_factory=dict)
    #: What is known of each call in ``in_flight_usd`` (its run, model and cache key), by call id.
    in_flight_calls: dict[str, CallTag] = Field(default_factory=dict)
    #: The paid calls counted in ``spent_usd`` that no trace records, by call id: kept for good, for calls.parquet.
    untraced: dict[str, UntracedCall] = Field(default_factory=dict)
    updated: str = ""
    #: Set by ``read_budget`` (never written): how the calls a crash left in flight were counted, for the user.
    _crash_note: str | None = PrivateAttr(None)

    @property
    def crash_note(self) -> str | None:
        return self._crash_note

    @field_validator("in_flight_usd", mode="before")
    @classmethod
    def _unnamed(cls, value: Any) -> Any:
        # An earlier madbench journaled bare maxima, which no settlement line can name: each counts at its maximum.
        return {f"{UNNAMED_CALLS}{i}": v for i, v in enumerate(value)} if isinstance(value, list) else value


def read_budget(root: str | Path, cap_usd: float | None) -> BudgetRecord:
    """The batch's recorded spend, under this invocation's cap: a raised (or removed) cap clears ``reached``, and a
    cap at or below what was spent is reached at once."""
    path = Path(root) / BUDGET_FILE
    record = BudgetRecord()
    if path.exists():
        try:
            record = BudgetRecord.model_validate_json(path.read_bytes())
        except ValidationError as exc:
            raise InputError(path, f"not a budget record: {exc.errors()[0]['msg']}",
                             "restore it, or delete it to count this batch's spend from zero") from None
    # Calls in flight at a crash were (or may have been) billed: at what their actors saw billed, else their maximum
    # until a line says what they billed.
    awaited = record.counted_at_max | record.in_flight_usd
    billed = read_settlements(path.parent / BUDGET_SETTLED, set(awaited))
    corrected = {call: most - billed[call] for call, most in record.counted_at_max.items() if call in billed}
    spent = (record.spent_usd + sum(billed.get(call, most) for call, most in record.in_flight_usd.items())
             - sum(corrected.values()))
    if spent < -1e-9:  # each correction was counted at its maximum in spent_usd: only an edited record goes below 0
        raise InputError(path, f"spent_usd (${record.spent_usd:.6f}) is less than the calls it counts at their maximum",
                         "restore it, or delete it to count this batch's spend from zero")
    spent = max(spent, 0.0)  # a correction's float rounding
    reached = record.reached
    if cap_usd is None or (record.cap_usd is not None and cap_usd > record.cap_usd) or corrected:
        reached = None  # a raised cap, or late answers that made room: the next call is tried again
    if cap_usd is not None and spent >= cap_usd:
        reached = f"budget of ${cap_usd:g} reached: ${spent:.4f} spent by earlier invocations"
    # An earlier madbench's unnamed reservations and the probe's calls can never be named by a line: they stay at their
    # maximum for good.
    unanswered = {c: m for c, m in awaited.items() if c not in billed and not c.startswith(FINAL_AT_MAX)}
    read = BudgetRecord(cap_usd=cap_usd, spent_usd=spent, reached=reached, counted_at_max=unanswered,
                        untraced=record.untraced | orphans(record), updated=record.updated)
    read._crash_note = _crash_note(record, billed, corrected)
    return read


def orphans(record: BudgetRecord) -> dict[str, UntracedCall]:
    """The calls ``record`` journals in flight, as the untraced calls a crash left (``read_budget`` counts them)."""
    return {call: UntracedCall(**record.in_flight_calls.get(call, CallTag()).model_dump(), reserved_usd=most,
                               orphaned=True)
            for call, most in record.in_flight_usd.items()}


def read_budget_told(root: str | Path, cap_usd: float | None, quiet: bool) -> BudgetRecord:
    """``read_budget``, and (unless ``quiet``) a line on stderr saying how the calls a crash left in flight were
    counted: for whichever stage of an invocation reads them first (the leakage probe, else the batch)."""
    record = read_budget(root, cap_usd)
    if record.crash_note and not quiet:
        print(f"madbench: {record.crash_note}", file=sys.stderr, flush=True)
    return record


def _crash_note(record: BudgetRecord, billed: dict[str, float], corrected: dict[str, float]) -> str | None:
    """How the calls a crash left in flight were counted, and which late answers corrected earlier counts."""
    notes = []
    if record.in_flight_usd:
        left = {c: v for c, v in record.in_flight_usd.items() if c not in billed}
        final = {c: v for c, v in left.items() if c.startswith(PROBE_CALLS)}
        why = "no answer of theirs is recorded yet; one that comes later corrects it"
        if final:  # the probe's calls died with their driver
            why = ("they died with the driver's leakage probe, so no answer will come" if len(final) == len(left) else
                   f"{why}, except for the {len(final)} of the driver's leakage probe, which died with it")
        notes.append(f"{len(record.in_flight_usd)} paid call(s) were in flight when the last driver stopped: "
                     f"{len(record.in_flight_usd) - len(left)} counted at what they billed, {len(left)} at their "
                     f"reserved maximum (${sum(left.values()):.4f}: {why})")
    if corrected:
        notes.append(f"{len(corrected)} call(s) an earlier start counted at their maximum were answered since: "
                     f"${sum(corrected.values()):.4f} less spent")
    return "; ".join(notes) or None


def read_settlements(path: Path, calls: set[str]) -> dict[str, float]:
    """What ``budget-settled.jsonl`` says each of ``calls`` billed. A line that is no JSON text is an append cut short
    (a kill or a full disk mid-write; a later append may follow it on the same line): the calls it held have no
    settlement, and count at their maximum. A line of JSON that is no settlement is an error."""
    if not calls or not (path.exists() or path.is_symlink()):
        return {}
    if path.is_symlink() or not path.is_file():
        raise InputError(path, "not a settlement journal (a link or a folder; madbench writes a plain file there)",
                         "remove it, to count the calls a crash left in flight at their reserved maximum")
    billed: dict[str, float] = {}
    for number, line in enumerate(path.read_bytes().split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # torn
        call, cost = (entry.get("call"), entry.get("cost_usd")) if isinstance(entry, dict) else (None, None)
        if not isinstance(call, str) or not (isinstance(cost, (int, float)) and not isinstance(cost, bool)
                                              and 0 <= cost < math.inf):
            raise InputError(path, f"line {number} is not a settlement ({line[:80]!r}): a call id and a cost in US "
                             "dollars (a finite number, 0 or more)", "restore the file, or delete it to count the "
                             "calls a crash left in flight at their reserved maximum")
        if call in calls:
            billed[call] = cost
    return billed


def append_settlement(path: Path, call: str, cost_usd: float | None) -> None:
    """One line, in one ``write`` to a file opened for appending: the runner actors of a node append side by side."""
    if cost_usd is not None and not 0 <= cost_usd < math.inf:  # a line no later start could read: refuse it now
        raise ValueError(f"{path}: a settlement of {cost_usd!r} US dollars for call {call} is no cost")
    line = json.dumps({"call": call, "cost_usd": cost_usd or 0.0}) + "\n"
    data = line.encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        written = os.write(fd, data)
        if written != len(data):  # a full disk: the torn line is the file's last, read as no settlement
            raise OSError(f"{path}: wrote {written} of {len(data)} bytes of a settlement")
    finally:
        os.close(fd)


def write_budget(root: str | Path, record: BudgetRecord) -> None:
    stamped = record.model_copy(update={"updated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    atomic_write_text(Path(root) / BUDGET_FILE, stamped.model_dump_json(indent=1) + "\n")


class BudgetActor:
    """The batch's ledger, in one Ray actor (one call at a time), persisted to budget.json as it changes."""

    def __init__(self, root: str | None, record: dict[str, Any], invocation: str, holder: str | None = None):
        """``root``: the results directory it persists to; None when the driver persists (``RayBudget.persist``).
        ``holder``: the lock line of the driver that started it; once another driver (or none) holds the lock, this
        actor, outliving a killed driver, writes nothing more (the next driver's record is not overwritten)."""
        rec = BudgetRecord.model_validate(record)
        self.root = root
        self.invocation = invocation
        self.guard = WriterGuard(root, holder) if root is not None and holder is not None else None
        self.ledger = Ledger(rec.cap_usd, rec.spent_usd, rec.reached)
        self.counted_at_max = rec.counted_at_max  # carried through each write, for the next read to correct
        self.untraced = rec.untraced  # carried through each write, for calls.parquet
        self.tags: dict[int, CallTag] = {}  # the calls in flight, by token

    def reserve(self, amount: float, tag: dict[str, Any] | None = None) -> dict[str, Any]:
        """{"token": t}, {"token": None} (wait for calls in flight), or {"refused": why}, with the ledger's state.
        ``tag``: the call's ``CallTag``, journaled with it."""
        # A refusal travels as a value: Ray would wrap a raised BudgetExhausted in its own error.
        was = self.ledger.reached
        try:
            token = self.ledger.reserve(amount)
        except BudgetExhausted as exc:
            if was is None:
                self._persist()
            return {"refused": str(exc), **self.state()}
        if token:
            self.tags[token] = CallTag.model_validate(tag or {})
            self._persist()  # journaled before the request is sent: a crash from here on counts it
        return {"token": token, **self.state()}

    def settle(self, token: int | None, cost: float | None) -> dict[str, Any]:
        self.ledger.settle(token, cost)
        self.tags.pop(token or 0, None)
        if cost or token:
            self._persist()
        return self.state()

    def state(self) -> dict[str, Any]:
        return ledger_state(self.ledger, self.invocation, self.counted_at_max, self.tags, self.untraced)

    def _persist(self) -> None:
        if self.root is None:
            return
        if self.guard is not None:
            try:
                self.guard()
            except DriverGone:
                return  # its driver is gone: the settlements its actors journal are read by the next one
        write_budget(self.root, recorded(self.state()))


def ledger_state(ledger: Ledger, invocation: str, counted_at_max: dict[str, float], tags: dict[int, CallTag],
                 untraced: dict[str, UntracedCall]) -> dict[str, Any]:
    """What a ledger holds now, its calls in flight named (``call_id``) with what is known of them (``tags``): the
    state ``recorded`` writes."""
    return {"cap_usd": ledger.cap_usd, "spent_usd": ledger.spent_usd, "reserved_usd": ledger.reserved_usd,
            "reached": ledger.reached, "in_flight_usd": {call_id(invocation, t): v for t, v in ledger.held.items()},
            "in_flight_calls": {call_id(invocation, t): tags[t].model_dump() for t in ledger.held if t in tags},
            "counted_at_max": counted_at_max, "untraced": {c: u.model_dump() for c, u in untraced.items()}}


class JournaledBudget(Budget):
    """A ``Budget`` kept in this process (one event loop: the leakage probe, before the batch's actors start) that
    rewrites ``root``'s budget.json at each reservation, settlement and first refusal, as the batch's ``BudgetActor``
    does: a kill mid-call leaves the call in ``in_flight_usd``, and the next start counts it at its maximum."""

    def __init__(self, root: str | Path, record: BudgetRecord):
        super().__init__(record.cap_usd, record.spent_usd)
        self.ledger.reached = record.reached
        self.root, self.counted_at_max = Path(root), record.counted_at_max
        self.untraced = dict(record.untraced)  # each settled call of the probe is added: no trace records them
        self.tags: dict[int, CallTag] = {}
        self.invocation = f"{PROBE_CALLS}{uuid.uuid4().hex[:12]}"

    async def _hold(self, amount: float) -> int | None:
        was = self.ledger.reached
        try:
            token = await super()._hold(amount)
        except BudgetExhausted:
            if was is None and self.ledger.reached is not None:
                self._persist()
            raise
        if token:
            self.tags[token] = CallTag(model=(reserving.get() or {}).get("model"), key=(reserving.get() or {}).get("key"))
            self._persist()  # journaled before the request is sent
        return token

    async def settle(self, token: int | None, cost: float | None) -> None:
        with self._lock:
            reserved = self.ledger.held.get(token or 0)
        await super().settle(token, cost)
        if token and reserved is not None:
            tag = self.tags.pop(token, CallTag())
            self.untraced[call_id(self.invocation, token)] = UntracedCall(
                **tag.model_dump(), reserved_usd=reserved, cost_usd=cost or 0.0, orphaned=False)
        if token or cost:
            self._persist()

    def _persist(self) -> None:
        with self._lock:
            state = ledger_state(self.ledger, self.invocation, self.counted_at_max, self.tags, self.untraced)
        write_budget(self.root, recorded(state))


def recorded(state: dict[str, Any]) -> BudgetRecord:
    """The budget.json record of a ledger's ``state``."""
    return BudgetRecord(cap_usd=state["cap_usd"], spent_usd=state["spent_usd"], reached=state["reached"],
                        in_flight_usd=state["in_flight_usd"], counted_at_max=state["counted_at_max"],
                        in_flight_calls=state["in_flight_calls"], untraced=state["untraced"])


def call_id(invocation: str, token: int) -> str:
    """A reservation's name in budget.json and budget-settled.jsonl, unique across invocations."""
    return f"{invocation}-{token}"


class RayBudget(Budget):
    """The ``Budget`` a runner actor's gateway asks: reservations and settlements go to the batch's ``BudgetActor``.

    ``check`` answers from what the actor said last (spent, reached): it needs no round trip, and a stale answer
    costs nothing, since every paid request still reserves. Requests with no known price reserve 0 and never
    leave the process, so a batch of rule-based models makes no call to the actor. ``Budget.reserve`` does the
    waiting. Picklable: the driver hands one to each runner actor."""

    def __init__(self, handle, record: BudgetRecord, invocation: str):
        self.handle = handle
        self.invocation = invocation
        self.ledger = Ledger(record.cap_usd, record.spent_usd, record.reached)  # a mirror: spent and reached only
        #: Where this process appends what each of its calls billed (``journal_settlements``); None: nowhere.
        self.settled_path: Path | None = None

    def journal_settlements(self, root: str | Path) -> None:
        """Append each settlement to ``root``'s budget-settled.jsonl too: for a runner actor that sees the results
        directory, so that a call answered after its driver was killed is counted at what it billed."""
        self.settled_path = Path(root) / BUDGET_SETTLED

    async def _hold(self, amount: float) -> int | None:
        if amount <= 0:
            self.check()
            return 0
        tag = {"run_id": current_party.get(), **(reserving.get() or {})}
        asked = asyncio.ensure_future(self._ask_reserve(amount, tag))
        try:
            reply = self._mirror(await asyncio.shield(asked))
        except asyncio.CancelledError:
            # The actor holds the amount whether or not the caller still waits (a hedge that lost its race while its
            # reservation was on the way): its answer's hold is freed when it comes, or it would count as in flight
            # until the batch ends, and a batch near its cap waits on it (HOLD_PATIENCE_S) for nothing.
            asked.add_done_callback(self._free_unwanted)
            raise
        if "refused" in reply:
            raise BudgetExhausted(reply["refused"])
        return reply["token"]

    async def _ask_reserve(self, amount: float, tag: dict[str, Any]) -> dict[str, Any]:
        return await self.handle.reserve.remote(amount, tag)

    def _free_unwanted(self, asked: asyncio.Future[dict[str, Any]]) -> None:
        """Settle at 0 the hold a cancelled caller was granted: nothing was sent under it."""
        if asked.cancelled() or asked.exception() is not None:
            return  # no hold was granted (the actor refused or died: the calls still waiting on it report that)
        token = asked.result().get("token")
        if token:
            self.handle.settle.remote(token, 0.0)

    async def settle(self, token: int | None, cost: float | None) -> None:
        try:
            if token and self.settled_path is not None:  # first: the ledger may be gone
                append_settlement(self.settled_path, call_id(self.invocation, token), cost)
        finally:  # a journal that cannot be written fails the call loudly, and still frees its hold
            if token or cost:
                self._mirror(await self.handle.settle.remote(token, cost))

    def snapshot(self) -> dict[str, Any]:
        """The ledger now (from the driver, which may block)."""
        import ray
        return self._mirror(ray.get(self.handle.state.remote()))

    def persist(self, root: str | Path) -> dict[str, Any]:
        """Write the ledger now to ``root``'s budget.json, from the driver; returns its state."""
        state = self.snapshot()
        write_budget(root, recorded(state))
        return state

    def _mirror(self, state: dict[str, Any]) -> dict[str, Any]:
        self.ledger.spent_usd, self.ledger.reached = state["spent_usd"], state["reached"]
        return state


def start_budget(ray, root: str | Path, record: BudgetRecord, actor_writes: bool = True,
                 holder: str | None = None, wait: bool = True) -> RayBudget:
    """Write ``record`` (``read_budget``'s, the crash's calls in flight counted in it) to budget.json and start the
    batch's ``BudgetActor`` on this (the driver's) node, where the results directory is writable, unless the driver
    is off the cluster (``actor_writes`` False: a Ray client's results are on its own machine, and the driver
    persists them); returns the ``RayBudget`` for the runner actors. ``holder``: this driver's lock line.
    ``wait``: return once the actor answers; without it, the caller waits (``snapshot``) before any run is sent."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    write_budget(root, record)  # from the driver first: a directory it cannot write fails here, plainly
    invocation = uuid.uuid4().hex[:12]
    here = ray.get_runtime_context().get_node_id()
    name = f"madbench-budget-{os.getpid()}-{hashlib.sha256(str(Path(root).resolve()).encode()).hexdigest()[:12]}"
    cls = ray.remote(num_cpus=0, max_restarts=0)(BudgetActor)
    handle = cls.options(name=name, scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=here, soft=False)).remote(
        str(root) if actor_writes else None, record.model_dump(), invocation, holder)
    budget = RayBudget(handle, record, invocation)
    if wait:
        budget.snapshot()  # up and answering before any runner actor asks it
    return budget


def stop_budget(ray, budget: RayBudget, spent_before: float, root: str | Path, driver_writes: bool = False
                ) -> dict[str, Any]:
    """The ledger's final state (already in budget.json when the actor wrote it as it changed; else written now to
    ``root`` from the driver), then stop the actor. Its spend counts the late answers this invocation's start had
    counted at their maximum (what the next read of budget.json corrects)."""
    state = budget.persist(root) if driver_writes else budget.snapshot()
    ray.kill(budget.handle)
    if state["counted_at_max"]:
        state = state | {"spent_usd": read_budget(root, state["cap_usd"]).spent_usd}
    return summary(state, spent_before)


def spend_text(spent_usd: float, unpriced_calls: int) -> str:
    """A spend as madbench prints it: ``$0.0123``. Calls of a model without a price in litellm's cost map are never
    counted as $0: the spend is ``unknown`` when nothing else was paid, else ``$0.0123 + unknown``, with their count."""
    if not unpriced_calls:
        return f"${spent_usd:.4f}"
    unknown = f"unknown ({unpriced_calls} call{'s' * (unpriced_calls != 1)} of a model without a price)"
    return unknown if spent_usd == 0 else f"${spent_usd:.4f} + {unknown}"


def summary(state: dict[str, Any], spent_before: float) -> dict[str, Any]:
    """What the batch spent against its cap, over every invocation, and how much of it earlier ones spent."""
    return {"cap_usd": state["cap_usd"], "spent_usd": state["spent_usd"], "spent_before_usd": spent_before,
            "reached": state["reached"]}
