"""The one dispatch loop of the runner's Ray jobs (`madbench run`, `madbench rescore`).

Units of work go to a pool of actors spread over the cluster, at most ``max_in_flight`` outstanding (``ray.wait``).
A unit whose actor died (or its node, or an actor it depends on) is not at fault: the actor is replaced and the unit
requeued first, its attempt not counted. A unit that failed is queued again while its attempts are at most
``retries``. A unit that reports the budget reached stops the submitting; the loop ends once the rest returns.
Ctrl-C ends it too, keeping what has settled. What a unit is, how it is sent and what its answer means is the job's
``Work``; the progress display (runner/progress.py) counts each unit as it settles.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterator
from typing import Any, Generic, TypeVar

from madbench.runner.progress import Progress
from madbench.runner.run_report import RunReport, Status

#: What a pool's actor reserves: no CPU. A runner actor mostly waits on providers, so reserving a CPU would cap the
#: actors of a node at its CPU count for nothing, and leave them pending on a local Ray with fewer CPUs than
#: ``workers``. Hence the autoscaler sees no demand from them: cluster.yaml sizes its workers itself.
ACTOR_NUM_CPUS = 0

#: Seconds between two calls of ``Work.tick`` (a batch rewrites its manifest then: what `madbench status` reads).
STATUS_INTERVAL_S = 2.0

#: How a dispatch ended (a batch's manifest records it as its state).
FINISHED, BUDGET_STOP, INTERRUPTED = "finished", "stopped: budget reached", "interrupted"

#: Seconds a unit may go without progress (``Work.beat``) before the watchdog fails it and replaces its actor: a batch
#: setting (``stall_timeout_s``). Longer than any one call's retries and backoff (``outage_patience_s`` is 300 s).
STALL_S = 600.0


class Stalled(RuntimeError):
    """A unit made no progress for the watchdog's time: failed with this reason, its actor replaced."""


def _pick_node(ray, load: Counter, avoid: set[str]) -> str:
    """The alive node that hosts fewest of the pool's actors (ties in node id order): the actors spread over a
    cluster even though they reserve no CPU (a soft affinity let Ray pack them all on the head node), round-robin
    as the pool starts, and a replacement goes to the least busy live node, one that joined meanwhile included.
    Nodes that lost an actor are avoided while another is alive: Ray may still list a dead node as alive for a
    few seconds."""
    alive = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])
    nodes = [n for n in alive if n not in avoid] or alive
    return min(nodes, key=lambda n: (load[n], nodes.index(n)))


#: Slots of each actor kept beside its units' for the questions the driver asks while they run: at most one ``totals``
#: (the progress line) and one ``beats`` (the watchdog) at a time. An async actor runs at most ``max_concurrency``
#: calls at once, so with every unit slot taken they would wait for a unit to end: the line would move per run, and
#: the watchdog would take a busy actor for a stuck one.
MONITOR_SLOTS = 2


