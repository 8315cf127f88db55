"""Retry with exponential backoff and full jitter, shared by the GCS bucket, the GCE engine, the
guest side, the project checks and the price refresh.

Full jitter (AWS architecture blog, "Exponential Backoff And Jitter"): before retry ``n``
(0-based) sleep ``rand() * min(cap, base * 2**n)``. Only errors that ``is_transient`` accepts
are retried; anything else, and the last transient error once ``attempts`` calls have been
made, propagates unchanged. The defaults are one table, a ``Backoff`` per service: ``DEFAULT``
(Cloud Storage, the metadata server, the project checks, the price refresh: calls of tens of
milliseconds) and ``COMPUTE`` (Compute Engine, whose rate limits are counted per minute and whose
stockouts and 503s clear in seconds, not milliseconds).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Backoff:
    """How many calls in all, and the first and largest delay ceilings in seconds."""

    attempts: int = 8
    base: float = 0.1
    cap: float = 30.0


DEFAULT = Backoff()
COMPUTE = Backoff(attempts=8, base=1.0, cap=60.0)


def backoff_delay(retry_index: int, *, base: float, cap: float, rand: Callable[[], float]) -> float:
    """The full-jitter delay before retry number ``retry_index`` (0 for the first retry)."""
    ceiling = cap if retry_index >= 64 else min(cap, base * (2 ** retry_index))
    return rand() * ceiling


def retry_call(
    fn: Callable[[], T],
    *,
    is_transient: Callable[[BaseException], bool],
    attempts: int = DEFAULT.attempts,
    base: float = DEFAULT.base,
    cap: float = DEFAULT.cap,
    sleep: Callable[[float], object] = time.sleep,
    rand: Callable[[], float] = random.random,
) -> T:
    """Call ``fn()`` until it returns, retrying transient errors at most ``attempts - 1`` times."""
    if attempts < 1:
        raise ValueError("attempts must be at least 1")
    for attempt in range(attempts):
        try:
            return fn()
        except Exception as err:
            if attempt + 1 >= attempts or not is_transient(err):
                raise
            sleep(backoff_delay(attempt, base=base, cap=cap, rand=rand))
    raise AssertionError("unreachable")  # pragma: no cover
