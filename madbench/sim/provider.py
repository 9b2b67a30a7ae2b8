"""A simulated OpenAI-compatible provider on 127.0.0.1, for benchmarks users run on their own setup.

It enforces its own RPM/TPM limits over a sliding 60-second window and answers
429 with Retry-After when they are exceeded, like a hosted provider, with a
configurable latency distribution (lognormal around a median). Debate turns
(requests from a model spec with ``send_context``) are answered by the
rule-based analysts, so answers are valid for the requested schema; recall-probe
requests by a ``RecallAnswerer`` (random buckets unless it is given a pack and an
accuracy); anything else gets a small JSON object echoing a digest of the prompt.

Its ``usage`` reports ``prompt_tokens_details.cached_tokens`` as OpenAI's automatic prompt cache would
(``PrefixCache``): the longest prefix, of at least 1,024 tokens and in 128-token steps, that a recent request to the
same model began with, where the structured-output schema and tools lead the prefix (OpenAI puts them before the
system message: a request with another schema shares nothing). Tokens are the server's own estimate, 4 characters
of the JSON of the messages each, so cached tokens never exceed the prompt tokens it reports.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import select
import socket
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field

from madbench.debate.envelope import as_asked
from madbench.scoring.rule_answers import answer_for_context
from madbench.sim.batches import BatchStore
from madbench.sim.http_stub import JSONHandler, StubServer, chat_completion
from madbench.sim.identify_answers import IdentifyAnswerer, is_identify_probe
from madbench.sim.recall_answers import RecallAnswerer, is_recall_probe


@dataclass
class SimConfig:
    latency_median_s: float = 0.0
    latency_sigma: float = 0.5
    rpm: float | None = None
    tpm: float | None = None
    seed: int = 0
    #: Prefix hashes each model's prompt cache keeps (least recently used dropped first); 0 turns it off. A 30k-token
    #: prompt leaves about 230 (one per 128-token step past 1,024), so the default holds some 300 such prompts.
    prefix_cache_entries: int = 65_536


#: The snapshot date the simulator reports serving: a hosted provider answers a model alias with a dated snapshot
#: (``gpt-4o-mini`` → ``gpt-4o-mini-2024-07-18``), which results record beside the model asked for.
SNAPSHOT = "2024-07-18"


def served_name(model: str) -> str:
    """The model name the simulator says served ``model``: its dated snapshot (a name already dated is kept)."""
    return model if model.endswith(SNAPSHOT) else f"{model}-{SNAPSHOT}"


#: The server's token estimate: characters per token of the JSON of the messages.
CHARS_PER_TOKEN = 4
#: OpenAI's automatic prompt cache: prompts of at least this many tokens, matched in steps of this many.
CACHE_MIN_TOKENS = 1024
CACHE_STEP_TOKENS = 128


class PrefixCache:
    """The prefixes recently seen per model, as chained hashes at every cache step, in an LRU: ``lookup`` returns how
    many of a prompt's tokens a cache would serve (the longest step-aligned prefix seen before) and remembers its
    own prefixes for later requests."""

    def __init__(self, entries: int):
        self.entries = entries
        self._seen: dict[str, OrderedDict[bytes, None]] = {}
        self._lock = threading.Lock()

    def lookup(self, model: str, head: str, prompt: str) -> int:
        steps = range(CACHE_MIN_TOKENS, len(prompt) // CHARS_PER_TOKEN + 1, CACHE_STEP_TOKENS)
        if self.entries <= 0 or not steps:
            return 0
        h = hashlib.blake2b(head.encode(), digest_size=16)  # the schema and tools lead the prefix
        digests, done = [], 0
        for n in steps:
            h.update(prompt[done:n * CHARS_PER_TOKEN].encode())
            done = n * CHARS_PER_TOKEN
            digests.append(h.copy().digest())
        cached = 0
        with self._lock:
            seen = self._seen.setdefault(model, OrderedDict())
            for n, d in zip(steps, digests, strict=True):
                if d not in seen:
                    break  # a longer prefix extends this one, so it cannot have been seen either
                cached = n
            for d in digests:
                seen[d] = None
                seen.move_to_end(d)
            while len(seen) > self.entries:
                seen.popitem(last=False)
        return cached


@dataclass
class SimStats:
    requests: int = 0
    rejected_429: int = 0
    outage_refusals: int = 0
    arrivals: list[float] = field(default_factory=list)
    admitted: list[float] = field(default_factory=list)  # monotonic times of requests let through
    #: What it billed: (model, prompt_tokens, completion_tokens, cached_tokens) of every answer it sent, counted as it
    #: is sent (a caller killed while reading it was billed all the same, as by a hosted provider).
    billed: list[tuple[str, int, int, int]] = field(default_factory=list)
    #: Requests whose client closed the connection before their answer was ready (a hedge's loser, a killed caller):
    #: billed all the same, the answer never sent.
    abandoned: int = 0


class SimProvider(StubServer):
    def __init__(self, config: SimConfig | None = None, answer_filter=None, record_bodies: bool = False,
                 host: str = "127.0.0.1", port: int = 0, recall: RecallAnswerer | None = None,
                 identify: IdentifyAnswerer | None = None):
        self.config = config or SimConfig()
        #: Answers `madbench probe recall` (default: a model that remembers nothing, guessing uniformly).
        self.recall = recall or RecallAnswerer(seed=self.config.seed)
        #: Answers `madbench leakage audit`'s identification probe (default: a model that recognises no memo).
        self.identify = identify or IdentifyAnswerer(seed=self.config.seed)
        #: Optional fault injection for tests: (context, content) -> content.
        self.answer_filter = answer_filter
        self.stats = SimStats()
        #: Request bodies as received (only with record_bodies): what a model would actually have been shown.
        self.bodies: list[dict] | None = [] if record_bodies else None
        self._rng = random.Random(self.config.seed)
        self._lock = threading.Lock()
        self._window: deque[tuple[float, int]] = deque()  # (time, tokens) of admitted requests
        self.outage_until = 0.0
        self._latencies: deque[float] = deque()  # scripted latencies of the next admitted requests
        self.prefix_cache = PrefixCache(self.config.prefix_cache_entries)
        #: /v1/files and /v1/batches (madbench/sim/batches.py): each line is answered as ``reply`` answers.
        self.batches = BatchStore(self.reply)
        sim = self

        class Handler(JSONHandler):
            def do_GET(self):
                if self.path.startswith(("/v1/files", "/v1/batches")):
                    return sim.batches.handle(self, "GET")
                super().do_GET()

            def do_POST(self):
                if self.path.startswith(("/v1/files", "/v1/batches")):
                    return sim.batches.handle(self, "POST")
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
                gone = bool(delay) and client_gone_within(self.request, delay)
                answer = sim.reply(body)
                usage = answer["usage"]
                with sim._lock:
                    sim.stats.billed.append((body.get("model", "sim"), usage["prompt_tokens"], usage["completion_tokens"],
                                             usage["prompt_tokens_details"]["cached_tokens"]))
                    sim.stats.abandoned += gone
                if gone:
                    self.close_connection = True
                    return
                self.send_json(200, answer)

        super().__init__(Handler, host, port)

    def reply(self, body: dict) -> dict:
        """The chat completion this server answers ``body`` with (a call, or one line of a batch)."""
        prompt = json.dumps(body.get("messages"), sort_keys=True)
        digest = hashlib.sha256(prompt.encode()).hexdigest()[:16]
        if "madbench_context" in body:  # a recall probe, or a debate turn for the rule-based analysts
            ctx = body["madbench_context"]
            content = (self.recall.answer(ctx) if is_recall_probe(ctx) else self.identify.answer(ctx)
                       if is_identify_probe(ctx) else answer_for_context(ctx))
            if self.answer_filter is not None:
                content = self.answer_filter(ctx, content)
            content = as_asked(ctx, content)
        else:
            content = json.dumps({"answer": digest})
        model = body.get("model", "sim")
        out = chat_completion(content, served_name(model), len(prompt) // CHARS_PER_TOKEN, len(content) // CHARS_PER_TOKEN, digest)
        head = json.dumps([body.get("response_format"), body.get("tools")], sort_keys=True)
        out["usage"]["prompt_tokens_details"] = {"cached_tokens": self.prefix_cache.lookup(model, head, prompt)}
        return out

    def script_latency(self, *seconds: float) -> None:
        """The next admitted requests wait exactly these latencies, in order (then the lognormal again): a straggler
        on demand, for tests."""
        with self._lock:
            self._latencies.extend(seconds)

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
            if self._latencies:
                delay = self._latencies.popleft()
            else:
                delay = 0.0 if c.latency_median_s <= 0 else self._rng.lognormvariate(math.log(c.latency_median_s),
                                                                                      c.latency_sigma)
        return None, delay


def client_gone_within(sock: socket.socket, seconds: float) -> bool:
    """Wait ``seconds`` for an answer's latency; True as soon as the client closes the connection (it sends nothing
    more while it waits for its answer, so a readable socket is its close)."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        readable, _, _ = select.select([sock], [], [], left)
        if not readable:
            return False
        try:
            if not sock.recv(1, socket.MSG_PEEK):
                return True
        except OSError:
            return True
        time.sleep(max(0.0, deadline - time.monotonic()))  # bytes of a next request: not a close
        return False
    return False