class ActorPool:
    """``n_workers`` actors of ``actor_class``, spread over the cluster's nodes; a lost actor is replaced.
    ``max_concurrency``: the units one actor may run at once (the driver's questions have slots of their own)."""

    def __init__(self, ray, actor_class: type, args: tuple, n_workers: int, max_concurrency: int):
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        self.ray, self._affinity = ray, NodeAffinitySchedulingStrategy
        slots = max(1, max_concurrency) + MONITOR_SLOTS
        self._cls = ray.remote(num_cpus=ACTOR_NUM_CPUS, max_concurrency=slots)(actor_class)
        self._args = args
        self.node_of: dict[int, str] = {}
        self.lost_nodes: set[str] = set()
        self.replacements = 0
        self._asked: dict[int, Any] = {}     # actor index -> its totals question in flight (``totals``)
        self._counted: dict[int, dict[str, Any]] = {}  # actor index -> its last counts
        self.actors = [self._start(k) for k in range(n_workers)]

    def _start(self, k: int):
        self.node_of[k] = _pick_node(self.ray, Counter(n for j, n in self.node_of.items() if j != k), self.lost_nodes)
        strategy = self._affinity(node_id=self.node_of[k], soft=False)
        return self._cls.options(scheduling_strategy=strategy).remote(*self._args)

    def totals(self) -> dict[str, float]:
        """The actors' gateways' live counts summed (``calls``, ``cached``, ``failed``, ``tokens``): what the progress
        line shows between runs' settling. Never waits: it reads the answers to the previous call's questions that have
        come, and asks again; an actor busy in CPU-bound work (rule models) answers later, and its last counts stand.
        A dead actor's question is dropped here (the dispatch loop replaces the actor and reports the loss)."""
        ray = self.ray
        for k, ref in list(self._asked.items()):
            if ray.wait([ref], timeout=0)[0]:
                del self._asked[k]
                try:
                    self._counted[k] = ray.get(ref)
                except ray.exceptions.RayActorError:
                    continue
        for k, actor in enumerate(self.actors):
            self._asked.setdefault(k, actor.totals.remote())
        every = list(self._counted.values())
        return {"calls": sum(t["calls"] for t in every), "cached": sum(t["cached"] for t in every),
                "failed": sum(t["failed"] for t in every),
                "tokens": sum(t["prompt_tokens"] + t["completion_tokens"] for t in every)}

    def replace(self, k: int, handle, exc: Exception) -> None:
        """Actor k (``handle``) died; the first of its runs to report replaces it, once."""
        if self.actors[k] is not handle:
            return
        self.replacements += 1
        self.lost_nodes.add(self.node_of[k])
        if self.replacements > 3 * len(self.actors):
            raise RuntimeError(f"runner actors keep dying ({self.replacements} replacements); last error: "
                               f"{str(exc).splitlines()[0][:500]}") from None
        self.actors[k] = self._start(k)

    def restart(self, k: int, handle) -> None:
        """Replace actor k (``handle``), alive but stuck (the watchdog's call): killed, and a fresh one started on
        the same node. Its other units report the kill and are requeued, their attempts not counted."""
        if self.actors[k] is not handle:
            return
        self.ray.kill(handle)
        strategy = self._affinity(node_id=self.node_of[k], soft=False)
        self.actors[k] = self._cls.options(scheduling_strategy=strategy).remote(*self._args)

    def kill_all(self) -> None:
        for a in self.actors:
            self.ray.kill(a)


Unit = TypeVar("Unit")


@contextlib.contextmanager
def ctrl_c_requests() -> Iterator[threading.Event]:
    """Ctrl-C, while the dispatch loop runs, as a request it takes between two steps (the event is set) rather than
    an exception raised wherever the main thread happens to be: raised inside a library (pydantic serialising a run
    to send, say), it came out as that library's error and a traceback. A second Ctrl-C raises at once, as usual.
    Off the main thread (the API called from a thread) signals cannot be caught: Ctrl-C raises there as before."""
    asked = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield asked
        return

    def request(signum: int, frame: Any) -> None:
        asked.set()
        signal.signal(signal.SIGINT, signal.default_int_handler)

    previous = signal.signal(signal.SIGINT, request)
    try:
        yield asked
    finally:
        signal.signal(signal.SIGINT, previous)


