"""A worker's dead man's switch and the coordinator's pulse, against a real bucket directory.

The coordinator writes a worker's inbox only when it changes; its pulse (one object for the
fleet) proves it alive to each worker with a tag made with that worker's key. Here a thread
stands in for the coordinator and writes pulses (each a new object generation); the worker is
the real agent with a short grace. A pulse counts as contact only when its tag for this worker
verifies with this worker's key and its sequence number is newer than the last accepted.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from expo_executor.protocol import messages
from expo_executor.protocol.bucket import LocalBucket
from expo_executor.protocol.keys import PULSE_KEY, inbox_key
from expo_executor.protocol.records import Inbox, Pulse
from expo_executor.protocol.worker_keys import worker_key
from expo_executor.worker.agent import Worker

from tests.helpers import wait_until

RUN_KEY = b"r" * 32
ME, OTHER = "w-1", "w-2"
KEY, OTHER_KEY = worker_key(RUN_KEY, ME), worker_key(RUN_KEY, OTHER)
GRACE = 2.0
PULSE = 0.25  # the coordinator's heartbeat, as the worker is told it
EVERY = 0.1  # how often the stand-in coordinator writes a pulse


class Rig:
    """The real worker in a thread, given one inbox, and a stand-in coordinator that writes
    ``make(n)`` as the pulse every ``EVERY`` s (``n`` counts the writes) until stopped."""

    def __init__(self, tmp_path: Path, make: Callable[[int], bytes]) -> None:
        self.bucket = LocalBucket(tmp_path / "bucket")
        self.worker = Worker(self.bucket, ME, 1, KEY, tmp_path / "vm", poll=0.05, grace=GRACE,
                             heartbeat=0.5, zygote=False, pulse=PULSE)
        self.make = make
        self.written = 0
        self.exit_code: int | None = None
        self.pulsing = threading.Event()
        self.worker_thread = threading.Thread(target=self._work, daemon=True)
        self.pulse_thread = threading.Thread(target=self._pulse, daemon=True)

    def _work(self) -> None:
        self.exit_code = self.worker.run()

    def _pulse(self) -> None:
        while self.pulsing.wait(EVERY) is False:
            self.written += 1
            self.bucket.write(PULSE_KEY, self.make(self.written))

    def start(self) -> None:
        self.bucket.write(inbox_key(ME), Inbox(1, ME).encode(KEY))  # its only inbox
        self.worker_thread.start()
        self.pulse_thread.start()

    def stop_pulses(self) -> None:
        self.pulsing.set()
        self.pulse_thread.join(timeout=5)

    def close(self) -> None:
        self.stop_pulses()
        self.worker.request_stop("terminated")
        self.worker_thread.join(timeout=10)


def _genuine(n: int) -> bytes:
    return Pulse.make(1000 + n, {ME: KEY, OTHER: OTHER_KEY}).encode()


@pytest.fixture
def rigs(tmp_path: Path):
    made: list[Rig] = []

    def make(pulse: Callable[[int], bytes]) -> Rig:
        rig = Rig(tmp_path, pulse)
        made.append(rig)
        rig.start()
        return rig

    yield make
    for rig in made:
        rig.close()


def test_pulses_alone_keep_a_worker_alive_past_its_grace(rigs) -> None:
    rig = rigs(_genuine)
    # pulses for three graces, and never a new inbox
    assert wait_until(lambda: rig.written * EVERY >= 3 * GRACE, 3 * GRACE + 10)
    assert rig.worker_thread.is_alive() and rig.worker.stop_reason is None
    assert rig.worker.pulses.seq > 1000, "it accepted pulses"


def test_a_worker_stops_when_the_pulses_stop(rigs) -> None:
    rig = rigs(_genuine)
    assert wait_until(lambda: rig.worker.pulses.seq > 1000, 10)
    rig.stop_pulses()
    assert wait_until(lambda: not rig.worker_thread.is_alive(), GRACE + 10)
    assert rig.exit_code == 3 and "silent" in (rig.worker.stop_reason or "")


def _forged(n: int) -> bytes:
    """The right shape, the tag made with a key that is not the worker's."""
    seq = 1000 + n
    return Pulse(seq, {ME: messages.pulse_tag(b"x" * 32, seq, ME)}).encode()


def _replayed(n: int) -> bytes:
    """One genuine pulse, written again and again (a new object each time, same sequence)."""
    return Pulse.make(1000, {ME: KEY}).encode()


def _other_workers_tag(n: int) -> bytes:
    """Under this worker's name, the tag another worker's key makes for that worker."""
    seq = 1000 + n
    return Pulse(seq, {ME: messages.pulse_tag(OTHER_KEY, seq, OTHER)}).encode()


def _not_in_it(n: int) -> bytes:
    """A genuine pulse for the rest of the fleet: this worker is not kept."""
    return Pulse.make(1000 + n, {OTHER: OTHER_KEY}).encode()


def _malformed(n: int) -> bytes:
    return b'{"v": 2, "kind": "pulse", "body": {"seq": "soon"}}'


@pytest.mark.parametrize("make", [_forged, _replayed, _other_workers_tag, _not_in_it,
                                  _malformed])
def test_a_pulse_that_does_not_prove_the_coordinator_alive_does_not_count(
        rigs, make, capfd) -> None:
    rig = rigs(make)
    # pulses keep coming, yet the worker stops after its grace
    assert wait_until(lambda: not rig.worker_thread.is_alive(), GRACE + 10)
    assert rig.exit_code == 3 and "silent" in (rig.worker.stop_reason or "")
    assert rig.written * EVERY > GRACE / 2, "pulses were written while it waited"
    said = capfd.readouterr().err.count("ignoring the coordinator's pulse")
    assert said == 1, "said once, not at every read"
