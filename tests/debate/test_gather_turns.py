"""Concurrent turns of one run: a failing turn stops its siblings, so a failed run stops spending."""

import asyncio
import time

import pytest

from madbench.debate.context import DebateFailure, gather_turns


def test_results_come_back_in_order():
    async def turn(i, delay):
        await asyncio.sleep(delay)
        return i
    assert asyncio.run(gather_turns(turn(1, 0.03), turn(2, 0.0), turn(3, 0.01))) == [1, 2, 3]


def test_a_failing_turn_cancels_the_others_before_the_error_propagates():
    finished, cancelled = [], []

    async def slow(name):
        try:
            await asyncio.sleep(5)
            finished.append(name)
        except asyncio.CancelledError:
            cancelled.append(name)
            raise

    async def failing():
        await asyncio.sleep(0.01)
        raise DebateFailure("value propose (round 0): invalid answer after 3 tries")

    async def main():
        t0 = time.monotonic()
        with pytest.raises(DebateFailure, match="invalid answer"):
            await gather_turns(slow("macro"), failing(), slow("risk"))
        return time.monotonic() - t0
    assert asyncio.run(main()) < 2
    assert finished == [] and sorted(cancelled) == ["macro", "risk"]  # stopped, and stopped before the raise