class Work(ABC, Generic[Unit]):
    """What a job dispatches: how a unit is sent to an actor, and what its answer means. The hooks a job does not
    need do nothing."""

    #: What Ctrl-C keeps, for the line it prints.
    kept: str
    #: Whether the watchdog watches its units (``beat`` answers progress markers).
    watched: bool = False

    @abstractmethod
    def key(self, unit: Unit) -> str:
        """The unit's id (its attempts are counted by it)."""

    @abstractmethod
    def submit(self, handle, unit: Unit, k: int, attempt: int):
        """Send ``unit`` to actor ``k`` (``handle``) as its ``attempt``-th attempt; the ObjectRef of its answer."""

    @abstractmethod
    def settle(self, unit: Unit, answer: Any, k: int, handle) -> RunReport:
        """What the unit's answer (or ``failure``'s) means, acted on; the report the loop and the progress read."""

    @abstractmethod
    def failure(self, unit: Unit, exc: Exception) -> Any:
        """The answer that stands for a unit whose call raised (a bug in it, not a lost actor)."""

    def returned(self, unit: Unit) -> None:
        """The unit is no longer in flight (whatever its answer)."""

    def lost(self, k: int) -> None:
        """Actor k died and was replaced."""

    def withdrawn(self, unit: Unit, attempts: int) -> None:
        """The unit's last attempt did not count (its actor died, or the budget stopped it): ``attempts`` remain."""

    def enough(self) -> bool:
        """The job needs no more units (a sequential batch's decision): nothing more is submitted, and the loop ends
        once the units in flight return."""
        return False

    def waits(self, unit: Unit) -> bool:
        """``unit`` is not to be sent yet (a sequential batch holds the scenarios past its next look until the look
        is taken): the first unit in the queue that does not wait goes first, and when every one waits the loop sends
        the head anyway once nothing is in flight, so a hold never stalls it."""
        return False

    def needed(self, unit: Unit) -> bool:
        """Whether ``unit`` is still wanted (a sweep's arm that a look stopped wants no more runs): one that is not is
        taken off the queue unsent, and the job marks it."""
        return True

    def tick(self) -> None:
        """Every ``STATUS_INTERVAL_S`` seconds while the loop runs."""

    def beat(self, handle):
        """The ObjectRef of actor ``handle``'s progress markers, {unit key: marker} for its units in flight (a
        marker that changes is progress; None: alive, waiting on something watched elsewhere); None: this job's
        units are not watched."""
        return None


