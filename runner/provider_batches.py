"""Provider batch mode for a batch of runs: one collector, one provider batch per debate phase, a journal.

In batch mode (``execution: batch`` in a batch file, or ``madbench run --provider-batch``) every runner actor's
gateway answers litellm-routed models through ``madbench.gateway.providers.batching.BatchingProvider``, which
hands each request to this batch's one ``Collector`` (a Ray actor on the driver's node) and waits. The collector
holds the requests until every run in flight is blocked on a model call (the driver tells it which runs are in
flight; a request carries its run), then waits ``settle_s`` with no new request (the sibling calls of a phase
arrive a few ms apart), or until the oldest has waited ``window_s``; then it submits them as one provider batch
per model (OpenAI's rule), polls it every ``poll_s``, and answers each waiting call from its result line. Runs
proceed in lockstep, so a phase of every run in flight is one provider batch.

Durable: each provider batch is journaled in ``<results>/provider_batches/<id>.json`` (atomic writes) before
anything is confirmed: the intent and its request keys first, then the uploaded input file, then the batch id,
then each state change, and its result lines in ``<id>.output.jsonl`` once collected. A restarted driver's
collector reads the journal: it re-attaches to batches still in flight (a request they hold is never submitted
again), answers from collected results, finds a batch whose creation was cut off by listing the provider's
batches (by input file), and forgets an intent that never reached the provider. Requests an expired or failed
batch left unanswered are resubmitted, and only those (at most ``max_resubmits`` times). An error line is
returned to the waiting call, so the gateway retries it like any provider error (into a later batch).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from madbench.data.atomic import atomic_write_bytes, atomic_write_text
from madbench.data.errors import InputError, format_validation_error
from madbench.gateway.errors import FatalProviderError, ProviderError
from madbench.gateway.models import ModelSpec
from madbench.gateway.providers.batching import (
    BATCH_PROVIDERS,
    TERMINAL_STATES,
    BatchAPI,
    NotKnown,
    batch_group,
    batch_pricing,
    parse_lines,
)
from madbench.gateway.providers.litellm_provider import LiteLLMProvider, import_litellm
from madbench.gateway.secrets import redact
from madbench.runner.lock import WriterGuard
from madbench.runner.wiring import build_providers

JOURNAL_DIR = "provider_batches"
#: A journaled batch the provider answered 404 for: its requests went to later batches (or failed), never polled again.
LOST = "lost"

log = logging.getLogger(__name__)


class ProviderBatchOptions(BaseModel):
    """``execution:`` in a batch file, in full (``execution: batch`` is these defaults)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    mode: Literal["batch"] = "batch"
    #: The longest a request waits to be submitted (when some run is busy elsewhere and never blocks).
    window_s: float = Field(60.0, gt=0)
    #: Quiet time after every run is blocked, for sibling calls of a phase still on their way.
    settle_s: float = Field(0.5, ge=0)
    #: Quiet time after which the queue goes even though some run in flight has not asked: it may be waiting for
    #: an identical request another run asked (the gateway sends those once), or still computing.
    idle_s: float = Field(2.0, gt=0)
    #: Seconds between two looks at a submitted batch.
    poll_s: float = Field(30.0, gt=0)
    #: Times a request an expired or failed batch left unanswered is submitted again before its call fails.
    max_resubmits: int = Field(3, ge=0)
    #: Seconds a submitted batch may go without one answer from the provider about it (every poll failing) before
    #: its calls fail with that reason; a batch the provider reports on is in progress however long it takes.
    stall_s: float = Field(600.0, gt=0)


