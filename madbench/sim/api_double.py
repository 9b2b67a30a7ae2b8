"""What madbench's protocol doubles of hosted APIs share (``openai_api``, ``anthropic_api``, ``gemini_api``).

A double speaks one provider's documented wire format on 127.0.0.1 (its path, auth header, request fields, usage
fields, finish reasons, error bodies and rate-limit headers), so that a debate reaches it through litellm exactly
as it would reach the provider: only ``api_base`` differs. Requests the provider would reject are rejected with its
status and error body, so a translation litellm gets wrong fails here as it would there.

Debate turns are answered by the rule-based analysts (``madbench.scoring.rule_answers.answer_for_context``). The structured
task travels as ``madbench_context`` at the top level of the body (a model spec with ``send_context: true`` sends
it; ``LiteLLMProvider`` puts it where litellm forwards it for each provider). It is the one field no provider
defines, and the only one a double accepts beyond the provider's own. A request without it gets
``{"answer": <digest of the request>}``.

Token counts are the double's own (request JSON characters / 4; answer characters / 4, plus the hidden reasoning or
thinking tokens it bills), reported in the provider's usage fields and kept in ``billed``, so a test can check
that every call's tokens and cost are what the double reported. An answer longer than the request's output budget
is cut there and reported as truncated, as the provider would.

Faults are scripted: ``script("overloaded", "refusal")`` makes the next two requests fail that way, in order;
``persistent = "overloaded"`` makes every request fail so. Each double gives a fault its provider's form.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import urllib.parse
from collections import deque
from dataclasses import dataclass
from typing import Any, ClassVar

from madbench.debate.envelope import as_asked
from madbench.scoring.rule_answers import answer_for_context
from madbench.sim.http_stub import JSONHandler, StubServer

#: Faults every double can serve, each in its provider's form.
FAULTS = ("overloaded", "rate_limited", "server_error", "truncated", "refusal")


@dataclass
class Billed:
    """One request the double answered (HTTP 200), as it reported it."""

    model: str
    prompt_tokens: int
    #: Every billed output token, the hidden ones included.
    completion_tokens: int
    #: Reasoning (OpenAI) or thinking (Gemini) tokens: billed as output, never returned.
    hidden_tokens: int
    #: The provider's own finish reason (``end_turn``, ``MAX_TOKENS``, ``length``, ...).
    finish: str
    #: Whether it answered a debate turn (the request carried ``madbench_context``).
    turn: bool


class WireError(Exception):
    """A request the provider would not answer: its HTTP status, its error body and headers."""

    def __init__(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None):
        super().__init__(f"{status}: {body}")
        self.status, self.body, self.headers = status, body, headers or {}


@dataclass
class Request:
    """One request as the double read it."""

    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: dict[str, Any]
    context: dict[str, Any] | None


def tokens(text: str) -> int:
    return len(text) // 4 + 1


def cut(text: str, budget: int) -> str:
    """The first ``budget`` tokens' worth of ``text`` (an answer stopped at its limit)."""
    return text[: max(0, budget) * 4]


