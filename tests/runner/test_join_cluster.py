"""Joining a Ray cluster: a client server the head failed to start is asked for again; anything else is one line.

The head aborting a Ray client connection (its per-client server did not come up, as on a busy 2-core head) cannot
be provoked on demand, so ``ray.init`` is replaced by a double that raises what Ray raises then."""

from __future__ import annotations

import types

import pytest

from madbench.data.errors import InputError
from madbench.runner import execute


def fake_ray(failures: list[BaseException]):
    calls = []

    def init(**kwargs):
        calls.append(kwargs)
        if failures:
            raise failures.pop(0)
    return types.SimpleNamespace(init=init), calls


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch):
    monkeypatch.setattr(execute.time, "sleep", lambda s: None)


def test_an_aborted_client_join_is_retried_and_said(capsys):
    aborted = ConnectionAbortedError("Initialization failure from server: Starting Ray client server failed.")
    ray, calls = fake_ray([aborted])
    execute._join_cluster(ray, "ray://head:10001", {"env_vars": {}})
    assert len(calls) == 2
    assert "attempt 1 of 3" in capsys.readouterr().err


def test_a_client_join_aborted_every_time_is_one_line_naming_the_address():
    ray, calls = fake_ray([ConnectionAbortedError("Starting Ray client server failed.")] * 5)
    with pytest.raises(InputError) as err:
        execute._join_cluster(ray, "ray://head:10001", {})
    assert len(calls) == execute.CLIENT_CONNECT_ATTEMPTS
    assert "ray://head:10001" in str(err.value) and "\n" not in str(err.value)


def test_an_unreachable_cluster_is_reported_at_once():
    ray, calls = fake_ray([ConnectionError("ray client connection timeout")])
    with pytest.raises(InputError, match="connection timeout"):
        execute._join_cluster(ray, "ray://nowhere:10001", {})
    assert len(calls) == 1
