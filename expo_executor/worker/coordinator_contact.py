"""What the worker hears from its coordinator: its inbox (assignments, cancels, held jobs asked
back) and, with no new inbox for a heartbeat, the fleet's pulse. Either counts as contact; a
worker without contact for its grace period stops (the dead man's switch, ``agent_loop``).

A mixin of :class:`~expo_executor.worker.agent_loop.Worker`, whose ``__init__`` holds the
state it reads and sets: ``seq``, ``inbox_generation``, ``pending``, ``cancel``,
``released``, ``seen``, the inbox's clocks (``last_read``, ``last_inbox``, ``last_change``,
``inbox_readable``), the pulse's (``pulse``, ``pulse_seq``, ``pulse_generation``,
``said_pulse``) and ``last_contact``.
"""

from __future__ import annotations

import sys
import time

from expo_executor.core.records import WorkerState
from expo_executor.protocol import messages
from expo_executor.protocol.keys import PULSE_KEY, inbox_key
from expo_executor.protocol.records import Inbox, Pulse


class CoordinatorContact:
    """Reading the inbox and the pulse (see the module)."""

    def _read_inbox(self) -> None:
        self.last_read = time.monotonic()
        blob = self.bucket.read(inbox_key(self.worker_id))
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
        self.cancel = set(inbox.cancel)
        self._give_back({key for key in inbox.release if key not in self.seen})

    def _give_back(self, keys: set[str]) -> None:
        """Held jobs the coordinator asks back (another worker's free slot will run them):
        they left ``pending`` with this inbox, and the status says so at once when a new one
        is among them. One this worker started already is not given back: its result comes
        as any other's."""
        new = keys - self.released
        self.released = keys
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

    def _pulse_due(self) -> bool:
        """No contact (a new inbox or pulse) for the coordinator's heartbeat, and the pulse not
        read within one: each read is a billed request, paid per worker."""
        now = time.monotonic()
        return self.pulse is not None and now - self.last_contact >= self.pulse \
            and now >= self.next_pulse_read

    def _read_pulse(self) -> None:
        """A new pulse whose tag for this worker verifies with its own key counts as contact
        (the grace starts again); anything else is ignored, said once."""
        blob = self.bucket.read(PULSE_KEY)
        if blob is not None and blob.generation == self.pulse_generation:
            return  # the coordinator has not written one since: nothing new to judge
        why = "there is none" if blob is None else None
        if blob is not None:
            self.pulse_generation = blob.generation
            try:
                pulse = Pulse.decode(blob.data)
            except messages.MessageError as exc:
                why = str(exc)
            else:
                why = self._judge(pulse)
        if why is None:
            self.last_contact = time.monotonic()
        elif not self.said_pulse:
            self.said_pulse = True
            print(f"worker {self.worker_id}: ignoring the coordinator's pulse: {why}",
                  file=sys.stderr, flush=True)

    def _judge(self, pulse: Pulse) -> str | None:
        """Why ``pulse`` does not count as contact, or None (it does: it is accepted)."""
        if self.worker_id not in pulse.tags:
            return "no entry for this worker"
        if not pulse.proves(self.worker_id, self.key):
            return "its tag for this worker does not verify with this worker's key"
        if pulse.seq <= self.pulse_seq:
            return f"sequence number {pulse.seq} not newer than {self.pulse_seq}"
        self.pulse_seq = pulse.seq
        return None
