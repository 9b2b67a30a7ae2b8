"""`madbench sim serve`: the simulated provider as a command, reachable over HTTP until stopped."""

import json
import os
import socket
import subprocess
import sys
import time

import httpx

from madbench.runner.cli import main


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


def serve(*options: str) -> tuple[subprocess.Popen, str]:
    """`madbench sim serve` on a free port, up and answering; its process and its /v1 URL."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    proc = subprocess.Popen([sys.executable, "-m", "madbench.runner.cli", "sim", "serve", "--port", str(port), *options],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ})
    try:
        wait_until_up(proc, url)
    except AssertionError:
        proc.kill()
        raise
    return proc, url


def test_sim_serve_answers_a_chat_completion_then_stops():
    proc, url = serve("--rpm", "1")
    try:
        body = {"model": "madbench-sim", "messages": [{"role": "user", "content": "Say hi as JSON"}]}
        r = httpx.post(f"{url}/chat/completions", json=body, timeout=10.0)
        assert r.status_code == 200
        answer = r.json()
        assert answer["object"] == "chat.completion" and answer["model"] == "madbench-sim-2024-07-18"  # a dated snapshot
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


def test_sim_serve_holds_a_provider_batch_for_its_batch_delay_then_answers_it():
    proc, url = serve("--batch-delay", "2")
    try:
        line = {"custom_id": "r1", "method": "POST", "url": "/v1/chat/completions",
                "body": {"model": "madbench-sim", "messages": [{"role": "user", "content": "hi"}]}}
        upload = httpx.post(f"{url}/files", data={"purpose": "batch"},
                            files={"file": ("in.jsonl", json.dumps(line).encode() + b"\n")}, timeout=10.0).json()
        batch = httpx.post(f"{url}/batches", json={"input_file_id": upload["id"], "endpoint": "/v1/chat/completions",
                                                   "completion_window": "24h"}, timeout=10.0).json()
        t0 = time.monotonic()
        states = [httpx.get(f"{url}/batches/{batch['id']}", timeout=10.0).json()]
        while states[-1]["status"] != "completed" and time.monotonic() - t0 < 30:
            time.sleep(0.2)
            states.append(httpx.get(f"{url}/batches/{batch['id']}", timeout=10.0).json())
        waited = time.monotonic() - t0
        out_file = httpx.get(f"{url}/files/{states[-1]['output_file_id']}/content", timeout=10.0).text
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=30)
    assert states[0]["status"] in ("validating", "in_progress") and states[-1]["status"] == "completed"
    assert waited >= 1.5  # held for about --batch-delay from its creation
    result = json.loads(out_file.splitlines()[0])
    assert result["custom_id"] == "r1" and result["response"]["status_code"] == 200
    assert "Provider batches" in out and "complete after 2 s" in out


def test_sim_serve_batch_options_are_checked(capsys):
    assert main(["sim", "serve", "--batch-fail-rate", "1.5"]) == 2
    assert "--batch-fail-rate" in capsys.readouterr().err
    assert main(["sim", "serve", "--api", "openai", "--batch-delay", "3"]) == 2
    assert "--batch-delay" in capsys.readouterr().err
