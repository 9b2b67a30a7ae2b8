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
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


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
    arrivals: list[float] = field(default_factory=list)


class SimProvider:
    def __init__(self, config: SimConfig | None = None, answer_filter=None):
        self.config = config or SimConfig()
        #: Optional fault injection for tests: (context, content) -> content.
        self.answer_filter = answer_filter
        self.stats = SimStats()
        self._rng = random.Random(self.config.seed)
        self._lock = threading.Lock()
        self._window: deque[tuple[float, int]] = deque()  # (time, tokens) of admitted requests
        sim = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def setup(self):
                super().setup()
                # Headers and body go out in two writes; without this, Nagle plus delayed ACK adds ~40 ms per call.
                self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def do_GET(self):
                self._send(200, {"object": "list", "data": [{"id": "sim", "object": "model"}]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                prompt = json.dumps(body.get("messages"), sort_keys=True)
                tokens = len(prompt) // 4 + 16
                retry_after, delay = sim._admit(tokens)
                if retry_after is not None:
                    return self._send(429, {"error": {"message": "simulated rate limit", "type": "rate_limit_error"}},
                                      {"Retry-After": str(max(1, math.ceil(retry_after)))})
                if delay:
                    time.sleep(delay)
                digest = hashlib.sha256(prompt.encode()).hexdigest()[:16]
                if "madbench_context" in body:  # a debate turn: answer it with the rule-based analysts
                    from runner.gateway.providers.rules import answer_for_context
                    content = answer_for_context(body["madbench_context"])
                    if sim.answer_filter is not None:
                        content = sim.answer_filter(body["madbench_context"], content)
                else:
                    content = json.dumps({"answer": digest})
                self._send(200, {
                    "id": f"chatcmpl-{digest}", "object": "chat.completion", "created": 0, "model": body.get("model", "sim"),
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": content}}],
                    "usage": {"prompt_tokens": len(prompt) // 4, "completion_tokens": len(content) // 4,
                              "total_tokens": len(prompt) // 4 + len(content) // 4}})

            def _send(self, status, payload, headers=None):
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

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
            delay = 0.0 if c.latency_median_s <= 0 else self._rng.lognormvariate(math.log(c.latency_median_s), c.latency_sigma)
        return None, delay

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._httpd.shutdown()
        self._httpd.server_close()
