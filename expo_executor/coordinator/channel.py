"""The coordinator's side of the bucket: worker statuses and results in, inboxes out.

One listing of ``workers/`` a round shows both the statuses that changed and the result objects
written since (one lives under its worker's prefix, :mod:`keys`, and may hold several of its
results, :class:`~expo_executor.protocol.records.ResultBatch`): only those are read, and an
object is deleted once the loop has the records of all its results on disk, so the listing
stays the size of the fleet however many jobs the run has done.

Statuses, results and inboxes are the typed records of :mod:`expo_executor.protocol.records`
under the keys of :mod:`expo_executor.protocol.keys`; a message that does not decode (malformed,
oversized, unsigned, signed with another key) is logged and ignored; so is an object too large
to read, which is refused before its body is downloaded (``bucket_contract``). Each worker's messages are
signed with that worker's own key (derived here from the run key, :mod:`worker_keys`): a status
or result claiming worker W counts only when W's key signed it, and W's inbox (every job in it
sealed) opens only with W's key.

An inbox is written only when its assignments or cancels change. What keeps the workers' dead
man's switches quiet is one object for the whole fleet, the pulse (records.Pulse), written
at the interval the loop gives (half a heartbeat): a sequence number that only grows and, for
each VM the coordinator keeps, a tag made with that worker's key. Two class A writes a
heartbeat for the fleet instead of one a worker. It also counts what the request budget needs: the coordinator's listings, its pulse
writes, and the storage operations each worker reports.

At 1,000 workers a round's bucket calls are many and each is a network round trip, so they are
issued together on a small thread pool (``IO_THREADS`` in flight): the reads of changed
statuses, the reads of results, the inbox writes. Only the calls run on the pool; what they
return is taken in by the caller's thread, in a fixed order, so the loop thread stays the only
one that touches the VMs and the scheduler. A call that fails does not lose the others: their
answers are used, the failed one is tried again next round, and the first error is raised
after, so the loop still sees the round fail.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

from expo_executor.coordinator.key_requests import KeyRequests
from expo_executor.coordinator.vms import Vm
from expo_executor.protocol import messages
from expo_executor.protocol.bucket import Bucket, ObjectTooLarge
from expo_executor.protocol.keys import (PULSE_KEY, WORKERS_PREFIX, boot_log_key, inbox_key,
                                         parse_result_key,
                                         result_key, status_key)
from expo_executor.protocol.records import Inbox, Pulse, ResultBatch, WorkerResult, WorkerStatus
from expo_executor.protocol.worker_keys import worker_key

BOOT_LOG_LINES = 8  # of a failed VM's startup log, shown in the coordinator's message
BOOT_LOG_CHARS = 1500
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
IO_THREADS = 16  # bucket calls of one round in flight at once
T = TypeVar("T")
R = TypeVar("R")


class Outcomes(list):
    """What :meth:`Channel.each` returns: one ``(value, error)`` per item, in the items'
    order (``error`` None when the call succeeded)."""

    def first_error(self) -> Exception | None:
        """The first error of a call that failed; an object refused (too large to read, a
        MessageError) is not one: the caller says it as a malformed message."""
        return next((error for _, error in self if error is not None
                     and not isinstance(error, messages.MessageError)), None)


class Channel:
    """Reads and writes the bucket for one run's coordinator (its single writer of inboxes)."""

    def __init__(self, bucket: Bucket, run_key: bytes, log: Callable[[str], None],
                 grantor: Any = None) -> None:
        self.bucket = bucket
        self.run_key = run_key
        self.log = log
        # answers GCE workers' key requests; None: the engine hands workers their keys itself
        self.key_requests = KeyRequests(bucket, grantor, log) if grantor is not None else None
        self.lists = 0  # the coordinator's listings, for the request budget
        self.heartbeats = 0  # pulses written: one write a heartbeat for the whole fleet
        self.worker_ops: dict[str, dict[str, int]] = {}  # storage operations workers reported
        self._seq = 0  # of the last inbox written
        self._pulse_seq = 0  # of the last pulse written
        self._last_pulse: float | None = None  # when (the caller's clock)
        # result objects, by (job, worker) of their key: read, listed by the last listing,
        # read and not deleted yet, and the results each holds
        self._results_seen: set[tuple[str, str]] = set()
        self._results_listed: set[tuple[str, str]] = set()
        self._results_taken: list[tuple[str, str]] = []
        self._results_in: dict[tuple[str, str], set[tuple[str, str]]] = {}
        # results, by (job, worker): read and not handed out yet, and handed out
        self._results_unhanded: dict[tuple[str, str], WorkerResult] = {}
        self._results_handed: set[tuple[str, str]] = set()
        self._keys: dict[str, bytes] = {}  # worker -> its key (derived once)
        self.listing: dict[str, int] = {}  # the last listing of workers/ (dropped_vms.py)
        self._pool: ThreadPoolExecutor | None = None

    def key(self, worker: str) -> bytes:
        """Worker ``worker``'s own key: the only key its messages are signed with."""
        if worker not in self._keys:
            self._keys[worker] = worker_key(self.run_key, worker)
        return self._keys[worker]

    def each(self, call: Callable[[T], R], items: Sequence[T]) -> Outcomes:
        """``call`` on every item, up to ``IO_THREADS`` at once; waits for all of them."""
        if len(items) <= 1:  # nothing to overlap: no thread hop
            return Outcomes(_attempt(call, item) for item in items)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(IO_THREADS, thread_name_prefix="expocloud-io")
        futures = [self._pool.submit(_attempt, call, item) for item in items]
        return Outcomes(future.result() for future in futures)

    def close(self) -> None:
        """Let the I/O threads go (they are started again if the channel is used)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    # -- in ------------------------------------------------------------------------------------
    def statuses(self, vms: Iterable[Vm]) -> list[tuple[Vm, WorkerStatus | None]]:
        """The VMs whose status object changed since it was last read, each with its status
        (None: it did not decode). One listing for all of them."""
        listing = self.bucket.list(WORKERS_PREFIX)
        self.lists += 1
        self.listing = listing
        self._results_listed = {pair for name in listing
                                if (pair := parse_result_key(name)) is not None}
        vms = list(vms)
        if self.key_requests is not None:
            self.key_requests.answer(vms, listing)
        due = [vm for vm in vms
               if listing.get(status_key(vm.name)) not in (None, vm.status_generation)]
        reads = self.each(lambda vm: self.bucket.read(status_key(vm.name)), due)
        changed: list[tuple[Vm, WorkerStatus | None]] = []
        for vm, (blob, error) in zip(due, reads):
            if isinstance(error, ObjectTooLarge):  # not read: said as a malformed status
                vm.status_generation = error.generation
                self.log(f"expocloud: ignoring a malformed status of {vm.name}: {error}")
                changed.append((vm, None))
                continue
            if blob is None:  # gone since the listing, or its read failed: next round
                continue
            vm.status_generation = blob.generation
            changed.append((vm, self._status(vm.name, blob.data)))
        _raise(reads.first_error())
        return changed

    def _status(self, name: str, data: bytes) -> WorkerStatus | None:
        try:
            status = WorkerStatus.decode(data, self.key(name))
        except messages.MessageError as exc:
            self.log(f"expocloud: ignoring a malformed status of {name}: {exc}")
            return None
        if status.worker != name:
            self.log(f"expocloud: ignoring a status of {name} that claims to be "
                     f"{status.worker!r}'s")
            return None
        self._count_ops(name, status.ops)
        return status

    def _count_ops(self, name: str, ops: dict[str, int]) -> None:
        """A worker's storage operations so far, from a status or a result: counts only
        grow, and the two arrive in any order, so each class keeps the largest seen."""
        if ops:
            seen = self.worker_ops.setdefault(name, {})
            for price_class, count in ops.items():
                seen[price_class] = max(count, seen.get(price_class, 0))

    def results(self, wanted: set[tuple[str, str]],
                unlisted: bool = False) -> Iterator[WorkerResult]:
        """The results of ``wanted`` ``(job, worker)`` pairs not handed out before, in the
        pairs' sorted order, from the result objects of their workers that the last listing
        (:meth:`statuses`) showed and that were not read before (all read at once, then
        handed out one at a time). An object may hold several results of its worker (a
        :class:`ResultBatch`, named for its first job); each is handed out once. ``wanted``
        holds every job the caller has on its workers: a result of any other job of theirs
        is stale and never handed out (:meth:`_drop_stale`).
        ``unlisted``: read every wanted pair's object too, listed or not (a VM just found
        gone: what it wrote after the listing is its last word)."""
        workers = {worker for _, worker in wanted}
        objects = {pair for pair in self._results_listed if pair[1] in workers}
        if unlisted:
            objects |= wanted - self._results_handed
        error = self.read_objects(objects)
        for pair in sorted(wanted & self._results_unhanded.keys()):
            result = self._results_unhanded.pop(pair, None)
            if result is None:
                continue  # taken meanwhile by a call made while acting on an earlier one
            self._results_handed.add(pair)
            self._count_ops(pair[1], result.ops)
            yield result
        self._drop_stale(workers, wanted)
        _raise(error)

    def read_objects(self, pairs: Iterable[tuple[str, str]]) -> Exception | None:
        """Read and take in the result objects of ``pairs`` ((job, worker) of their keys) not
        read before, all at once; the first error (that object is read again next time)."""
        pending = sorted(set(pairs) - self._results_seen)
        reads = self.each(lambda pair: self.bucket.read(result_key(*pair)), pending)
        for pair, (blob, error) in zip(pending, reads):
            if isinstance(error, ObjectTooLarge) and pair not in self._results_seen:
                self._take_object(pair, error)  # not read: said as a malformed result
            elif blob is not None and pair not in self._results_seen:
                self._take_object(pair, blob.data)  # None: gone, or its read failed: later
        return reads.first_error()

    def was_read(self, pair: tuple[str, str]) -> bool:
        """The result object of ``pair`` ((job, worker) of its key) was read and is kept."""
        return pair in self._results_seen

    def forget(self, worker: str) -> list[WorkerResult]:
        """Drop what is kept of ``worker``, a VM the run no longer has, once its objects are
        to go: the results of it read and never handed out (too late to be used) return."""
        late = [result for pair, result in sorted(self._results_unhanded.items())
                if pair[1] == worker]
        for table in (self._results_unhanded, self._results_in):
            for pair in [p for p in table if p[1] == worker]:
                del table[pair]
        for pairs in (self._results_seen, self._results_handed):
            pairs.difference_update([pair for pair in pairs if pair[1] == worker])
        self._results_taken = [pair for pair in self._results_taken if pair[1] != worker]
        if self.key_requests is not None:
            self.key_requests.forget(worker)
        self._keys.pop(worker, None)
        return late

    def _drop_stale(self, workers: set[str], wanted: set[tuple[str, str]]) -> None:
        """Forget the unhanded results of ``workers`` that are not ``wanted``: the caller
        wants every job it still has on them, so such a result is of a job it gave up or
        took another worker's result for (as the loop ignores a late report), and its
        object may go."""
        for pair in [p for p in self._results_unhanded if p[1] in workers and p not in wanted]:
            del self._results_unhanded[pair]

    def _take_object(self, name: tuple[str, str], data: bytes | ObjectTooLarge) -> None:
        """Decode the result object ``name`` ((job, worker) of its key): its results of that
        worker not handed out before wait in ``_results_unhanded``. One too large to read
        is refused as a malformed one (and deleted with the objects taken)."""
        self._results_seen.add(name)
        self._results_taken.append(name)
        key, worker = name
        try:
            if isinstance(data, ObjectTooLarge):
                raise data
            batch = ResultBatch.decode(data, self.key(worker))
        except messages.MessageError as exc:
            self.log(f"expocloud: ignoring a malformed result of {key}: {exc}")
            return
        if batch.worker != worker or batch.first != key:
            self.log(f"expocloud: ignoring a result object of {key} on {worker} that names "
                     f"{batch.first} on {batch.worker}")
            return
        for result in batch.results:
            pair = (result.key, worker)
            if pair not in self._results_handed:
                self._results_unhanded[pair] = result
                self._results_in.setdefault(name, set()).add(pair)

    def delete_taken(self) -> None:
        """Delete the result objects read so far whose every result was handed out. The
        caller's records of them must be on disk: after a crash, only a result object tells
        what its record would have. A delete that fails is tried again next time (an object
        left over only lengthens listings)."""
        taken, self._results_taken = self._results_taken, []
        done = [name for name in taken if not self._results_in.get(name, set())
                & self._results_unhanded.keys()]
        self._results_taken = [name for name in taken if name not in done]
        deletes = self.each(lambda pair: self.bucket.delete(result_key(*pair)), done)
        for name, (_, error) in zip(done, deletes):
            if error is not None:
                self._results_taken.append(name)
                continue
            # its name may come again: a worker whose write of it seemed to fail sends
            # what it held afresh (worker/result_reports.py)
            self._results_seen.discard(name)
            self._results_in.pop(name, None)

    def boot_log(self, name: str) -> str:
        """The last lines VM ``name``'s startup script left in the bucket before it powered
        the VM off ("" if none): unsigned text from the VM, so it is only shown, control
        characters blanked and its length capped, never acted on."""
        try:
            blob = self.bucket.read(boot_log_key(name))
        except ObjectTooLarge as exc:
            return f"(its log is not shown: {exc})"
        if blob is None:
            return ""
        text = _CONTROL.sub(" ", blob.data.decode("utf-8", "replace"))
        tail = [line.strip() for line in text.splitlines() if line.strip()][-BOOT_LOG_LINES:]
        return " | ".join(tail)[-BOOT_LOG_CHARS:]

    # -- out -----------------------------------------------------------------------------------
    def write_inboxes(self, vms: Iterable[Vm], now: float) -> None:
        """Write the inbox of every VM whose assignments or cancels changed; the others' dead
        man's switches are kept quiet by the pulse (:meth:`write_pulse`)."""
        due = [vm for vm in vms if vm.places.dirty]
        sealed: list[bytes] = []
        for vm in due:
            self._seq += 1
            places = vm.places
            inbox = Inbox(self._seq, vm.name, places.jobs(), places.cancels(), places.releases())
            sealed.append(inbox.encode(self.key(vm.name)))
        writes = self.each(lambda item: self.bucket.write(inbox_key(item[0].name), item[1]),
                            list(zip(due, sealed)))
        for vm, (_, error) in zip(due, writes):
            if error is not None:  # still due: written next round
                continue
            vm.places.dirty = False
        _raise(writes.first_error())

    def write_pulse(self, vms: Iterable[Vm], now: float, heartbeat: float) -> None:
        """Write the pulse for ``vms`` (the VMs the coordinator keeps) when the last one is
        ``heartbeat`` s old (``heartbeat`` 0: at once). A VM left out of it (deleted, lost)
        hears nothing more and stops itself after its grace. Its sequence number is the wall
        clock's milliseconds, and always past the last one written or continued after
        (:meth:`continue_pulse`), so it grows across a coordinator's crash too."""
        if self._last_pulse is not None and now - self._last_pulse < heartbeat:
            return
        seq = max(int(time.time() * 1000), self._pulse_seq + 1)
        pulse = Pulse.make(seq, {vm.name: self.key(vm.name) for vm in vms})
        self.bucket.write(PULSE_KEY, pulse.encode())
        self._pulse_seq, self._last_pulse = seq, now
        self.heartbeats += 1

    def continue_pulse(self, names: Iterable[str]) -> None:
        """Number the next pulse after the one in the bucket, when a tag of one of ``names``
        in it verifies: the last pulse of a crashed coordinator whose workers this channel
        takes over (a worker ignores a pulse not newer than the last it accepted)."""
        try:
            blob = self.bucket.read(PULSE_KEY)
            if blob is None:
                return
            pulse = Pulse.decode(blob.data)
        except messages.MessageError as exc:
            self.log(f"expocloud: ignoring a malformed pulse: {exc}")
            return
        if any(pulse.proves(name, self.key(name)) for name in names):
            self._pulse_seq = max(self._pulse_seq, pulse.seq)

    def continue_after(self, seq: int) -> None:
        """Number the next inbox after ``seq``: the last one a crashed coordinator wrote to
        the workers this channel takes over (a worker ignores an inbox not newer than the
        last it read)."""
        self._seq = max(self._seq, seq)

    def delete_inbox(self, name: str) -> None:
        """Delete the inbox of a VM the run drops; a delete that fails is only logged: the
        VM's objects go with the next sweep of dropped VMs (dropped_vms.py)."""
        try:
            self.bucket.delete(inbox_key(name))
        except Exception as exc:  # noqa: BLE001 - a left-over object never fails the run
            self.log(f"expocloud: could not delete the inbox of {name} yet "
                     f"({type(exc).__name__}: {exc}); tried again later")
        self._keys.pop(name, None)

    def usage(self) -> dict[str, Any]:
        """The storage operations of the run so far, as ``requests.json`` records them."""
        return {"coordinator": dict(getattr(self.bucket, "ops", {})),
                "coordinator_lists": self.lists, "coordinator_heartbeats": self.heartbeats,
                "workers": self.worker_ops}


def _attempt(call: Callable[[T], R], item: T) -> tuple[R | None, Exception | None]:
    try:
        return call(item), None
    except Exception as exc:  # handed back: the caller decides, after the other calls
        return None, exc


def _raise(error: Exception | None) -> None:
    if error is not None:
        raise error
