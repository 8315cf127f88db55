"""The agent's sleep (worker/wakeup.py): cut short by a child's end, by a watched descriptor,
and a plain sleep outside the main thread; what it installs it puts back."""

from __future__ import annotations

import os
import signal
import threading

from expo_executor.worker.wakeup import Wakeup

LONG = 60.0  # a sleep that must be cut short: the test fails (slowly) if it is not


def test_sigchld_cuts_the_sleep_short_and_close_puts_back_sigchld() -> None:
    before = signal.getsignal(signal.SIGCHLD)
    wakeup = Wakeup()
    assert wakeup.install()
    try:
        os.kill(os.getpid(), signal.SIGCHLD)  # what the kernel sends when a child ends
        assert wakeup.sleep(LONG), "SIGCHLD must wake the sleep"
        assert not wakeup.sleep(0.0), "the wakeup byte was drained: nothing is pending"
    finally:
        wakeup.close()
    assert signal.getsignal(signal.SIGCHLD) is before
    assert signal.set_wakeup_fd(-1) == -1, "no wakeup descriptor is left behind"


def test_a_watched_descriptor_cuts_the_sleep_short() -> None:
    read, write = os.pipe()
    try:
        os.write(write, b"x")
        assert Wakeup().sleep(LONG, (read,)), "a readable watched descriptor must wake it"
    finally:
        os.close(read)
        os.close(write)


def test_outside_the_main_thread_it_is_a_plain_sleep() -> None:
    answers: list[object] = []

    def body() -> None:
        wakeup = Wakeup()
        answers.append(wakeup.install())
        answers.append(wakeup.sleep(0.0))

    thread = threading.Thread(target=body)
    thread.start()
    thread.join(LONG)
    assert answers == [False, False]
    assert signal.getsignal(signal.SIGCHLD) is not None
