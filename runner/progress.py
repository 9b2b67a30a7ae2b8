"""A batch's progress on stderr: runs done, failed and in flight, calls/s, tokens, spend against the budget, ETA.

The spend is the batch's, over every invocation of the same command: what earlier ones spent (``spent_before``,
from budget.json) plus this one's, read from the batch's budget actor when the driver connects it (``spent_source``,
polled at most every ``SPENT_POLL_S``), else summed from the runs as they settle.

On a terminal it is a tqdm bar; when stderr is a file or a pipe (a log, CI, nohup) it is one plain line every
``interval_s`` seconds, so logs get a readable history instead of carriage-return noise.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from tqdm import tqdm

from madbench.runner.budget import spend_text

#: Seconds between plain lines when the stream is not a terminal.
PLAIN_INTERVAL_S = 30.0
#: Seconds between two reads of the batch's spend from its budget actor.
SPENT_POLL_S = 1.0


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
    def __init__(self, total: int, budget: float | None, stream: TextIO | None = None, enabled: bool = True,
                 interval_s: float = PLAIN_INTERVAL_S, spent_before: float = 0.0):
        self.total, self.budget = total, budget
        self.spent_before = spent_before
        #: The batch's spend now, over every invocation (the budget actor's ledger); None: summed from the runs.
        self.spent_source: Callable[[], float] | None = None
        self._spent, self._polled = spent_before, float("-inf")
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
        self.t0 = time.monotonic()
        self.last = self.t0
        tty = enabled and hasattr(self.stream, "isatty") and self.stream.isatty()
        self.bar = tqdm(total=total, file=self.stream, unit="run", dynamic_ncols=True, mininterval=0.5) if tty else None

    def add(self, summary: dict[str, Any]) -> None:
        """A run settled (committed ok, or failed for good): count it and what it spent."""
        if summary["status"] == "ok":
            self.done += 1
        else:
            self.failed += 1
        self._spend(summary)
        if summary.get("wall_s") is not None:
            self.durations.append(summary["wall_s"])
        if self.bar is not None:
            self.bar.update(1)

    def add_spend(self, summary: dict[str, Any]) -> None:
        """A failed attempt whose run is retried: what it spent (the budget counts it too), and why it failed."""
        self.retried += 1
        self.last_retry = " ".join(str(summary.get("error") or "no reason given").split())[:80]
        self._spend(summary)

    def _spend(self, summary: dict[str, Any]) -> None:
        t = summary.get("totals") or {}
        self.calls += t.get("calls", 0)
        self.cached += t.get("cached", 0)
        self.tokens += t.get("prompt_tokens", 0) + t.get("completion_tokens", 0)
        self.cost += t.get("cost_usd", 0.0) or 0.0
        self.unpriced += t.get("calls_with_unknown_cost", 0) or 0

    def batch_spent(self) -> float:
        """What the batch has spent over every invocation, this one included."""
        if self.spent_source is None:
            return self.spent_before + self.cost
        now = time.monotonic()
        if now - self._polled >= SPENT_POLL_S:
            self._spent, self._polled = self.spent_source(), now
        return self._spent

    def line(self, running: int) -> str:
        elapsed = time.monotonic() - self.t0
        finished = self.done + self.failed
        # The runs that proceed at once: a running average of what was in flight, at least one.
        self.concurrency = 0.9 * self.concurrency + 0.1 * max(1, running) if finished else max(1.0, float(running))
        rate = f"{self.calls / elapsed:.2f} calls/s" if self.calls and elapsed > 0 else "— calls/s"
        hit = f", cache {self.cached / self.calls:.0%}" if self.calls else ""
        budget = "" if not self.budget else f" of ${self.budget:.2f}" if self.budget >= 1 else f" of ${self.budget:.4g}"
        earlier = f" (${self.spent_before:.4f} before this invocation)" if self.spent_before else ""
        eta = eta_s(self.total - finished, self.durations, self.concurrency)
        # Its own segment: a terminal's bar shows what follows the first " | " (show).
        retried = f" | retried {self.retried} (last: {self.last_retry})" if self.retried else ""
        return (f"{finished}/{self.total} runs: {self.done} ok, {self.failed} failed, {running} in flight{retried} | {rate}{hit}, "
                f"{self.tokens} tokens, {spend_text(self.batch_spent(), self.unpriced)}{budget}{earlier} | elapsed "
                f"{_fmt_s(elapsed)}, ETA {_fmt_s(eta)}")

    def show(self, running: int, force: bool = False) -> None:
        if not self.enabled:
            return
        text = self.line(running)
        if self.bar is not None:
            self.bar.set_postfix_str(text.split(" | ", 1)[1], refresh=force)
            return
        now = time.monotonic()
        if force or now - self.last >= self.interval_s:
            self.last = now
            print(text, file=self.stream, flush=True)

    def close(self, running: int) -> None:
        if not self.enabled:
            return
        self._polled = float("-inf")  # the last line shows the final spend
        if self.bar is not None:
            self.show(running, force=True)
            self.bar.close()
        print(self.line(running), file=self.stream, flush=True)
