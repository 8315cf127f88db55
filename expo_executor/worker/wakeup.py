"""The agent's sleep between two looks at its jobs, cut short when a child process ends.

Without it a slot whose job has ended stays idle until the next tick (the local poll, 0.05 s;
on a VM 0.1 s): on 300 trivial jobs over two slots that was 7.5 s of a 53-s run. A job
process, forked by the zygote or started as a fresh interpreter, is the agent's child, so the
kernel sends the agent SIGCHLD when it ends; Python's wakeup file descriptor turns the signal
into a byte on a pipe, and the sleep is a ``select`` on that pipe. A signal that stops the
worker (SIGTERM, SIGINT) wakes it the same way.

Signal handlers and the wakeup descriptor belong to the main thread: when the agent runs in
another one (the tests' workers in threads), the sleep is a plain ``time.sleep`` and a job's
end is seen at the next tick, as before.
"""

from __future__ import annotations

import os
import select
import signal
import threading
import time
from typing import Any, Iterable


class Wakeup:
    """``sleep(seconds)``: return after that long, or sooner once a child has ended."""

    def __init__(self) -> None:
        self._read: int | None = None
        self._write: int | None = None
        self._previous: tuple[Any, int] | None = None  # handler and wakeup fd to restore

    def install(self) -> bool:
        """Listen for SIGCHLD; False (and a plain sleep) outside the main thread."""
        if threading.current_thread() is not threading.main_thread():
            return False
        read, write = os.pipe()
        for fd in (read, write):
            os.set_blocking(fd, False)
            os.set_inheritable(fd, False)
        old_fd = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        old_handler = signal.signal(signal.SIGCHLD, _no_op)
        self._read, self._write, self._previous = read, write, (old_handler, old_fd)
        return True

    def sleep(self, seconds: float, watch: Iterable[int] = ()) -> bool:
        """Sleep up to ``seconds``; True when a signal (a child's end) or a descriptor of
        ``watch`` becoming readable (the zygote saying it is ready) cut it short."""
        fds = [*([self._read] if self._read is not None else []), *watch]
        if not fds:
            time.sleep(seconds)
            return False
        ready = select.select(fds, [], [], max(0.0, seconds))[0]
        if self._read in ready:
            self._drain()
        return bool(ready)

    def close(self) -> None:
        """Put back the SIGCHLD handler and wakeup descriptor found at install."""
        if self._read is None or self._previous is None:
            return
        handler, fd = self._previous
        signal.signal(signal.SIGCHLD, handler)
        signal.set_wakeup_fd(fd)
        for end in (self._read, self._write):
            if end is not None:
                os.close(end)
        self._read = self._write = self._previous = None

    def _drain(self) -> None:
        try:
            while os.read(self._read, 512):  # type: ignore[arg-type]
                pass
        except BlockingIOError:
            pass


def _no_op(*_: object) -> None:
    """SIGCHLD's Python handler: the wakeup byte is the point; children are reaped by the
    agent's own ``waitpid`` calls."""
