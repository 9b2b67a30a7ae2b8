"""A tiny threaded JSON-over-HTTP server base, shared by the simulated provider and test doubles."""

from __future__ import annotations

import json
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class JSONHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def setup(self):
        super().setup()
        # Headers and body go out in two writes; without this, Nagle plus delayed ACK adds ~40 ms per call.
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def read_json(self) -> dict:
        return json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")

    def do_GET(self):
        self.send_json(200, {"object": "list", "data": [{"id": "stub", "object": "model"}]})

    def send_json(self, status: int, payload: dict, headers: dict[str, str] | None = None) -> None:
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
            pass  # the client gave up (a timeout): expected


def chat_completion(content: str, model: str, prompt_tokens: int, completion_tokens: int, ident: str) -> dict:
    return {"id": f"chatcmpl-{ident}", "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}


class QuietServer(ThreadingHTTPServer):
    """Says nothing of a client that went away mid-request (a killed driver, a probe given up: the faults the
    simulator exists to watch, and a Ray actor stopped after its test, whose traceback would land on the next test's
    stderr); any other handler error is printed as the standard server prints it."""

    daemon_threads = True

    def handle_error(self, request: socket.socket | tuple[bytes, socket.socket], client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class StubServer:
    """Serve ``handler`` on ``host``:``port`` (default 127.0.0.1 and a free port) in a daemon thread; use as a
    context manager."""

    def __init__(self, handler: type[JSONHandler], host: str = "127.0.0.1", port: int = 0):
        self._httpd = QuietServer((host, port), handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        assert isinstance(host, str)  # an AF_INET server's address (bytes only for AF_UNIX)
        host = "127.0.0.1" if host in ("0.0.0.0", "") else host  # listening on every interface: reach it locally
        return f"http://{host}:{port}/v1"

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._httpd.shutdown()
        self._httpd.server_close()