class JournalEntry(BaseModel):
    """What ``<results>/provider_batches/<id>.json`` holds about one provider batch."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    id: str
    provider: str
    model: str
    api_base: str | None = None
    api_key_env: str | None = None
    #: The custom_id of each request in it: the gateway's key of the request as sent.
    keys: list[str]
    #: uploading → submitting → the provider's states (validating, in_progress, finalizing, completed, expired,
    #: failed, cancelling, cancelled); ``abandoned``: it never reached the provider (nothing to pay); ``lost``: the
    #: provider answered 404 for it (its requests went to later batches, or failed with the reason).
    state: str = "uploading"
    input_file_id: str | None = None
    batch_id: str | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    #: Result lines downloaded into <id>.output.jsonl.
    collected: bool = False
    #: Requests answered after no call was waiting for them any more (the driver that asked was killed): served from
    #: <id>.output.jsonl when asked again, once, instead of being paid for twice.
    undelivered: list[str] = Field(default_factory=list)
    request_counts: dict[str, int] | None = None
    answered: int = 0
    resubmitted: int = 0
    #: Which prices its calls are accounted at (madbench.gateway.providers.batching.batch_pricing).
    pricing: str = ""
    reason: str | None = None
    created: str = ""
    updated: str = ""

    @property
    def group(self) -> dict[str, Any]:
        return {"provider": self.provider, "model": self.model, "api_base": self.api_base, "api_key_env": self.api_key_env}


@dataclass
class Queued:
    group: dict[str, Any]
    body: dict[str, Any]
    since: float


def _now() -> str:
    t = time.time()  # to the millisecond: the journal is read back in this order
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}Z"


def read_journal(root: str | Path) -> list[JournalEntry]:
    """Every journaled provider batch of a results directory, oldest first; an ``InputError`` names a damaged entry."""
    entries = []
    for path in sorted((Path(root) / JOURNAL_DIR).glob("*.json")):
        try:
            entries.append(JournalEntry.model_validate_json(path.read_bytes()))
        except ValidationError as exc:
            raise InputError(path, f"not a provider-batch journal entry: {format_validation_error(exc)}",
                             "restore it; delete it only if its batch (batch_id) was never paid for, or its "
                             "requests will be paid for again") from None
    return sorted(entries, key=lambda e: (e.created, e.id))


def journal_summary(root: str | Path) -> dict[str, Any]:
    """How a results directory's runs used provider batches: batches created at the provider, requests in them,
    their states, and the prices they were accounted at (``madbench bench cost`` reads ``provider_batches``)."""
    entries = read_journal(root)
    created = [e for e in entries if e.batch_id is not None]
    requests, answered = sum(len(e.keys) for e in created), sum(e.answered for e in created)
    resubmitted = sum(e.resubmitted for e in entries)
    # The rest came back as error lines (a 500, a 429), which the gateway asked again in a later batch
    return {"provider_batches": len(created), "requests": requests, "answered": answered, "resubmitted": resubmitted,
            "errored": max(0, requests - answered - resubmitted),
            "states": dict(Counter(e.state for e in entries)),
            "pricing": {f"{e.provider}/{e.model}": e.pricing for e in created}}


def batch_problems(specs: list[ModelSpec]) -> list[str]:
    """Models a batch in provider batch mode would call that have no batch API madbench can use (one line each).
    Models answered locally (``rules/…``, ``local/…``) are called as always."""
    problems = set()
    providers = build_providers()
    for spec in specs:
        if isinstance(providers.for_model(spec.model), LiteLLMProvider):
            provider = batch_group(spec)["provider"]
            if provider not in BATCH_PROVIDERS:
                problems.add(f"{spec.model}: provider batch mode supports {', '.join(BATCH_PROVIDERS)} models (OpenAI's "
                             f"batch format), not {provider}: route it to one, or run without --provider-batch")
    return sorted(problems)


class Collector:
    """The provider batches of one batch of runs (see the module's docstring). Plain async Python: the driver runs
    it as a Ray actor (``start_collector``), a test may run it in its own event loop."""

    def __init__(self, root: str, holder: str | None, options: dict[str, Any] | None = None):
        self.dir = Path(root) / JOURNAL_DIR
        self.guard = WriterGuard(root, holder) if holder else None
        self.opt = ProviderBatchOptions.model_validate(options or {})
        self.expected: Counter[str] = Counter()  # run → in flight (dispatched and not yet settled)
        self.unresolved: Counter[str | None] = Counter()  # run → its calls waiting (for an answer, or a peer's)
        self.waiters: dict[str, list[asyncio.Future]] = {}
        self.asked: dict[str, Queued] = {}  # requests waited for: resubmitted from here when a batch drops one
        self.queued: dict[str, Queued] = {}
        self.in_batch: dict[str, str] = {}  # custom_id → the journaled batch holding it
        # custom_id → (its result line, the batch's id): paid answers nobody waited for yet, each served once (an
        # answer is the gateway's to cache; one asked again after that, e.g. when it failed validation, is a new sample)
        self.answers: dict[str, tuple[dict[str, Any], str]] = {}
        self.resubmits: Counter[str] = Counter()
        self.entries: dict[str, JournalEntry] = {}
        self.last_arrival = 0.0
        self.tasks: set[asyncio.Task] = set()
        self.lost_once: set[str] = set()  # requests already resubmitted after their batch was lost
        self.failures: list[str] = []  # background tasks that raised, and why (in stats)

    # ------------------------------------------------------------ the driver's side

    async def start(self) -> dict[str, Any]:
        """Read the journal (re-attaching to what a killed driver left in flight), then start flushing."""
        import_litellm()  # now, not while the first batch of the first phase waits
        self.dir.mkdir(parents=True, exist_ok=True)
        for entry in read_journal(self.dir.parent):
            self.entries[entry.id] = entry
            if entry.state == LOST:
                continue  # its requests were given to later batches, or failed; the runs ask again
            if entry.collected:
                self._load_answers(entry)
            elif entry.batch_id is not None:
                self._attach(entry)
                self._spawn(self._poll(entry), entry.id)
            elif entry.state == "submitting":
                self._attach(entry)
                self._spawn(self._reconcile(entry), entry.id)
            elif entry.state == "uploading":
                self._write(entry.model_copy(update={"state": "abandoned", "reason": "the driver stopped before the "
                                                     "upload was confirmed: never submitted"}))
        self._spawn(self._tick())
        return self.stats()

    async def expect(self, party: str) -> None:
        self.expected[party] += 1

    async def finished(self, party: str) -> None:
        self.expected[party] -= 1
        if self.expected[party] <= 0:
            del self.expected[party]

    def stats(self) -> dict[str, Any]:
        return {"queued": len(self.queued), "in_batch": len(self.in_batch), "answers": len(self.answers),
                "in_flight_runs": len(self.expected), "journaled": len(self.entries),
                "provider_batches": sum(1 for e in self.entries.values() if e.batch_id is not None),
                "failures": list(self.failures)}

    async def stop(self) -> dict[str, Any]:
        for task in list(self.tasks):
            task.cancel()
        return self.stats()

    # ------------------------------------------------------------ the calls' side

    async def ask(self, party: str | None, group: dict[str, Any], custom_id: str, body: dict[str, Any]) -> dict[str, Any]:
        """The result line for one request (madbench.gateway.providers.batching.BatchCollector)."""
        if custom_id in self.answers:
            return self._serve_kept(custom_id)
        fut = asyncio.get_running_loop().create_future()
        self.waiters.setdefault(custom_id, []).append(fut)
        self.asked[custom_id] = Queued(group, body, time.monotonic())
        if custom_id not in self.in_batch and custom_id not in self.queued:
            self.queued[custom_id] = self.asked[custom_id]
        self.last_arrival = time.monotonic()
        await self.follow(party, 1)
        try:
            return await fut
        finally:
            await self.follow(party, -1)

    async def follow(self, party: str | None, delta: int) -> None:
        """A call of ``party`` begins (1) or ends (-1) waiting: for its own request's answer (``ask``), or for an
        identical request another run asked (the run is blocked on a model call all the same)."""
        self.unresolved[party] += delta
        if self.unresolved[party] <= 0:
            del self.unresolved[party]

    @asynccontextmanager
    async def waiting_for_peer(self, party: str | None) -> AsyncIterator[None]:
        """``follow`` for a gateway in this process (a test's); runner actors' go through ``CollectorClient``."""
        await self.follow(party, 1)
        try:
            yield
        finally:
            await self.follow(party, -1)

    def _resolve(self, custom_id: str, line: dict[str, Any]) -> None:
        self.asked.pop(custom_id, None)
        for fut in self.waiters.pop(custom_id, []):
            if not fut.done():
                fut.set_result(line)

    def _serve_kept(self, custom_id: str) -> dict[str, Any]:
        line, entry_id = self.answers.pop(custom_id)
        entry = self.entries[entry_id]
        self._write(entry.model_copy(update={"undelivered": [k for k in entry.undelivered if k != custom_id]}))
        return line

    # ------------------------------------------------------------ flushing

    def due(self, now: float) -> bool:
        """Submit now: every run in flight is blocked on a call and none arrived for ``settle_s``, or none arrived
        for ``idle_s``, or the oldest queued request has waited ``window_s``."""
        if not self.queued:
            return False
        if now - min(q.since for q in self.queued.values()) >= self.opt.window_s:
            return True
        quiet = now - self.last_arrival
        if quiet < self.opt.settle_s:
            return False
        return quiet >= self.opt.idle_s or all(self.unresolved.get(p, 0) > 0 for p in self.expected)

    async def _tick(self) -> None:
        while True:
            if self.due(time.monotonic()):
                self.flush()
            await asyncio.sleep(0.05)

    def flush(self) -> list[str]:
        """Submit every queued request: one provider batch per group (provider account, endpoint, model)."""
        groups: dict[str, list[str]] = {}
        for custom_id, q in self.queued.items():
            groups.setdefault(json.dumps(q.group, sort_keys=True), []).append(custom_id)
        made = []
        for keys in groups.values():
            group = self.queued[keys[0]].group
            created = _now()
            entry = JournalEntry(id=f"pb-{created.replace(':', '').replace('-', '')[:-1]}-{uuid.uuid4().hex[:6]}", **group,
                                 keys=keys, pricing=batch_pricing(f"{group['provider']}/{group['model']}")["source"],
                                 created=created)
            lines = [{"custom_id": k, "method": "POST", "url": "/v1/chat/completions", "body": self.queued[k].body}
                     for k in keys]
            self._attach(entry)
            self._write(entry)  # the intent, before anything reaches the provider
            self._spawn(self._submit(entry, lines), entry.id)
            made.append(entry.id)
        self.queued.clear()
        return made

    # ------------------------------------------------------------ one provider batch

    async def _submit(self, entry: JournalEntry, lines: list[dict[str, Any]]) -> None:
        api = BatchAPI(entry.group)
        try:
            file_id = await api.upload(lines, f"{entry.id}.jsonl")
        except ProviderError as exc:
            return self._abandon(entry, f"upload failed: {exc.reason}", fatal=isinstance(exc, FatalProviderError))
        entry = self._write(entry.model_copy(update={"state": "submitting", "input_file_id": file_id}))
        self._check_guard()  # nothing is created for a driver that is gone
        try:
            batch = await api.create(file_id, {"madbench_batch": entry.id})
        except FatalProviderError as exc:
            return self._abandon(entry, f"create refused: {exc.reason}", fatal=True)
        except ProviderError:
            return await self._reconcile(entry)  # it may exist anyway: look before asking again
        entry = self._write(_seen(entry, batch))
        await self._poll(entry)

    async def _reconcile(self, entry: JournalEntry) -> None:
        """A batch whose creation was not confirmed: find it at the provider by its input file, or forget it. Its
        calls wait while the provider cannot say (submitting them again might pay twice)."""
        api = BatchAPI(entry.group)
        file_id = entry.input_file_id
        if file_id is None:  # "submitting" is written with the uploaded file's id
            raise ValueError(f"provider batch entry {entry.id}: submitting, with no input file (a bug)")
        while True:
            try:
                found = await api.find(file_id)
                break
            except FatalProviderError as exc:
                return self._abandon(entry, f"its creation was not confirmed and the provider's batches cannot be "
                                     f"listed ({exc.reason}): look for it on the provider's dashboard", fatal=True)
            except ProviderError:
                await asyncio.sleep(self.opt.poll_s)
        if found is None:
            return self._abandon(entry, "its creation was not confirmed and the provider lists no batch for its input "
                                 "file: never submitted")
        entry = self._write(_seen(entry, found))
        await self._poll(entry)

    async def _poll(self, entry: JournalEntry) -> None:
        api = BatchAPI(entry.group)
        answered = time.monotonic()  # the provider's last word about it
        batch_id = entry.batch_id
        if batch_id is None:  # polled only once the provider named its batch
            raise ValueError(f"provider batch entry {entry.id}: polled with no provider batch id (a bug)")
        while entry.state not in TERMINAL_STATES:
            await asyncio.sleep(self.opt.poll_s)
            try:
                batch = await api.retrieve(batch_id)
            except NotKnown as exc:
                return self._lost(entry, f"provider batch {entry.batch_id} is unknown to the provider ({exc.reason})")
            except FatalProviderError as exc:
                return self._fail_keys(entry, f"provider batch {entry.batch_id}: {exc.reason}")
            except ProviderError as exc:
                if time.monotonic() - answered > self.opt.stall_s:
                    reason = (f"provider batch {entry.batch_id}: no answer about it for {self.opt.stall_s:g} s "
                              f"(stall_s; last error: {exc.reason})")
                    return self._fail_keys(self._write(entry.model_copy(update={"reason": redact(reason)[:500]})), reason)
                continue  # a transient error: look again later
            answered = time.monotonic()
            if batch["status"] != entry.state:
                entry = self._write(_seen(entry, batch))
        await self._collect(entry, api)

    async def _collect(self, entry: JournalEntry, api: BatchAPI) -> None:
        """Download a finished batch's result lines (kept beside its journal), then answer the calls waiting."""
        data = b""
        for file_id in (entry.output_file_id, entry.error_file_id):
            while file_id:
                try:
                    data += await api.content(file_id)
                    break
                except FatalProviderError as exc:
                    return self._fail_keys(entry, f"results of provider batch {entry.batch_id}: {exc.reason}")
                except ProviderError:
                    await asyncio.sleep(self.opt.poll_s)
        self._check_guard()
        atomic_write_bytes(self.dir / f"{entry.id}.output.jsonl", data)
        lines = parse_lines(data)
        answered = [k for k in entry.keys if _ok(lines.get(k))]
        missing = [k for k in entry.keys if k not in lines or _dropped(lines[k])]
        entry = self._write(entry.model_copy(update={
            "collected": True, "answered": len(answered), "undelivered": [k for k in answered if k not in self.waiters],
            "resubmitted": sum(1 for k in missing if k in self.waiters)}))
        self._deliver(entry, lines, missing)

    def _deliver(self, entry: JournalEntry, lines: dict[str, dict[str, Any]], missing: list[str]) -> None:
        for key in entry.keys:
            if self.in_batch.get(key) == entry.id:
                del self.in_batch[key]
        for key in entry.keys:
            line = lines.get(key)
            if line is None or key in missing:  # a key without a line is among the missing
                self._resubmit(key, entry)
            elif _ok(line) and key not in self.waiters:
                self.answers[key] = (line | {"madbench_batch": entry.id}, entry.id)
            elif _ok(line):
                self._resolve(key, line | {"madbench_batch": entry.id})
            else:
                self._resolve(key, line | {"madbench_batch": entry.id})  # an error line: the gateway retries it

    def _resubmit(self, key: str, entry: JournalEntry) -> None:
        """A request the batch left unanswered (expired, failed, cancelled): into the next batch, if a call still
        waits for it."""
        if key not in self.waiters:
            return
        self.resubmits[key] += 1
        if self.resubmits[key] > self.opt.max_resubmits:
            self._resolve(key, {"error": {"kind": "fatal", "message": f"left unanswered by {self.resubmits[key]} "
                                          f"provider batches (the last, {entry.batch_id}, ended {entry.state})"}})
            return
        q = self.asked[key]
        self.queued[key] = Queued(q.group, q.body, time.monotonic())

    def _lost(self, entry: JournalEntry, reason: str) -> None:
        """The provider no longer knows a batch it accepted (its store was lost, or another account's): its requests
        are submitted once more, journaled as such; a request whose batch is lost a second time fails its call with
        the reason. Nothing polls it again, this driver or the next."""
        waiting = [k for k in entry.keys if self.in_batch.get(k) == entry.id and k in self.waiters]
        again = [k for k in waiting if k not in self.lost_once]
        entry = self._write(entry.model_copy(update={"state": LOST, "reason": redact(reason)[:500],
                                                     "resubmitted": entry.resubmitted + len(again)}))
        for key in entry.keys:
            if self.in_batch.get(key) == entry.id:
                del self.in_batch[key]
        for key in waiting:
            if key in again:
                self.lost_once.add(key)
                q = self.asked[key]
                self.queued[key] = Queued(q.group, q.body, time.monotonic())
            else:
                self._resolve(key, {"error": {"kind": "fatal", "message": redact(
                    f"{reason}; its request was already resubmitted once after a lost batch")[:500]}})

    def _abandon(self, entry: JournalEntry, reason: str, fatal: bool = False) -> None:
        """Nothing reached the provider (nothing to pay): each waiting call gets the error, and the gateway asks
        again after its backoff (into a later batch), or stops on a fatal one."""
        entry = self._write(entry.model_copy(update={"state": "abandoned", "reason": redact(reason)[:500]}))
        self._fail_keys(entry, reason, "fatal" if fatal else "transient")

    def _fail_keys(self, entry: JournalEntry, reason: str, kind: str = "fatal") -> None:
        for key in entry.keys:
            if self.in_batch.get(key) == entry.id:
                del self.in_batch[key]
                self._resolve(key, {"error": {"kind": kind, "message": redact(reason)[:500]}})

    # ------------------------------------------------------------ journal

    def _attach(self, entry: JournalEntry) -> None:
        for key in entry.keys:
            if key not in self.answers:
                self.in_batch[key] = entry.id

    def _load_answers(self, entry: JournalEntry) -> None:
        """The answers of a collected batch that no call received (its driver was killed)."""
        if not entry.undelivered:
            return
        lines = parse_lines((self.dir / f"{entry.id}.output.jsonl").read_bytes())
        for key in entry.undelivered:
            self.answers[key] = (lines[key] | {"madbench_batch": entry.id}, entry.id)

    def _write(self, entry: JournalEntry) -> JournalEntry:
        self._check_guard()
        entry = entry.model_copy(update={"updated": _now()})
        atomic_write_text(self.dir / f"{entry.id}.json", entry.model_dump_json(indent=1) + "\n")
        self.entries[entry.id] = entry
        return entry

    def _check_guard(self) -> None:
        if self.guard is not None:
            self.guard()

    def _spawn(self, coro, entry_id: str | None = None) -> None:
        """Run ``coro`` in the background for ``entry_id``'s provider batch (None: the flushing loop). An exception
        it raises is never lost: the calls it serves get it as a fatal error, so their runs fail with the reason."""
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(lambda t: self._ended(t, entry_id))

    def _ended(self, task: asyncio.Task, entry_id: str | None) -> None:
        self.tasks.discard(task)
        if task.cancelled() or task.exception() is None:
            return
        exc = task.exception()
        what = f"provider batch {entry_id}" if entry_id else "the provider-batch collector"
        reason = redact(f"{what} stopped on {type(exc).__name__}: {exc}".splitlines()[0])[:500]
        log.error("%s", reason)
        self.failures.append(reason)
        if entry_id is not None and entry_id in self.entries:
            self._fail_keys(self.entries[entry_id], reason)
        else:  # nothing flushes any more: every call waiting would wait for good
            for key in list(self.waiters):
                self.in_batch.pop(key, None)
                self.queued.pop(key, None)
                self._resolve(key, {"error": {"kind": "fatal", "message": reason}})


def _ok(line: dict[str, Any] | None) -> bool:
    return line is not None and not line.get("error") and (line.get("response") or {}).get("status_code") == 200


def _dropped(line: dict[str, Any]) -> bool:
    """A line that says the request was never run (the batch expired or was cancelled first)."""
    return (line.get("error") or {}).get("code") in ("batch_expired", "batch_cancelled")


def _seen(entry: JournalEntry, batch: dict[str, Any]) -> JournalEntry:
    """``entry`` as the provider last described its batch."""
    counts = batch.get("request_counts")
    return entry.model_copy(update={
        "batch_id": batch["id"], "state": batch["status"], "output_file_id": batch.get("output_file_id"),
        "error_file_id": batch.get("error_file_id"),
        "request_counts": None if counts is None else {k: int(v) for k, v in counts.items() if v is not None}})


class CollectorClient:
    """The ``BatchCollector`` a runner actor's gateway asks: a picklable handle on the batch's collector actor."""

    def __init__(self, handle):
        self.handle = handle
        #: Calls waiting for the collector, per party (run): a run waiting for a provider batch is alive (the
        #: collector's own watchdog fails a batch that stops answering).
        self.waiting: Counter[str | None] = Counter()

    async def ask(self, party: str | None, group: dict[str, Any], custom_id: str, body: dict[str, Any]) -> dict[str, Any]:
        self.waiting[party] += 1
        try:
            return await self.handle.ask.remote(party, group, custom_id, body)
        finally:
            self._done(party)

    @asynccontextmanager
    async def waiting_for_peer(self, party: str | None) -> AsyncIterator[None]:
        self.waiting[party] += 1
        try:
            await self.handle.follow.remote(party, 1)
            try:
                yield
            finally:
                await self.handle.follow.remote(party, -1)
        finally:
            self._done(party)

    def _done(self, party: str | None) -> None:
        self.waiting[party] -= 1
        if self.waiting[party] <= 0:
            del self.waiting[party]


def start_collector(ray, root: str | Path, holder: str, options: ProviderBatchOptions):
    """Start the batch's collector on this (the driver's) node, where the results directory is writable; returns its
    handle and the reference to ``ray.get`` before the first run is dispatched (its journal read, litellm loaded),
    so that it starts while the runner actors do."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    read_journal(root)  # a damaged entry is named here, in one line, not in the actor's traceback
    here = ray.get_runtime_context().get_node_id()
    cls = ray.remote(num_cpus=0, max_restarts=0, max_concurrency=100_000)(Collector)
    handle = cls.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=here, soft=False)).remote(
        str(root), holder, options.model_dump())
    return handle, handle.start.remote()


def stop_collector(ray, handle) -> dict[str, Any]:
    stats = ray.get(handle.stop.remote())
    ray.kill(handle)
    return stats
