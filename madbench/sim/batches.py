"""The simulated provider's batch API: OpenAI-compatible ``/v1/files`` and ``/v1/batches``.

A client uploads a JSONL file of requests (``purpose=batch``; one ``{custom_id, method, url, body}`` per line),
creates a batch from it, polls it and downloads its output and error files, as with OpenAI's Batch API. A batch
goes validating → in_progress → completed (or expired, failed, cancelled) on a clock: ``validating_s`` and
``completion_delay_s`` after its creation. Its lines are answered when it finishes, each exactly as the server
answers a chat completion (``reply``: rule-based analysts for requests with ``madbench_context``), with no rate
limit (providers give batches a separate, much larger quota).

Faults for tests (``BatchSimConfig``): a share of lines answered with a 500 in the error file (``fail_rate``),
the next batches expiring with only part of their lines answered (``expire_next``), or failing outright
(``fail_next``). ``submitted`` counts how often each ``custom_id`` arrived in a created batch, so a test can
check that nothing was paid for twice.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from email.message import MIMEPart
from email.parser import BytesParser
from email.policy import default as default_policy
from typing import Any, cast
from urllib.parse import parse_qs, urlsplit

TERMINAL = ("completed", "expired", "failed", "cancelled")


@dataclass
class BatchSimConfig:
    #: Seconds a new batch stays ``validating``, then until it finishes (counted from its creation).
    validating_s: float = 0.0
    completion_delay_s: float = 0.0
    #: Share of lines answered with a 500 (in the error file), drawn per (custom_id, submission).
    fail_rate: float = 0.0
    #: The next this-many batches expire, with only ``expired_done_share`` of their lines answered.
    expire_next: int = 0
    expired_done_share: float = 0.5
    #: The next this-many batches fail as a whole (no line answered).
    fail_next: int = 0
    seed: int = 0


@dataclass
class SimBatch:
    id: str
    input_file_id: str
    endpoint: str
    metadata: dict | None
    created: float
    lines: list[dict]
    fate: str = "completed"  # what it will become: completed | expired | failed
    status: str = "validating"
    output_file_id: str | None = None
    error_file_id: str | None = None
    counts: dict = field(default_factory=lambda: {"total": 0, "completed": 0, "failed": 0})
    times: dict = field(default_factory=dict)


class BatchStore:
    """Files and batches of one simulated server; ``handle`` serves its routes (thread-safe)."""

    def __init__(self, reply: Callable[[dict], dict], config: BatchSimConfig | None = None):
        self.reply = reply  # a chat-completion body → the chat-completion object the server would answer
        self.config = config or BatchSimConfig()
        self.files: dict[str, tuple[str, bytes]] = {}  # id → (purpose, bytes)
        self.batches: dict[str, SimBatch] = {}
        #: custom_id → how many created batches carried it.
        self.submitted: Counter[str | None] = Counter()  # a line without a custom_id counts under None
        self._lock = threading.Lock()
        self._n = 0

    # ---------------------------------------------------------------- routes

    def handle(self, handler, method: str) -> None:
        url = urlsplit(handler.path)
        parts = [p for p in url.path.split("/") if p][1:]  # drop "v1"
        try:
            status, payload = self._route(method, parts, parse_qs(url.query), handler)
        except _Refused as exc:
            status, payload = exc.status, {"error": {"message": exc.message, "type": "invalid_request_error"}}
        if isinstance(payload, bytes):
            return _send_bytes(handler, status, payload)
        handler.send_json(status, payload)

    def _route(self, method: str, parts: list[str], query: dict, handler) -> tuple[int, dict | bytes]:
        with self._lock:
            if parts == ["files"] and method == "POST":
                return 200, self._upload(handler)
            if len(parts) == 3 and parts[0] == "files" and parts[2] == "content" and method == "GET":
                return 200, self._file(parts[1])[1]
            if len(parts) == 2 and parts[0] == "files" and method == "GET":
                return 200, self._file_object(parts[1])
            if parts == ["batches"] and method == "POST":
                return 200, self._create(handler.read_json())
            if parts == ["batches"] and method == "GET":
                return 200, self._list(int(query.get("limit", ["20"])[0]), query.get("after", [None])[0])
            if len(parts) == 2 and parts[0] == "batches" and method == "GET":
                return 200, self._object(self._advance(self._batch(parts[1])))
            if len(parts) == 3 and parts[0] == "batches" and parts[2] == "cancel" and method == "POST":
                return 200, self._object(self._cancel(self._batch(parts[1])))
        raise _Refused(404, f"no route {method} /v1/{'/'.join(parts)}")

    # ---------------------------------------------------------------- files

    def _upload(self, handler) -> dict:
        ctype = handler.headers.get("Content-Type", "")
        body = handler.rfile.read(int(handler.headers.get("Content-Length", 0)))
        if "multipart/form-data" not in ctype:
            raise _Refused(400, "upload a file as multipart/form-data")
        msg = BytesParser(policy=default_policy).parsebytes(f"Content-Type: {ctype}\r\n\r\n".encode() + body)
        fields = {p.get_param("name", header="content-disposition"): p for p in msg.iter_parts()}
        if "file" not in fields or "purpose" not in fields:
            raise _Refused(400, "a file upload needs the fields `file` and `purpose`")
        data, purpose = _decoded(fields["file"]), _decoded(fields["purpose"]).decode()
        file_id = self._new_file(purpose, data, fields["file"].get_filename() or "upload.jsonl")
        return self._file_object(file_id)

    def _new_file(self, purpose: str, data: bytes, name: str = "output.jsonl") -> str:
        self._n += 1
        file_id = f"file-sim{self._n:06d}"
        self.files[file_id] = (purpose, data)
        return file_id

    def _file(self, file_id: str) -> tuple[str, bytes]:
        if file_id not in self.files:
            raise _Refused(404, f"no file {file_id}")
        return self.files[file_id]

    def _file_object(self, file_id: str) -> dict:
        purpose, data = self._file(file_id)
        return {"id": file_id, "object": "file", "bytes": len(data), "created_at": int(time.time()),
                "filename": f"{file_id}.jsonl", "purpose": purpose, "status": "processed"}

    # ---------------------------------------------------------------- batches

    def _create(self, req: dict) -> dict:
        purpose, data = self._file(req.get("input_file_id", ""))
        if purpose != "batch":
            raise _Refused(400, f"file {req['input_file_id']} was uploaded for {purpose!r}, not 'batch'")
        self._n += 1
        c = self.config
        fate = "completed"
        if c.fail_next > 0:
            c.fail_next, fate = c.fail_next - 1, "failed"
        elif c.expire_next > 0:
            c.expire_next, fate = c.expire_next - 1, "expired"
        lines = [json.loads(line) for line in data.decode().splitlines() if line.strip()]
        batch = SimBatch(id=f"batch_sim{self._n:06d}", input_file_id=req["input_file_id"],
                         endpoint=req.get("endpoint", "/v1/chat/completions"), metadata=req.get("metadata"),
                         created=time.monotonic(), lines=lines, fate=fate)
        batch.counts["total"] = len(lines)
        batch.times["created_at"] = int(time.time())
        self.submitted.update(line.get("custom_id") for line in lines)
        self.batches[batch.id] = batch
        return self._object(batch)

    def _batch(self, batch_id: str) -> SimBatch:
        if batch_id not in self.batches:
            raise _Refused(404, f"no batch {batch_id}")
        return self.batches[batch_id]

    def _list(self, limit: int, after: str | None) -> dict:
        ids = sorted(self.batches, reverse=True)  # newest first, as OpenAI lists them
        if after in ids:
            ids = ids[ids.index(after) + 1:]
        page = [self._object(self._advance(self.batches[i])) for i in ids[:limit]]
        return {"object": "list", "data": page, "first_id": page[0]["id"] if page else None,
                "last_id": page[-1]["id"] if page else None, "has_more": len(ids) > limit}

    def _cancel(self, batch: SimBatch) -> SimBatch:
        if batch.status not in TERMINAL:
            batch.status = "cancelled"
            batch.times["cancelled_at"] = int(time.time())
        return batch

    def _advance(self, batch: SimBatch) -> SimBatch:
        """Move ``batch`` along its clock; it is answered when it finishes."""
        if batch.status in TERMINAL:
            return batch
        age = time.monotonic() - batch.created
        c = self.config
        if age >= max(c.validating_s, c.completion_delay_s):
            self._finish(batch)
        elif age >= c.validating_s and batch.status == "validating":
            batch.status = "in_progress"
            batch.times["in_progress_at"] = int(time.time())
        return batch

    def _finish(self, batch: SimBatch) -> None:
        now = int(time.time())
        if batch.fate == "failed":
            batch.status = "failed"
            batch.times["failed_at"] = now
            return
        done = batch.lines
        if batch.fate == "expired":
            done = batch.lines[: int(len(batch.lines) * self.config.expired_done_share)]
        out: list[dict[str, Any]] = []
        err: list[dict[str, Any]] = []
        for line in done:
            row = self._answer(line)
            (out if row["response"]["status_code"] == 200 else err).append(row)
        for line in batch.lines[len(done):]:
            err.append({"id": f"batch_req_{line.get('custom_id')}", "custom_id": line.get("custom_id"), "response": None,
                        "error": {"code": "batch_expired", "message": "This request could not be executed before the "
                                  "completion window expired."}})
        batch.counts.update(completed=len(out), failed=len(err))
        batch.output_file_id = self._new_file("batch_output", _jsonl(out)) if out else None
        batch.error_file_id = self._new_file("batch_output", _jsonl(err)) if err else None
        batch.status = batch.fate
        batch.times[f"{batch.fate}_at"] = now

    def _fails(self, line: dict) -> bool:
        c = self.config
        if c.fail_rate <= 0:
            return False
        seed = f"{c.seed}:{line.get('custom_id')}:{self.submitted[line.get('custom_id')]}"
        return int(hashlib.sha256(seed.encode()).hexdigest()[:8], 16) / 2**32 < c.fail_rate

    def _answer(self, line: dict) -> dict:
        custom_id = line.get("custom_id")
        if self._fails(line):
            body, status = {"error": {"message": "simulated server error", "type": "server_error"}}, 500
        else:
            body, status = self.reply(line.get("body") or {}), 200
        return {"id": f"batch_req_{custom_id}", "custom_id": custom_id,
                "response": {"status_code": status, "request_id": f"req_{custom_id}", "body": body}, "error": None}

    def _object(self, b: SimBatch) -> dict:
        t = b.times
        errors = None if b.status != "failed" else {"object": "list", "data": [
            {"code": "simulated_failure", "message": "the simulated provider failed this batch", "line": None}]}
        return {"id": b.id, "object": "batch", "endpoint": b.endpoint, "errors": errors, "input_file_id": b.input_file_id,
                "completion_window": "24h", "status": b.status, "output_file_id": b.output_file_id,
                "error_file_id": b.error_file_id, "created_at": t.get("created_at"), "in_progress_at": t.get("in_progress_at"),
                "expires_at": (t.get("created_at") or 0) + 86400, "finalizing_at": None,
                "completed_at": t.get("completed_at"), "failed_at": t.get("failed_at"), "expired_at": t.get("expired_at"),
                "cancelling_at": None, "cancelled_at": t.get("cancelled_at"), "request_counts": dict(b.counts),
                "metadata": b.metadata}


class _Refused(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def _jsonl(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def _send_bytes(handler, status: int, data: bytes) -> None:
    try:
        handler.send_response(status)
        handler.send_header("Content-Type", "application/octet-stream")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the client gave up: expected


def _decoded(part: MIMEPart) -> bytes:
    """A form field's bytes: get_payload(decode=True) gives bytes, or None for a multipart part."""
    return cast("bytes | None", part.get_payload(decode=True)) or b""
