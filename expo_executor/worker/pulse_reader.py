"""The fleet's pulse as one worker reads it: with no other contact for the coordinator's
heartbeat, the pulse object is read, at most once a heartbeat (each read is a billed request,
paid per worker), and a new pulse counts as contact only when its tag for this worker verifies
with the worker's own key and its sequence number is newer than the last one accepted.
Anything else is ignored, and said once.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from expo_executor.protocol import messages
from expo_executor.protocol.bucket import Bucket, ObjectTooLarge
from expo_executor.protocol.keys import PULSE_KEY
from expo_executor.protocol.records import Pulse


@dataclass
class PulseReader:
    """One worker's reading of the pulse. ``every``: the coordinator's heartbeat (its pulse
    interval); None: the inbox alone is contact, and the pulse is never read."""

    bucket: Bucket
    worker_id: str
    key: bytes  # the worker's own
    every: float | None
    seq: int = -1  # of the last pulse accepted
    generation: int | None = None  # of the pulse object last judged
    next_read: float = 0.0  # not read again before (monotonic clock)
    said: bool = False  # a pulse ignored is said once

    def next_due(self, last_contact: float) -> float | None:
        """When the pulse is read next (monotonic clock): a heartbeat after the last contact
        (a new inbox or pulse), and not within a heartbeat of the last read; None: never."""
        return None if self.every is None else max(self.next_read, last_contact + self.every)

    def due(self, now: float, last_contact: float) -> bool:
        due = self.next_due(last_contact)
        return due is not None and now >= due

    def read(self, now: float) -> bool:
        """Read the pulse (the next read a heartbeat from ``now``, whether this one works or
        raises); True when it counts as contact (the grace starts again)."""
        self.next_read = now + (self.every or 0.0)
        try:
            # its generation compared first: a pulse judged before is not downloaded again
            blob = self.bucket.read(PULSE_KEY, if_generation_not_match=self.generation)
        except ObjectTooLarge as exc:  # refused before download: judged, as malformed
            self.generation, blob, why = exc.generation, None, str(exc)
        else:
            if blob is not None and blob.generation == self.generation:
                return False  # the coordinator has not written one since: nothing new to judge
            why = "there is none" if blob is None else None
        if blob is not None:
            self.generation = blob.generation
            try:
                pulse = Pulse.decode(blob.data)
            except messages.MessageError as exc:
                why = str(exc)
            else:
                why = self.judge(pulse)
        if why is not None and not self.said:
            self.said = True
            print(f"worker {self.worker_id}: ignoring the coordinator's pulse: {why}",
                  file=sys.stderr, flush=True)
        return why is None

    def judge(self, pulse: Pulse) -> str | None:
        """Why ``pulse`` does not count as contact, or None (it does: it is accepted)."""
        if self.worker_id not in pulse.tags:
            return "no entry for this worker"
        if not pulse.proves(self.worker_id, self.key):
            return "its tag for this worker does not verify with this worker's key"
        if pulse.seq <= self.seq:
            return f"sequence number {pulse.seq} not newer than {self.seq}"
        self.seq = pulse.seq
        return None
