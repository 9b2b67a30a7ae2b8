"""The progress of a job on stderr (`madbench run`, `madbench rescore`): runs done, failed, retried and in flight, with
their calls, tokens and spend, and an ETA; what one line says is the job's (``BatchLine``, ``RescoreLine``).

Counts come from the runs as they settle; ``poll``, when a job sets it, reads live counts from its actors (the batch's
spend from its budget actor, a rescore's calls from the actors' gateways), at most every ``POLL_S`` seconds.

On a terminal it is a tqdm bar; when stderr is a file or a pipe (a log, CI, nohup) it is one plain line every
``interval_s`` seconds, so logs get a readable history instead of carriage-return noise.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from typing import TextIO

from tqdm import tqdm

from madbench.runner.budget import spend_text
from madbench.runner.run_report import RunReport, Status

#: Seconds between plain lines when the stream is not a terminal (a batch's default).
PLAIN_INTERVAL_S = 30.0
#: Seconds between two reads of the live counts (``Progress.poll``).
POLL_S = 1.0


def eta_s(remaining: int, durations: list[float], concurrency: float) -> float | None:
    """Remaining runs × the median observed run duration ÷ the runs that proceed at once; None before any finished.

    The median keeps one slow or resumed run from swinging the estimate."""
    if not durations or remaining <= 0:
        return None if not durations else 0.0
    return remaining * statistics.median(durations) / max(1.0, concurrency)


def _fmt_s(s: float | None) -> str:
    if s is None:
        return "—"
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


class Progress:
    """The counts of a job's runs, shown on ``stream`` as ``text`` renders them (``enabled=False``: quiet)."""

    def __init__(self, total: int, text: Callable[[Progress, int], str], stream: TextIO | None = None,
                 enabled: bool = True, interval_s: float = PLAIN_INTERVAL_S):
        self.total, self.text = total, text
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.interval_s = interval_s
        self.done = self.failed = self.calls = self.cached = self.tokens = 0
        #: Runs that failed and were queued again (the batch's ``retries``), and the last one's reason: a persistent
        #: fault (a 529 waited out for ``outage_patience_s``) otherwise shows only as a stalled line.
        self.retried, self.last_retry = 0, ""
        self.unpriced = 0  # calls of a model without a known price: the spend is unknown, not $0 (budget.spend_text)
        self.cost = 0.0
        self.durations: list[float] = []
        self.concurrency = 1.0
        #: Live counts from the job's actors; None: only what the settled runs reported.
        self.poll: Callable[[], dict[str, float]] | None = None
        self._live: dict[str, float] = {}
        self._polled = float("-inf")
        self.t0 = time.monotonic()
        self.last = self.t0
        tty = enabled and hasattr(self.stream, "isatty") and self.stream.isatty()
        self.bar = tqdm(total=total, file=self.stream, unit="run", dynamic_ncols=True, mininterval=0.5) if tty else None

    def add(self, report: RunReport) -> None:
        """A run settled (committed ok, or failed for good): count it and what it spent."""
        if report.status is Status.OK:
            self.done += 1
        else:
            self.failed += 1
        self._spend(report)
        if report.wall_s is not None:
            self.durations.append(report.wall_s)
        if self.bar is not None:
            self.bar.update(1)

    def add_spend(self, report: RunReport) -> None:
        """A failed attempt whose run is retried: what it spent (the budget counts it too), and why it failed."""
        self.retried += 1
        self.last_retry = " ".join(str(report.error or "no reason given").split())[:80]
        self._spend(report)

    def _spend(self, report: RunReport) -> None:
        t = report.totals
        self.calls += t.get("calls", 0)
        self.cached += t.get("cached", 0)
        self.tokens += t.get("prompt_tokens", 0) + t.get("completion_tokens", 0)
        self.cost += t.get("cost_usd", 0.0) or 0.0
        self.unpriced += t.get("calls_with_unknown_cost", 0) or 0

    def live(self) -> dict[str, float]:
        """The latest live counts (read again when ``POLL_S`` has passed); a poll that brings nothing keeps the last."""
        now = time.monotonic()
        if self.poll is not None and now - self._polled >= POLL_S:
            self._live, self._polled = self._live | self.poll(), now
        return self._live

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.t0

    def eta(self) -> str:
        return _fmt_s(eta_s(self.total - self.done - self.failed, self.durations, self.concurrency))

    def line(self, running: int) -> str:
        return self.text(self, running)

    def _observe(self, running: int) -> None:
        # The runs that proceed at once: a running average of what was in flight, at least one.
        self.concurrency = (0.9 * self.concurrency + 0.1 * max(1, running) if self.done + self.failed
                            else max(1.0, float(running)))

    def show(self, running: int, force: bool = False) -> None:
        if not self.enabled:
            return
        self._observe(running)
        if self.bar is not None:  # a terminal's bar shows what follows the line's first " | "
            self.bar.set_postfix_str(self.line(running).split(" | ", 1)[1], refresh=force)
            return
        now = time.monotonic()
        if force or now - self.last >= self.interval_s:
            self.last = now
            print(self.line(running), file=self.stream, flush=True)

    def close(self, running: int) -> None:
        """The last line, with the final counts (read live once more)."""
        if not self.enabled:
            return
        self._polled = float("-inf")
        self._observe(running)
        if self.bar is not None:
            self.bar.set_postfix_str(self.line(running).split(" | ", 1)[1], refresh=True)
            self.bar.close()
        print(self.line(running), file=self.stream, flush=True)


