"""A fault-injecting OpenAI-compatible HTTP server for tests (a test double, used only to inject faults).

It really listens on 127.0.0.1 and speaks the chat-completions wire format, so
the gateway is exercised through litellm and httpx exactly as with a real
provider. Faults are drawn per request from a seeded RNG: 429 with
Retry-After, 500, a stall past the client's timeout, and a 200 whose content is
not JSON. A successful answer echoes a digest of the prompt, so tests can tell
answers apart.
"""

from __future__ import annotations

import hashlib
import json
import random
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Faults:
    rate_limit: float = 0.0
    server_error: float = 0.0
    timeout: float = 0.0
    invalid_json: float = 0.0
    unauthorized: float = 0.0
    retry_after: str = "1"
    stall_s: float = 3.0
    #: Echo the Authorization header in error bodies, like a careless provider.
    leak_auth: bool = False


@dataclass
class FaultServer:
    faults: Faults = field(default_factory=Faults)
    seed: int = 0
    latency_s: float = 0.0
    arrivals: list[float] = field(default_factory=list)
    outcomes: list[str] = field(default_factory=list)
    bodies: list[dict] = field(default_factory=list)

    def __post_init__(self):
        self._rng = random.Random(self.seed)
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def setup(self):
                super().setup()
                # Headers and body go out in two writes; without this, Nagle plus delayed ACK adds ~40 ms per call.
                self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def do_GET(self):
                self._send(200, {"object": "list", "data": [{"id": "fake", "object": "model"}]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                with server._lock:
                    server.arrivals.append(time.monotonic())
                    server.bodies.append(body)
                    draw = server._rng.random()
                f = server.faults
                cuts = [("rate_limit", f.rate_limit), ("server_error", f.server_error),
                        ("timeout", f.timeout), ("invalid_json", f.invalid_json), ("unauthorized", f.unauthorized)]
                outcome, acc = "ok", 0.0
                for name, p in cuts:
                    acc += p
                    if draw < acc:
                        outcome = name
                        break
                with server._lock:
                    server.outcomes.append(outcome)
                if server.latency_s:
                    time.sleep(server.latency_s)
                auth = self.headers.get("Authorization", "") if f.leak_auth else ""
                if outcome == "rate_limit":
                    return self._send(429, {"error": {"message": f"Rate limit reached {auth}", "type": "rate_limit_error",
                                                      "code": "rate_limit_exceeded"}}, {"Retry-After": f.retry_after})
                if outcome == "unauthorized":
                    return self._send(401, {"error": {"message": f"Incorrect API key provided: {auth}", "type": "invalid_request_error",
                                                      "code": "invalid_api_key"}})
                if outcome == "server_error":
                    return self._send(500, {"error": {"message": f"internal error {auth}", "type": "server_error"}})
                if outcome == "timeout":
                    time.sleep(f.stall_s)
                    return self._send(504, {"error": {"message": "stalled", "type": "timeout"}})
                prompt = json.dumps(body.get("messages"), sort_keys=True)
                digest = hashlib.sha256(prompt.encode()).hexdigest()[:16]
                content = "Sure! {not json" if outcome == "invalid_json" else json.dumps({"answer": digest, "n": len(prompt)})
                self._send(200, {
                    "id": f"chatcmpl-{digest}", "object": "chat.completion", "created": 0, "model": body.get("model", "fake"),
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": len(prompt) // 4, "completion_tokens": 12, "total_tokens": len(prompt) // 4 + 12},
                })

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
                    pass  # the client gave up (timeout): expected

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    @property
    def requests(self) -> int:
        return len(self.arrivals)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._httpd.shutdown()
        self._httpd.server_close()
