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
