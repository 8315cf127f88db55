"""What the worker hears from its coordinator: its inbox (assignments, cancels, held jobs asked
back) and, with no new inbox for a heartbeat, the fleet's pulse. Either counts as contact; a
worker without contact for its grace period stops (the dead man's switch, ``agent_loop``).

A mixin of :class:`~expo_executor.worker.agent_loop.Worker`, whose ``__init__`` holds the
state it reads and sets: ``seq``, ``inbox_generation``, ``pending``, ``cancel``,
``released``, ``seen``, ``specs``, the inbox's clocks (``last_read``, ``last_inbox``,
``last_change``, ``inbox_readable``), the pulse's reader (``pulses``: ``worker/pulse_reader.py``) and
``last_contact``.
"""

from __future__ import annotations

import sys
import time

from expo_executor.core.records import WorkerState
from expo_executor.protocol import messages
from expo_executor.protocol.bucket import ObjectTooLarge
from expo_executor.protocol.keys import inbox_key
from expo_executor.protocol.records import Inbox


class CoordinatorContact:
    """Reading the inbox and the pulse (see the module)."""

    def _read_inbox(self) -> None:
        self.last_read = time.monotonic()
        try:
            # its generation compared first: an inbox judged before is not downloaded again
            blob = self.bucket.read(inbox_key(self.worker_id),
                                    if_generation_not_match=self.inbox_generation)
        except ObjectTooLarge as exc:  # refused before download: judged, as malformed
            self.inbox_generation = exc.generation
            print(f"worker {self.worker_id}: ignoring inbox: {exc}", file=sys.stderr, flush=True)
            return
        if blob is None or blob.generation == self.inbox_generation:
            return
        self.inbox_generation = blob.generation
        try:
            inbox = Inbox.decode(blob.data, self.key)
        except messages.MessageError as exc:
            print(f"worker {self.worker_id}: ignoring inbox: {exc}", file=sys.stderr, flush=True)
            return
        if inbox.to not in ("", self.worker_id):
            print(f"worker {self.worker_id}: ignoring an inbox for {inbox.to!r}",
                  file=sys.stderr, flush=True)
            return
        if inbox.seq <= self.seq:
            return  # a replay of an older assignment
        self.seq = inbox.seq
        self.last_contact = self.last_inbox = time.monotonic()
        if inbox.jobs or inbox.cancel:
            self.last_change = self.last_contact
        self.pending = {k: v for k, v in inbox.jobs.items() if k not in self.seen}
        # an opened spec is kept while its job is held or has started (until its result)
        self.specs = {k: v for k, v in self.specs.items() if k in self.pending or k in self.seen}
        self.cancel = set(inbox.cancel)
        self._give_back({key: request for key, request in inbox.release.items()
                         if key not in self.seen})

    def _give_back(self, requests: dict[str, int]) -> None:
        """Held jobs the coordinator asks back (another worker's free slot will run them),
        each with its request's number: they left ``pending`` with this inbox, and the
        status answers at once when a new request is among them. New by its number, not by
        its job: a job given back, held here again and asked back again before this worker
        read an inbox in between is a new request, and its answer is what the coordinator
        waits for. One this worker started already is not given back: its result comes as
        any other's."""
        new = requests.items() - self.released.items()
        self.released = requests
        if new:
            self._write_status(WorkerState.READY)

    def _inbox_stale(self) -> bool:
        """The inbox was last read longer ago than the fast poll, and reading it works. A
        busy worker reads it only every slow poll: a cancel from the domino effect of a
        timeout on another worker can wait there that long, so a held job with a hardness
        point reads it once more before it starts (one billed read per such start)."""
        return self.inbox_readable and time.monotonic() - self.last_read > self.poll

    def _read_inbox_now(self) -> None:
        self.inbox_readable = self._storage("read the inbox", self._read_inbox)

    def _read_pulse(self) -> None:
        """The pulse, read as :class:`~expo_executor.worker.pulse_reader.PulseReader` judges
        it: one that counts is contact (the grace starts again)."""
        if self.pulses.read(time.monotonic()):
            self.last_contact = time.monotonic()