class ApiDouble(StubServer):
    #: The litellm provider prefix this double stands for, and the path ``url`` adds to the server's root.
    api: ClassVar[str] = ""
    prefix: ClassVar[str] = ""
    #: Faults of this provider beyond ``FAULTS``.
    extra_faults: ClassVar[tuple[str, ...]] = ()

    def __init__(self, host: str = "127.0.0.1", port: int = 0, key: str | None = None, retry_after_s: float = 1.0,
                 hidden_tokens: int = 0, rpm: int = 4000, tpm: int = 2_000_000):
        #: The one key accepted (None: any non-empty key, as a test needs no particular one).
        self.key = key
        #: What a 429 or an overload tells the client to wait, in seconds.
        self.retry_after_s = retry_after_s
        #: Reasoning or thinking tokens billed per answer, for the models that spend them.
        self.hidden_tokens = hidden_tokens
        #: The limits its rate-limit headers announce (it enforces none: faults are scripted).
        self.rpm, self.tpm = rpm, tpm
        self.persistent: str | None = None
        self.requests: list[Request] = []
        self.billed: list[Billed] = []
        #: Faults served, in order (scripted or persistent).
        self.faults_served: list[str] = []
        self._script: deque[str] = deque()
        self._recent: deque[float] = deque()
        self._lock = threading.Lock()
        double = self

        class Handler(JSONHandler):
            def do_POST(self):
                double.serve(self)

        super().__init__(Handler, host, port)

    @property
    def url(self) -> str:
        """The ``api_base`` to give litellm for this provider."""
        return super().url.removesuffix("/v1") + self.prefix

    def script(self, *faults: str) -> None:
        """Fail the next requests with these faults, one each, in order."""
        unknown = [f for f in faults if f not in FAULTS + self.extra_faults]
        if unknown:
            raise ValueError(f"unknown fault(s) {unknown}; known: {', '.join(FAULTS + self.extra_faults)}")
        with self._lock:
            self._script.extend(faults)

    def _next_fault(self) -> str | None:
        with self._lock:
            fault = self._script.popleft() if self._script else self.persistent
            if fault is not None:
                self.faults_served.append(fault)
            now = time.monotonic()
            self._recent.append(now)
            while self._recent and self._recent[0] <= now - 60.0:
                self._recent.popleft()
            return fault

    def remaining_requests(self) -> int:
        """What the rate-limit headers say is left of this minute's requests."""
        with self._lock:
            return max(0, self.rpm - len(self._recent))

    def serve(self, handler: JSONHandler) -> None:
        try:
            body = handler.read_json()
        except (ValueError, UnicodeDecodeError):
            body = None
        parts = urllib.parse.urlsplit(handler.path)
        query = dict(urllib.parse.parse_qsl(parts.query))
        headers = {k.lower(): v for k, v in handler.headers.items()}
        try:
            if not isinstance(body, dict):
                raise self.invalid("the request body is not a JSON object")
            req = Request(parts.path, query, headers, body, body.pop("madbench_context", None))
            with self._lock:
                self.requests.append(req)
            self.authorize(req)
            model = self.check(req)
            fault = self._next_fault()
            if fault in ("overloaded", "rate_limited", "server_error"):
                raise self.fault_error(fault, model)
            payload, billed = self.respond(req, model, self.answer(req), fault)
        except WireError as exc:
            return handler.send_json(exc.status, exc.body, exc.headers)
        with self._lock:
            self.billed.append(billed)
        handler.send_json(200, payload, {**self.rate_headers(), **self.ids()})

    @staticmethod
    def answer(req: Request) -> str:
        if req.context is not None:
            return as_asked(req.context, answer_for_context(req.context))
        digest = hashlib.sha256(json.dumps(req.body, sort_keys=True).encode()).hexdigest()[:16]
        return json.dumps({"answer": digest})

    @staticmethod
    def prompt_tokens(req: Request) -> int:
        return tokens(json.dumps(req.body, sort_keys=True))

    @staticmethod
    def ids() -> dict[str, str]:
        return {"request-id": f"req_{time.time_ns():x}"}

    # What each double defines: its auth, its request checks, its answer, its errors and its headers.
    def authorize(self, req: Request) -> None:
        raise NotImplementedError

    def check(self, req: Request) -> str:
        """The model asked for, once the request is one the provider would answer (else ``WireError``)."""
        raise NotImplementedError

    def respond(self, req: Request, model: str, text: str, fault: str | None) -> tuple[dict[str, Any], Billed]:
        raise NotImplementedError

    def fault_error(self, fault: str, model: str) -> WireError:
        raise NotImplementedError

    def invalid(self, message: str) -> WireError:
        """The provider's 400 for a malformed request."""
        raise NotImplementedError

    def rate_headers(self) -> dict[str, str]:
        return {}
