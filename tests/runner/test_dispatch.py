"""The dispatch loop's Ctrl-C: a request it takes between two steps, never an exception raised inside whatever the
main thread was running (pydantic turned one into its own serialisation error, and the batch ended in a traceback)."""

import os
import signal
import threading

import pytest

from madbench.runner.dispatch import ctrl_c_requests


def test_the_first_ctrl_c_is_a_request_and_the_second_interrupts_at_once():
    before = signal.getsignal(signal.SIGINT)
    with ctrl_c_requests() as asked:
        os.kill(os.getpid(), signal.SIGINT)
        assert asked.wait(10)  # taken as a request: nothing was raised here
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            asked.wait(10)  # the handler runs at the next bytecode; this wait is never reached in full
    assert signal.getsignal(signal.SIGINT) is before


def test_off_the_main_thread_ctrl_c_is_left_as_it_was():
    seen = {}

    def in_thread():
        with ctrl_c_requests() as asked:
            seen["handler"] = signal.getsignal(signal.SIGINT)
            seen["asked"] = asked.is_set()

    before = signal.getsignal(signal.SIGINT)
    t = threading.Thread(target=in_thread)
    t.start()
    t.join()
    assert seen == {"handler": before, "asked": False}
