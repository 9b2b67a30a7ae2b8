"""The demo's simulated provider (madbench.runner.sim_process) does not outlive the process that started it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]

# A parent that starts the simulated provider, says the child's pid, and waits to be killed.
PARENT = textwrap.dedent("""
    import sys, time
    from madbench.runner.sim_process import simulated_provider
    with simulated_provider() as sim:
        print(sim.process.pid, flush=True)
        time.sleep(600)
""")


def test_simulated_provider_stops_when_the_demo_that_started_it_is_killed_with_sigkill(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MADBENCH_HOME": str(tmp_path / "home")}
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        child = int(parent.stdout.readline())
        assert psutil.pid_exists(child)
        parent.send_signal(signal.SIGKILL)  # no finally runs: only the child itself can notice
        parent.wait()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE:
                break
            time.sleep(0.2)
        else:
            os.kill(child, signal.SIGKILL)
            raise AssertionError(f"the simulated provider (pid {child}) outlived its killed parent by 30 s")
    finally:
        if parent.poll() is None:
            parent.kill()
