"""`madbench sim serve`: the simulated provider as a command, reachable over HTTP until stopped."""

import json
import os
import socket
import subprocess
import sys
import time

import httpx

from runner.cli import main


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_up(proc: subprocess.Popen, url: str, deadline_s: float = 60.0) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < deadline_s:
        assert proc.poll() is None, proc.communicate()[1]
        try:
            httpx.get(f"{url}/models", timeout=1.0)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise AssertionError(f"madbench sim serve did not answer at {url} within {deadline_s} s")


def test_sim_serve_answers_a_chat_completion_then_stops():
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    proc = subprocess.Popen([sys.executable, "-m", "runner.cli", "sim", "serve", "--port", str(port), "--rpm", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ})
    try:
        wait_until_up(proc, url)
        body = {"model": "madbench-sim", "messages": [{"role": "user", "content": "Say hi as JSON"}]}
        r = httpx.post(f"{url}/chat/completions", json=body, timeout=10.0)
        assert r.status_code == 200
        answer = r.json()
        assert answer["object"] == "chat.completion" and answer["model"] == "madbench-sim"
        assert set(json.loads(answer["choices"][0]["message"]["content"])) == {"answer"}
        assert answer["usage"]["total_tokens"] > 0
        # --rpm 1: the second request within the minute is refused like a hosted provider would
        r = httpx.post(f"{url}/chat/completions", json=body, timeout=10.0)
        assert r.status_code == 429 and int(r.headers["Retry-After"]) >= 1
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert f"at {url}" in out and "send_context: true" in out
    assert "stopped after 2 requests (1 refused with 429)" in out


def test_sim_serve_bad_input_is_one_line(capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        assert main(["sim", "serve", "--port", str(busy.getsockname()[1])]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot listen there" in err[0]
    assert main(["sim", "serve", "--rpm", "0"]) == 2
    assert "--rpm" in capsys.readouterr().err
