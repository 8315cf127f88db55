"""Riding out the coordinator's own failed rounds: an outage is waited out, a bug is not.

A round fails when one of the coordinator's own storage or compute calls fails after the
bucket and engine layers' retries. Failing the run for that would fail every running job for
an error that was the coordinator's alone, while its workers, whose dead man's switch allows
the heartbeat grace (300 s on GCE), would have carried on. So a *transient* failure (no
connection, a timeout, 429 or 5xx, the local bucket's file system refusing for a while) is
said in one line, reminded of every ``REMIND_EVERY`` s, and the rounds go on for as long as it
lasts; once a round succeeds the loop reads whatever the workers did meanwhile (a worker whose
grace ran out deleted itself: the engine's listing shows it gone, and its jobs are re-queued).
Anything else (a refusal such as 403, a bug) is given up on loudly once it has failed for
``give_up_after`` s without a round in between succeeding.
"""

from __future__ import annotations

import traceback
from typing import Callable

GIVE_UP_AFTER = 60.0  # seconds a non-transient failure may repeat before the run is failed
REMIND_EVERY = 60.0  # seconds between the lines that say a transient outage still lasts


def is_transient_io(exc: BaseException) -> bool:
    """An error of the coordinator's own I/O worth waiting out: OSError (the local bucket's
    file system, dropped connections, timeouts, ``requests``' errors, which subclass it), or
    what Google's classifiers (``gcp.errors``) call transient for Cloud Storage or Compute Engine
    (429, 5xx, google-auth's transport errors)."""
    if isinstance(exc, OSError):
        return True
    try:
        from expo_executor.gcp.errors import is_transient, is_transient_storage

        return is_transient_storage(exc) or is_transient(exc)
    except ImportError:  # the local engine, without the Google client libraries
        return False


class Outage:
    """The failed rounds since the last good one, and what to say and do about them."""

    def __init__(self, log: Callable[[str], None], give_up_after: float = GIVE_UP_AFTER,
                 remind_every: float = REMIND_EVERY) -> None:
        self.log = log
        self.give_up_after = give_up_after
        self.remind_every = remind_every
        self.since: float | None = None  # the first failed round of this outage
        self.fatal_since: float | None = None  # ... its first non-transient failure
        self._said = 0.0  # when the last line about it was logged

    def round_ok(self, now: float) -> None:
        """A round succeeded: the outage, if any, is over."""
        if self.since is not None:
            self.log(f"expocloud: the coordinator's calls succeed again after "
                     f"{now - self.since:.0f} s; reading what the workers did meanwhile")
        self.since = self.fatal_since = None

    def round_failed(self, exc: Exception, now: float) -> bool:
        """A round failed with ``exc``: True once the run must be given up."""
        first = self.since is None
        if first:
            self.since = now
        if not is_transient_io(exc):
            if self.fatal_since is None:
                self.fatal_since = self._said = now
                self.log(f"expocloud: coordinator error (retrying for up to "
                         f"{self.give_up_after:g} s): {traceback.format_exc()}")
            return now - self.fatal_since >= self.give_up_after
        if first:
            self._said = now
            self.log(f"expocloud: the coordinator's own storage or compute calls fail "
                     f"({_one_line(exc)}); running jobs carry on, and it tries again every "
                     "round")
        elif now - self._said >= self.remind_every:
            self._said = now
            self.log(f"expocloud: still failing after {now - self.since:.0f} s "
                     f"({_one_line(exc)}); trying again")
        return False


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}"
