"""`madbench sim serve` in a child process on a free local port, for the demo's LLM batch.

A child process, not a thread: the simulator (madbench.sim) sits above the runner, which never imports it, and the
batch then reaches it the way it reaches a real provider, over HTTP through litellm.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

#: The banner's first line names the URL to point a model spec at.
_URL = re.compile(r" at (http://\S+/v1)\b")
#: How long the child may take to import and bind (it imports the CLI only; slow on a loaded machine).
START_TIMEOUT_S = 120.0
#: How often the child checks that the process that started it is still its parent.
PARENT_POLL_S = 1.0


class SimServer:
    """A running `madbench sim serve`: its URL, and what it said when it stopped."""

    def __init__(self, url: str, process: subprocess.Popen[str]) -> None:
        self.url = url
        self.process = process
        self.farewell = ""


def _lines(stream: IO[str], out: queue.Queue[str | None]) -> None:
    for line in stream:
        out.put(line)
    out.put(None)


@contextmanager
def simulated_provider(timeout_s: float = START_TIMEOUT_S) -> Iterator[SimServer]:
    """Start the simulator on 127.0.0.1 and a free port; stop it (SIGTERM) on leaving. A child that exits or stays
    silent before naming its URL is a RuntimeError carrying what it printed."""
    # Run through this module's __main__, which stops the server when this process is gone (kill -9 runs no finally).
    cmd = [sys.executable, "-m", "madbench.runner.cli.orphan_child", str(os.getpid()), "sim", "serve", "--host", "127.0.0.1",
           "--port", "0"]
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    assert process.stdout is not None
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_lines, args=(process.stdout, lines), daemon=True).start()
    said: list[str] = []
    url = None
    try:
        while url is None:
            try:
                line = lines.get(timeout=timeout_s)
            except queue.Empty:
                raise RuntimeError(f"`{' '.join(cmd[1:])}` named no URL within {timeout_s:g} s; it said: "
                                   f"{''.join(said)[-2000:]!r}") from None
            if line is None:
                raise RuntimeError(f"`{' '.join(cmd[1:])}` exited ({process.wait()}) before serving; it said: "
                                   f"{''.join(said)[-2000:]}")
            said.append(line)
            match = _URL.search(line)
            url = match.group(1) if match else None
        server = SimServer(url, process)
        yield server
    finally:
        if process.poll() is None:
            process.terminate()  # the server stops cleanly on SIGTERM and prints its request count
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    rest: list[str] = []
    while (line := lines.get(timeout=5)) is not None:
        rest.append(line)
    server.farewell = "".join(rest).strip().splitlines()[-1] if "".join(rest).strip() else ""


def stop_when_orphaned(parent: int, poll_s: float = PARENT_POLL_S) -> None:
    """SIGTERM this process (the server stops as cleanly as on `kill`) once ``parent`` is no longer its parent: the
    demo that started it exited without stopping it (killed with SIGKILL), and the child was handed to another."""
    while os.getppid() == parent:
        time.sleep(poll_s)
    os.kill(os.getpid(), signal.SIGTERM)