def _dollars(x: float) -> str:
    return f"${x:.2f}" if x >= 1 else f"${x:.4g}"


class BatchLine:
    """`madbench run`'s line. The spend is the batch's, over every invocation of the same command: the budget actor's
    ledger when the driver polls it (``spent_usd``), else what budget.json held when the runs started
    (``spent_at_start``) plus the runs' as they settle; ``spent_before`` is what earlier invocations spent (less than
    ``spent_at_start`` by what this one spent before its runs started: its leakage probe, a first wave)."""

    def __init__(self, budget: float | None, spent_before: float = 0.0, spent_at_start: float | None = None):
        self.budget, self.spent_before = budget, spent_before
        self.spent_at_start = spent_before if spent_at_start is None else spent_at_start

    def __call__(self, p: Progress, running: int) -> str:
        elapsed, live = p.elapsed_s, p.live()
        # The actors' live counts move per call; the settled runs' are the floor (an actor may not have answered).
        calls, cached = max(p.calls, int(live.get("calls", 0))), max(p.cached, int(live.get("cached", 0)))
        tokens, failed_calls = max(p.tokens, int(live.get("tokens", 0))), int(live.get("failed", 0))
        rate = f"{calls / elapsed:.2f} calls/s" if calls and elapsed > 0 else "— calls/s"
        hit = f", cache {cached / calls:.0%}" if calls else ""
        invalid = f" ({failed_calls} failed)" if failed_calls else ""
        spent = live.get("spent_usd", self.spent_at_start + p.cost)
        budget = f" of {_dollars(self.budget)}" if self.budget else ""
        earlier = f" (${self.spent_before:.4f} before this invocation)" if self.spent_before else ""
        # Its own segment: a terminal's bar shows what follows the first " | " (Progress.show).
        retried = f" | retried {p.retried} (last: {p.last_retry})" if p.retried else ""
        return (f"{p.done + p.failed}/{p.total} runs: {p.done} ok, {p.failed} failed, {running} in flight{retried} | "
                f"{rate}{invalid}{hit}, {tokens} tokens, {spend_text(spent, p.unpriced)}{budget}{earlier} | elapsed "
                f"{_fmt_s(elapsed)}, ETA {p.eta()}")


class RescoreLine:
    """`madbench rescore`'s line: runs scored and failed, and the calls and cache hits of the actors' gateways (live:
    ``calls`` and ``cached``), or of the settled runs where those are more."""

    def __init__(self, label: str):
        self.label = label

    def __call__(self, p: Progress, running: int) -> str:
        live, el = p.live(), p.elapsed_s
        calls, cached = max(p.calls, int(live.get("calls", 0))), max(p.cached, int(live.get("cached", 0)))
        return (f"rescore {self.label}: {p.done + p.failed}/{p.total} runs (scored {p.done}, failed {p.failed}, in "
                f"flight {running}) | {calls} calls, {cached} cache hits, {calls / el if el else 0:.1f} calls/s | "
                f"{el:.0f} s")
