"""A command that started a local Ray stops it before exiting and says so, instead of seconds of silence at exit."""

import sys
import types

from madbench.runner import execute


def fake_ray(monkeypatch) -> list[str]:
    calls: list[str] = []
    ray = types.SimpleNamespace(is_initialized=lambda: True, shutdown=lambda: calls.append("shutdown"))
    monkeypatch.setitem(sys.modules, "ray", ray)
    return calls


def test_a_local_ray_this_process_started_is_stopped_with_a_line_saying_so(monkeypatch, capsys):
    calls = fake_ray(monkeypatch)
    monkeypatch.setattr(execute, "_local_ray_started", True)
    execute.stop_local_ray()
    assert calls == ["shutdown"]
    assert "stopping the local Ray" in capsys.readouterr().err
    execute.stop_local_ray()  # once only
    assert calls == ["shutdown"]


def test_quiet_stops_it_without_the_line(monkeypatch, capsys):
    calls = fake_ray(monkeypatch)
    monkeypatch.setattr(execute, "_local_ray_started", True)
    execute.stop_local_ray(quiet=True)
    assert calls == ["shutdown"] and capsys.readouterr().err == ""


def test_a_ray_this_process_did_not_start_is_left_alone(monkeypatch, capsys):
    calls = fake_ray(monkeypatch)
    monkeypatch.setattr(execute, "_local_ray_started", False)
    execute.stop_local_ray()
    assert calls == [] and capsys.readouterr().err == ""


def test_main_stops_a_ray_its_command_started_but_not_one_started_before_it(monkeypatch):
    from madbench.runner import cli
    calls = fake_ray(monkeypatch)

    up = {"ray": False}

    def command_that_starts_ray(args):
        monkeypatch.setattr(execute, "_local_ray_started", True)
        up["ray"] = True
        return 0

    monkeypatch.setattr(cli, "build_parser", lambda groups=None: _parser(command_that_starts_ray))
    monkeypatch.setattr(execute, "_local_ray_started", False)
    monkeypatch.setattr(sys.modules["ray"], "is_initialized", lambda: up["ray"])
    assert cli.main(["go"]) == 0 and calls == ["shutdown"]
    monkeypatch.setattr(execute, "_local_ray_started", True)  # a caller's Ray, up before the command
    assert cli.main(["go"]) == 0 and calls == ["shutdown"]
    monkeypatch.setattr(execute, "_local_ray_started", False)  # a Ray the caller started itself (ray.init)
    monkeypatch.setattr(sys.modules["ray"], "is_initialized", lambda: True)
    assert cli.main(["go"]) == 0 and calls == ["shutdown"]


def _parser(func):
    import argparse
    parser = argparse.ArgumentParser(prog="madbench")
    sub = parser.add_subparsers()
    sub.add_parser("go").set_defaults(func=func)
    return parser