class Dispatch(Generic[Unit]):
    """Feeds ``todo`` to the pool's actors with at most ``max_in_flight`` outstanding, and settles each as it returns."""

    def __init__(self, pool: ActorPool, work: Work[Unit], todo: list[Unit], max_in_flight: int, progress: Progress,
                 retries: int = 0, stall_s: float = STALL_S):
        self.pool, self.work, self.progress = pool, work, progress
        self.max_in_flight, self.retries, self.stall_s = max_in_flight, retries, stall_s
        self.marks: dict[str, tuple[Any, float]] = {}  # unit key → (its last progress marker, when it last changed)
        self.beating: dict[int, tuple[Any, Any]] = {}  # actor index → (the ref of the markers asked of it, its handle)
        self.up: dict[int, tuple[Any, float]] = {}  # actor index → (its handle, when it first answered)
        self.queue = list(todo)
        self.in_flight: dict[Any, tuple[Unit, int, Any]] = {}  # ref → (unit, actor index, actor handle)
        self.attempts: Counter = Counter()  # unit key → attempts made in this dispatch
        self.budget_hit = False
        self.sent = 0
        self.last_tick = 0.0

    def run(self) -> str:
        """Until every unit settled (``FINISHED``), the budget stopped it (``BUDGET_STOP``) or Ctrl-C (``INTERRUPTED``);
        the progress display's last line is shown and the actors killed however it ends."""
        try:
            with ctrl_c_requests() as asked:
                state = self._loop(asked)
        except KeyboardInterrupt:  # a second Ctrl-C, or Ctrl-C where the loop cannot take it as a request
            state = INTERRUPTED
        finally:
            self.progress.close(len(self.in_flight))
            self.pool.kill_all()
        if state == INTERRUPTED:
            print(f"\ninterrupted: {self.work.kept}; run the same command again to resume", file=sys.stderr)
        return state

    def _loop(self, asked: threading.Event) -> str:
        while self.queue or self.in_flight:
            if asked.is_set():
                return INTERRUPTED
            self._submit()
            ready, _ = self.pool.ray.wait(list(self.in_flight), num_returns=1, timeout=1.0)
            for ref in ready:
                self._settle(ref)
            self.progress.show(len(self.in_flight))
            now = time.monotonic()
            if now - self.last_tick >= STATUS_INTERVAL_S:
                self.last_tick = now
                self.work.tick()
                self._watch(now)
            if self.budget_hit and not self.in_flight:
                return BUDGET_STOP
            if self.work.enough() and not self.in_flight:
                return FINISHED  # the units left are not needed (the job marks them)
        return FINISHED

    def _submit(self) -> None:
        while self.queue and len(self.in_flight) < self.max_in_flight and not self.budget_hit and not self.work.enough():
            ready = next((i for i, u in enumerate(self.queue) if not self.work.waits(u)), None)
            if ready is None and self.in_flight:
                break
            unit = self.queue.pop(ready or 0)
            if not self.work.needed(unit):
                continue  # taken off unsent: the job marks it
            key = self.work.key(unit)
            self.attempts[key] += 1
            k = self.sent % len(self.pool.actors)
            handle = self.pool.actors[k]
            self.in_flight[self.work.submit(handle, unit, k, self.attempts[key])] = (unit, k, handle)
            self.marks[key] = (None, time.monotonic())  # a fresh attempt: its time without progress starts now
            self.sent += 1

    def _settle(self, ref) -> None:
        ray = self.pool.ray
        unit, k, handle = self.in_flight.pop(ref)
        self.work.returned(unit)
        try:
            answer = ray.get(ref)
        except ray.exceptions.RayActorError as exc:
            # The actor, its node, or an actor the unit depends on (a limiter) died: not the unit's fault. Replace the
            # actor and requeue the unit first; it resumes with its paid calls served from the cache.
            self.pool.replace(k, handle, exc)
            self.work.lost(k)
            self._withdraw(unit)
            return
        except ray.exceptions.RayError as exc:  # a bug in the unit: it failed, the job goes on
            answer = self.work.failure(unit, exc)
        self._account(unit, answer, k, handle)

    def _watch(self, now: float) -> None:
        """The watchdog: read the actors' progress markers that came back, ask again, and fail every unit in flight
        that made no progress for ``stall_s`` (its actor replaced). Never blocks: an actor too stuck to answer shows
        no progress."""
        if not self.work.watched:
            return
        ray = self.pool.ray
        for k, (ref, handle) in list(self.beating.items()):
            if not ray.wait([ref], timeout=0)[0]:
                continue
            del self.beating[k]
            try:
                marks = ray.get(ref)
            except ray.exceptions.RayError:
                continue  # the actor is gone: its units report that themselves
            if self.up.get(k, (None,))[0] is not handle:
                self.up[k] = (handle, now)
            for key, mark in marks.items():
                if key in self.marks and (mark is None or mark != self.marks[key][0]):
                    self.marks[key] = (mark, now)
        busy = {k: h for _, k, h in self.in_flight.values()}
        for k, handle in busy.items():
            if k not in self.beating and self.pool.actors[k] is handle:
                ref = self.work.beat(handle)
                if ref is not None:
                    self.beating[k] = (ref, handle)
        for ref, (unit, k, handle) in list(self.in_flight.items()):
            since = self.marks[self.work.key(unit)][1]
            up_handle, up_since = self.up.get(k, (None, 0.0))
            # Counted from when its actor is up (a cold start on a loaded node may take minutes); an actor that never
            # answers at all (never started, or blocked from the start) is given three times as long.
            idle, limit = (now - max(since, up_since), self.stall_s) if up_handle is handle else (now - since, 3 * self.stall_s)
            if idle > limit and ref in self.in_flight:
                self._stalled(ref, unit, k, handle, idle)

    def _stalled(self, ref, unit: Unit, k: int, handle, idle: float) -> None:
        del self.in_flight[ref]
        self.work.returned(unit)
        self.beating.pop(k, None)
        self.pool.restart(k, handle)
        self.work.lost(k)
        exc = Stalled(f"no progress for {idle:.0f} s (the watchdog's stall_timeout_s is {self.stall_s:g} s): failed, and "
                      "its runner actor replaced")
        self._account(unit, self.work.failure(unit, exc), k, handle)

    def _account(self, unit: Unit, answer: Any, k: int, handle) -> None:
        report = self.work.settle(unit, answer, k, handle)
        if report.status is Status.BUDGET_REACHED:
            self.budget_hit = True
            self._withdraw(unit)
        elif report.status is Status.FAILED and self.attempts[self.work.key(unit)] <= self.retries:
            self.progress.add_spend(report)  # the failed attempt's calls were paid
            self.queue.append(unit)  # retried with its reason kept in the trace
        else:
            self.progress.add(report)

    def _withdraw(self, unit: Unit) -> None:
        key = self.work.key(unit)
        self.attempts[key] -= 1
        self.work.withdrawn(unit, self.attempts[key])
        self.queue.insert(0, unit)
