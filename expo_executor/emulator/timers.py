"""The fake Compute Engine's clock: one thread runs every delayed action (boots, operation
completions, expiries, chaos), so a delay costs no thread of its own."""

from __future__ import annotations

import heapq
import itertools
import threading
import time
import traceback
from collections.abc import Callable


class Timers:
    """One thread runs every delayed action (boots, operation completions, expiries)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._cond = threading.Condition()
        self._seq = itertools.count()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="fake-compute-timers", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def call_later(self, delay: float, fn: Callable[[], None]) -> None:
        with self._cond:
            heapq.heappush(self._heap, (time.monotonic() + max(0.0, delay), next(self._seq), fn))
            self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped:
                    now = time.monotonic()
                    if self._heap and self._heap[0][0] <= now:
                        break
                    self._cond.wait(self._heap[0][0] - now if self._heap else None)
                if self._stopped:
                    return
                fn = heapq.heappop(self._heap)[2]
            try:
                fn()
            except Exception:  # noqa: BLE001 - a fake's bug must not stop its clock
                traceback.print_exc()


def spawn(fn: Callable[..., object], *args: object) -> None:
    """Run ``fn(*args)`` on a thread of its own (a daemon: it never holds the fake up)."""
    threading.Thread(target=fn, args=args, daemon=True).start()
