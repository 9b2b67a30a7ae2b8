"""The Ray driver madbench starts or joins: what it prints, and where."""
from __future__ import annotations

import time

from madbench.runner.execute import init_ray


def test_the_clusters_messages_reach_stderr_and_leave_a_commands_stdout_alone(ray_local, monkeypatch, capfd):
    from ray._private import utils, worker
    printer = worker.print_to_stdstream
    monkeypatch.setattr(worker, "print_to_stdstream", getattr(printer, "__wrapped__", printer))  # Ray's own: stdout
    init_ray(None)  # Ray is already up: madbench uses it as it is, and takes its messages off stdout
    message = "a warning from the cluster for the driver"
    utils.push_error_to_driver(worker.global_worker, "madbench_test", message)
    out = err = ""
    deadline = time.monotonic() + 60  # printed by Ray's listener thread whenever the GCS delivers it
    while message not in out + err and time.monotonic() < deadline:
        time.sleep(0.2)
        captured = capfd.readouterr()
        out, err = out + captured.out, err + captured.err
    assert message in err and message not in out
