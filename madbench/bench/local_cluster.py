"""A real multi-node Ray cluster on this machine: one head raylet and worker raylets, each in its own temp dir.

Used by the cluster benchmarks (`madbench bench cluster-cache`, `madbench bench scale`) and the cluster tests.
Every port is chosen free (other Ray clusters may be running on the machine), and ``stop`` kills only the
processes of this cluster (found by its temp dir), never every Ray on the machine as `ray stop` would.

A worker can be started in a private mount namespace (``hide``: directories covered by an empty tmpfs on
that node only), so that it cannot see the head's results or cache directory, as a cloud node without shared
storage cannot. That needs permission to create a mount namespace (root); ``can_hide()`` says whether this
machine gives it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

from madbench.data.paths import PROJECT_ROOT

#: Per raylet: small, so that three of them fit beside other work on a 2-core machine.
RAYLET_MEMORY = 2_000_000_000
OBJECT_STORE = 200_000_000


def free_ports(n: int, taken: set[int] | None = None) -> list[int]:
    """``n`` distinct ports free now, none in ``taken`` (which receives them): a port drawn earlier for this cluster
    is free until its component binds it, so a later draw could return it again (Ray then refuses to start)."""
    taken = set() if taken is None else taken
    socks: list[socket.socket] = []
    held: list[socket.socket] = []  # a port drawn but taken stays held, so that the next draw gives another
    try:
        while len(socks) < n:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            (held if s.getsockname()[1] in taken else socks).append(s)
        ports = [s.getsockname()[1] for s in socks]
        taken.update(ports)
        return ports
    finally:
        for s in socks + held:
            s.close()


def can_hide() -> bool:
    """Whether a raylet can be started in its own mount namespace (unshare -m, then mount a tmpfs)."""
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return False
    probe = Path(tempfile.mkdtemp(prefix="mbns"))
    try:
        cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c", f"mount -t tmpfs tmpfs {shlex.quote(str(probe))}"]
        return subprocess.run(cmd, capture_output=True, timeout=30).returncode == 0
    finally:
        probe.rmdir()


#: ``ray`` as this interpreter runs it: a virtual environment made with ``--system-site-packages`` has Ray but no
#: ``ray`` script beside its python, and a ``ray`` found on PATH may be another interpreter's.
RAY_CLI = (sys.executable, "-m", "ray.scripts.scripts")


class LocalCluster:
    """``with LocalCluster(dashboard=True) as c: c.add_worker("w1", hide=[results])`` — a head and named workers."""

    def __init__(self, dashboard: bool = False, cpus: int = 1, env: dict[str, str] | None = None):
        # AF_UNIX socket paths under the temp dir must stay under 108 bytes: a short directory in /tmp
        self.dir = tempfile.mkdtemp(prefix="mb", dir="/tmp")
        self.dashboard, self.cpus = dashboard, cpus
        self.env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONPATH": str(PROJECT_ROOT), **(env or {})}
        self._ports: set[int] = set()
        self.port, self.dashboard_port, self.client_port = free_ports(3, self._ports)
        self.workers: list[str] = []

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def dashboard_url(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    @property
    def client_address(self) -> str:
        return f"ray://127.0.0.1:{self.client_port}"

    def _ray(self, name: str, extra: list[str]) -> list[str]:
        agent, grpc, metrics, runtime_env, node_manager, object_manager = free_ports(6, self._ports)
        return [*RAY_CLI, "start", f"--temp-dir={self.dir}/{name}", f"--num-cpus={self.cpus}",
                f"--memory={RAYLET_MEMORY}", f"--object-store-memory={OBJECT_STORE}", "--disable-usage-stats",
                f"--dashboard-agent-listen-port={agent}", f"--dashboard-agent-grpc-port={grpc}",
                f"--metrics-export-port={metrics}", f"--runtime-env-agent-port={runtime_env}",
                f"--node-manager-port={node_manager}", f"--object-manager-port={object_manager}", *extra]

    def start_head(self, env: dict[str, str] | None = None) -> LocalCluster:
        extra = ["--head", f"--port={self.port}", f"--ray-client-server-port={self.client_port}"]
        extra += (["--include-dashboard=true", f"--dashboard-port={self.dashboard_port}"] if self.dashboard
                  else ["--include-dashboard=false"])
        self._start(self._ray("h", extra), env)
        return self

    def add_worker(self, name: str, hide: Sequence[Path] = (), env: dict[str, str] | None = None) -> str:
        """Start worker raylet ``name``; with ``hide``, in its own mount namespace where those directories are empty."""
        cmd = self._ray(name, [f"--address={self.address}"])
        if hide:
            mounts = " && ".join(f"mkdir -p {shlex.quote(str(d))} && mount -t tmpfs tmpfs {shlex.quote(str(d))}" for d in hide)
            cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c", f"{mounts} && exec {shlex.join(cmd)}"]
        self._start(cmd, env)
        self.workers.append(name)
        return name

    def _start(self, cmd: list[str], env: dict[str, str] | None) -> None:
        out = subprocess.run(cmd, env={**self.env, **(env or {})}, capture_output=True, text=True, timeout=180)
        if out.returncode != 0:
            raise RuntimeError(f"`ray start` failed ({out.returncode}): {out.stderr[-2000:]}")

    def processes(self, name: str | None = None) -> list[psutil.Process]:
        """This cluster's processes (of raylet ``name`` only, when given), found by the temp dir on their command line."""
        mark = f"{self.dir}/{name}" if name else self.dir
        procs = []
        for p in psutil.process_iter(["cmdline"]):
            try:
                if any(mark in a for a in (p.info["cmdline"] or [])):
                    procs.append(p)
            except psutil.Error:
                continue
        return procs

    def log_tails(self, pattern: str, chars: int = 2000) -> str:
        """The ends of this cluster's log files matching ``pattern`` (``ray_client_server*.err``), to explain a failure."""
        files = sorted(Path(self.dir).glob(f"*/session_*/logs/{pattern}"))
        return "\n".join(f"--- {f.name}:\n{f.read_text(errors='replace')[-chars:]}" for f in files if f.stat().st_size)

    def raylet(self, name: str) -> psutil.Process:
        found = [p for p in self.processes(name) if "raylet" in (p.name() or "")]
        if len(found) != 1:
            raise RuntimeError(f"expected one raylet for {name}, found {len(found)}")
        return found[0]

    def kill_worker(self, name: str) -> None:
        """SIGKILL worker ``name``'s raylet, as a lost machine would stop answering."""
        self.raylet(name).send_signal(signal.SIGKILL)

    def node_ids(self) -> dict[str, str]:
        """Alive raylet name ("h", or a worker's) → Ray node id, asked from a short-lived driver (this process need
        not be connected); a raylet is known by its object store socket, under its own temp dir."""
        code = (f"import json, ray; ray.init(address={self.address!r}, log_to_driver=False); "
                "print(json.dumps({n['NodeID']: n['ObjectStoreSocketName'] for n in ray.nodes() if n['Alive']}))")
        out = subprocess.run([sys.executable, "-c", code], env=self.env, capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise RuntimeError(f"could not list the nodes: {out.stderr[-1000:]}")
        sockets = json.loads(out.stdout.strip().splitlines()[-1])
        return {Path(sock).relative_to(self.dir).parts[0]: node for node, sock in sockets.items() if sock.startswith(self.dir)}

    def wait_for_nodes(self, n: int, timeout: float = 120) -> dict[str, str]:
        """Until ``n`` raylets are alive; returns ``node_ids()``."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                nodes = self.node_ids()
            except RuntimeError:
                nodes = {}
            if len(nodes) >= n:
                return nodes
            if time.monotonic() > deadline:
                raise RuntimeError(f"{n} nodes not alive after {timeout:.0f} s (alive: {sorted(nodes)})")
            time.sleep(1.0)

    def stop(self) -> None:
        procs = self.processes()
        for p in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        psutil.wait_procs(procs, timeout=30)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
