"""Sending a run's notices without ever slowing or failing the run.

The coordinator's thread only puts a notice's body on a bounded queue (:meth:`Notifier.post`
never blocks: a full queue drops the notice, said once in the log); one daemon thread of this
module sends each body to every target, each call bounded by ``Pace.call_timeout``, a failure
retried up to ``Pace.attempts`` times with a doubling backoff. At the run's end
:meth:`Notifier.close` waits at most ``Pace.flush_s`` for the queue to empty, with the backoff
cut short (what is left is tried at once, within that time); whatever is still unsent then is
dropped and said, and a receiver that hangs holds only the daemon thread, never the run or the
process's exit.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from expo_executor.core.notices import Notice
from expo_executor.notify.targets import SendFailed, Target

_END = object()  # what close() queues: the thread stops once it gets there


@dataclass(frozen=True)
class Pace:
    """How hard and how long the sender tries (seconds)."""

    call_timeout: float = 10.0  # one POST or one command
    attempts: int = 4  # per notice and target
    backoff_s: float = 1.0  # before the first retry; doubled before each next one
    flush_s: float = 10.0  # what the run's end waits, at most, for the queue to empty
    queue: int = 32  # notices waiting to be sent; beyond it, new ones are dropped


def backoff(pace: Pace, attempt: int) -> float:
    """Seconds to wait after failed attempt ``attempt`` (0-based) before the next."""
    return pace.backoff_s * 2 ** attempt


def body_of(notice: Notice) -> bytes:
    """The bytes sent (and signed): the notice's small JSON document."""
    return json.dumps(notice.to_dict(), sort_keys=True, separators=(",", ":")).encode()


class Notifier:
    """Sends notices to ``targets`` (a webhook, a command, or both) from its own thread."""

    def __init__(self, targets: Sequence[Target], log: Callable[[str], None],
                 pace: Pace = Pace(), clock: Callable[[], float] = time.monotonic) -> None:
        self.targets = tuple(targets)
        self.log = log
        self.pace = pace
        self.clock = clock
        self._queue: queue.Queue[object] = queue.Queue(maxsize=pace.queue)
        self._closing = threading.Event()
        self._deadline = float("inf")
        self._thread: threading.Thread | None = None
        self._start = threading.Lock()
        self._dropped = 0
        self._cut_at_end = False  # a notice given up on because the run's end's wait was over

    def post(self, notice: Notice) -> None:
        """Queue ``notice`` for sending; never blocks, never raises."""
        if self._closing.is_set():
            return
        try:
            self._queue.put_nowait((notice.kind.value, body_of(notice)))
        except queue.Full:
            self._dropped += 1
            if self._dropped == 1:
                self.log(f"expocloud: {self.pace.queue} notifications are waiting to be sent; "
                         "newer ones are dropped until they are")
            return
        with self._start:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="expocloud-notify",
                                                daemon=True)
                self._thread.start()

    def close(self) -> None:
        """Send what is queued, waiting at most ``flush_s``; then stop. Safe to call twice."""
        if self._closing.is_set():
            return
        self._deadline = self.clock() + self.pace.flush_s
        self._closing.set()
        with self._start:
            thread = self._thread
        if thread is None:
            return
        try:
            self._queue.put(_END, timeout=self.pace.flush_s)
        except queue.Full:
            pass
        thread.join(max(0.0, self._deadline - self.clock()))
        # still sending at the deadline, or it gave up at it: the same drop either way (a call
        # that hangs until just then may end a moment before the join or after it)
        if thread.is_alive() or self._cut_at_end:
            self.log(f"expocloud: notifications not sent within {self.pace.flush_s:g} s of the "
                     "run's end are dropped (is the receiver down or hanging?)")

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _END:
                return
            kind, body = item  # type: ignore[misc]
            for target in self.targets:
                self._deliver(target, kind, body)

    def _deliver(self, target: Target, kind: str, body: bytes) -> None:
        """One notice to one target: retried with backoff, then given up on, in one line."""
        error: Exception = SendFailed("no attempt")
        tries = 0
        for attempt in range(self.pace.attempts):
            left = self._deadline - self.clock()
            if left <= 0:  # the run's end waited long enough: close() says it, once
                self._cut_at_end = True
                return
            tries += 1
            try:
                target.send(body, min(self.pace.call_timeout, left))
                return
            except SendFailed as exc:
                error = exc
                if not exc.retry:
                    break
            except Exception as exc:  # noqa: BLE001 - a notification never fails the run
                error = SendFailed(type(exc).__name__)
            if attempt + 1 < self.pace.attempts:
                self._closing.wait(backoff(self.pace, attempt))  # cut short at the run's end
        self.log(f"expocloud: notification {kind} to {target.name} not sent after {tries} "
                 f"attempt{'s' if tries != 1 else ''}: {error}")
