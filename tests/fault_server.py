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
import threading
import time
from dataclasses import dataclass

from madbench.debate.envelope import as_asked
from madbench.scoring.rule_answers import answer_for_context
from madbench.sim.http_stub import JSONHandler, StubServer, chat_completion


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


class FaultServer(StubServer):
    def __init__(self, faults: Faults | None = None, seed: int = 0, latency_s: float = 0.0):
        self.faults = faults or Faults()
        self.latency_s = latency_s
        self.arrivals: list[float] = []
        self.outcomes: list[str] = []
        self.bodies: list[dict] = []
        #: (outcome, sha256 of the messages) of every 200 sent: the calls a provider would bill.
        self.answered: list[tuple[str, str]] = []
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        server = self

        class Handler(JSONHandler):
            def do_POST(self):
                body = self.read_json()
                with server._lock:
                    server.arrivals.append(time.monotonic())
                    server.bodies.append(body)
                    draw = server._rng.random()
                f = server.faults
                cuts = [("rate_limit", f.rate_limit), ("server_error", f.server_error), ("timeout", f.timeout),
                        ("invalid_json", f.invalid_json), ("unauthorized", f.unauthorized)]
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
                    return self.send_json(429, {"error": {"message": f"Rate limit reached {auth}", "type": "rate_limit_error",
                                                          "code": "rate_limit_exceeded"}}, {"Retry-After": f.retry_after})
                if outcome == "unauthorized":
                    return self.send_json(401, {"error": {"message": f"Incorrect API key provided: {auth}",
                                                          "type": "invalid_request_error", "code": "invalid_api_key"}})
                if outcome == "server_error":
                    return self.send_json(500, {"error": {"message": f"internal error {auth}", "type": "server_error"}})
                if outcome == "timeout":
                    time.sleep(f.stall_s)
                    return self.send_json(504, {"error": {"message": "stalled", "type": "timeout"}})
                prompt = json.dumps(body.get("messages"), sort_keys=True)
                digest = hashlib.sha256(prompt.encode()).hexdigest()[:16]
                if outcome == "invalid_json":
                    content = "Sure! {not json"
                elif "madbench_context" in body:  # a debate turn (send_context): answered by the rule-based analysts
                    content = as_asked(body["madbench_context"], answer_for_context(body["madbench_context"]))
                else:
                    content = json.dumps({"answer": digest, "n": len(prompt)})
                with server._lock:
                    server.answered.append((outcome, hashlib.sha256(prompt.encode()).hexdigest()))
                self.send_json(200, chat_completion(content, body.get("model", "fake"), len(prompt) // 4, 12, digest))

        super().__init__(Handler)

    @property
    def requests(self) -> int:
        return len(self.arrivals)
