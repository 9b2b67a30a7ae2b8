"""A simulated OpenAI-compatible provider on 127.0.0.1, for benchmarks users run on their own setup.

It enforces its own RPM/TPM limits over a sliding 60-second window and answers
429 with Retry-After when they are exceeded, like a hosted provider, with a
configurable latency distribution (lognormal around a median). Debate turns
(requests from a model spec with ``send_context``) are answered by the
rule-based analysts, so answers are valid for the requested schema; anything
else gets a small JSON object echoing a digest of the prompt.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from runner.sim.http_stub import JSONHandler, StubServer, chat_completion
from scoring.rule_answers import answer_for_context


@dataclass
class SimConfig:
    latency_median_s: float = 0.0
    latency_sigma: float = 0.5
    rpm: float | None = None
    tpm: float | None = None
    seed: int = 0


@dataclass
class SimStats:
    requests: int = 0
    rejected_429: int = 0
    outage_refusals: int = 0
    arrivals: list[float] = field(default_factory=list)
    admitted: list[float] = field(default_factory=list)  # monotonic times of requests let through


class SimProvider(StubServer):
    def __init__(self, config: SimConfig | None = None, answer_filter=None, record_bodies: bool = False,
                 host: str = "127.0.0.1", port: int = 0):
        self.config = config or SimConfig()
        #: Optional fault injection for tests: (context, content) -> content.
        self.answer_filter = answer_filter
        self.stats = SimStats()
        #: Request bodies as received (only with record_bodies): what a model would actually have been shown.
        self.bodies: list[dict] | None = [] if record_bodies else None
        self._rng = random.Random(self.config.seed)
        self._lock = threading.Lock()
        self._window: deque[tuple[float, int]] = deque()  # (time, tokens) of admitted requests
        self.outage_until = 0.0
        sim = self

        class Handler(JSONHandler):
            def do_POST(self):
                body = self.read_json()
                if sim.bodies is not None:
                    sim.bodies.append(body)
                if time.monotonic() < sim.outage_until:
                    sim.stats.outage_refusals += 1
                    return self.send_json(503, {"error": {"message": "simulated outage", "type": "service_unavailable"}})
                prompt = json.dumps(body.get("messages"), sort_keys=True)
                tokens = len(prompt) // 4 + 16
                retry_after, delay = sim._admit(tokens)
                if retry_after is not None:
                    return self.send_json(429, {"error": {"message": "simulated rate limit", "type": "rate_limit_error"}},
                                          {"Retry-After": str(max(1, math.ceil(retry_after)))})
                if delay:
                    time.sleep(delay)
                digest = hashlib.sha256(prompt.encode()).hexdigest()[:16]
                if "madbench_context" in body:  # a debate turn: answer it with the rule-based analysts
                    content = answer_for_context(body["madbench_context"])
                    if sim.answer_filter is not None:
                        content = sim.answer_filter(body["madbench_context"], content)
                else:
                    content = json.dumps({"answer": digest})
                self.send_json(200, chat_completion(content, body.get("model", "sim"), len(prompt) // 4,
                                                    len(content) // 4, digest))

        super().__init__(Handler, host, port)

    def outage(self, seconds: float) -> None:
        """Answer every request with 503 for the next ``seconds`` (a provider outage)."""
        self.outage_until = time.monotonic() + seconds

    def _admit(self, tokens: int) -> tuple[float | None, float]:
        """(retry_after, latency): a request over the sliding-window limits is refused with a retry hint."""
        c = self.config
        with self._lock:
            now = time.monotonic()
            self.stats.requests += 1
            self.stats.arrivals.append(now)
            while self._window and self._window[0][0] <= now - 60.0:
                self._window.popleft()
            over_rpm = c.rpm is not None and len(self._window) + 1 > c.rpm
            over_tpm = c.tpm is not None and sum(t for _, t in self._window) + tokens > c.tpm
            if over_rpm or over_tpm:
                self.stats.rejected_429 += 1
                return (self._window[0][0] + 60.0 - now if self._window else 1.0), 0.0
            self._window.append((now, tokens))
            self.stats.admitted.append(now)
            delay = 0.0 if c.latency_median_s <= 0 else self._rng.lognormvariate(math.log(c.latency_median_s), c.latency_sigma)
        return None, delay
