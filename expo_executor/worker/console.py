"""The worker's own stdout and stderr, made safe to lose.

On a VM they end in a pipe or a file that can go away while the worker runs: the startup
script's ``tee`` dies when systemd stops the script at shutdown, which is exactly when the
worker must still report its jobs as preempted. A line the worker cannot print must never cost
that report: Python ignores SIGPIPE, so a write to a closed pipe raises BrokenPipeError, out of
whatever was printing. ``guard_output`` wraps both streams so that a failed write or flush
sends the stream to ``/dev/null`` instead, for the rest of the process (the interpreter's own
flush at exit included).
"""

from __future__ import annotations

import os
import sys
from typing import TextIO


class _Unbreakable:
    """A text stream whose write and flush never raise OSError: once the stream fails, its
    file descriptor is pointed at ``/dev/null`` and the lines go nowhere."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError:
            self._discard()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError:
            self._discard()

    def _discard(self) -> None:
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(null, self._stream.fileno())
            finally:
                os.close(null)
            self._stream.flush()  # what was buffered goes to /dev/null too
        except (OSError, ValueError):
            pass  # no descriptor to repoint: the next write fails and is dropped again

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)


def guard_output() -> None:
    """Make ``sys.stdout`` and ``sys.stderr`` survive their reader going away."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, _Unbreakable):
            setattr(sys, name, _Unbreakable(stream))
