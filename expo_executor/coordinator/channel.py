"""The coordinator's side of the bucket: worker statuses and results in, inboxes out.

Statuses, results and inboxes are the typed records of :mod:`expo_executor.protocol.records`
under the keys of :mod:`expo_executor.protocol.keys`; a message that does not decode (malformed,
oversized, unsigned, signed with another key) is logged and ignored. Each worker's messages are
signed with that worker's own key (derived here from the run key, :mod:`worker_keys`): a status
or result claiming worker W counts only when W's key signed it, and W's inbox (every job in it
sealed) opens only with W's key. It also counts what the
request budget needs: the coordinator's listings, its heartbeat-only inbox writes, and the
storage operations each worker reports.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any, Callable

from expo_executor.coordinator.vms import Vm
from expo_executor.protocol import messages
from expo_executor.protocol.bucket import Bucket
from expo_executor.protocol.keys import (WORKERS_PREFIX, boot_log_key, inbox_key,
                                         key_grant_key, key_request_key, result_key, status_key)
from expo_executor.protocol.records import Inbox, WorkerResult, WorkerStatus
from expo_executor.protocol.worker_keys import worker_key

BOOT_LOG_LINES = 8  # of a failed VM's startup log, shown in the coordinator's message
BOOT_LOG_CHARS = 1500
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


class Channel:
    """Reads and writes the bucket for one run's coordinator (its single writer of inboxes)."""

    def __init__(self, bucket: Bucket, run_key: bytes, log: Callable[[str], None],
                 grantor: Any = None) -> None:
        self.bucket = bucket
        self.run_key = run_key
        self.log = log
        # answers GCE workers' key requests (engines/gce/key_channel.KeyGrantor); None: the
        # engine hands workers their keys itself (local workers: in their environment)
        self.grantor = grantor
        self._key_requests: dict[str, int] = {}  # VM -> generation of the request answered
        self._granted: set[str] = set()  # VMs whose worker has its key: never a second one
        self.lists = 0  # the coordinator's listings, for the request budget
        self.heartbeats = 0  # inbox writes that only kept a worker's dead man's switch quiet
        self.worker_ops: dict[str, dict[str, int]] = {}  # storage operations workers reported
        self._seq = 0
        self._results_seen: set[tuple[str, str]] = set()
        self._keys: dict[str, bytes] = {}  # worker -> its key (derived once)

    def key(self, worker: str) -> bytes:
        """Worker ``worker``'s own key: the only key its messages are signed with."""
        if worker not in self._keys:
            self._keys[worker] = worker_key(self.run_key, worker)
        return self._keys[worker]

    # -- in ------------------------------------------------------------------------------------
    def statuses(self, vms: Iterable[Vm]) -> list[tuple[Vm, WorkerStatus | None]]:
        """The VMs whose status object changed since it was last read, each with its status
        (None: it did not decode). One listing for all of them."""
        listing = self.bucket.list(WORKERS_PREFIX)
        self.lists += 1
        vms = list(vms)
        if self.grantor is not None:
            self._answer_key_requests(vms, listing)
        changed: list[tuple[Vm, WorkerStatus | None]] = []
        for vm in vms:
            generation = listing.get(status_key(vm.name))
            if generation is None or generation == vm.status_generation:
                continue
            blob = self.bucket.read(status_key(vm.name))
            if blob is None:
                continue
            vm.status_generation = blob.generation
            changed.append((vm, self._status(vm.name, blob.data)))
        return changed

    def _answer_key_requests(self, vms: list[Vm], listing: dict[str, int]) -> None:
        """Grant each of the run's VMs that asked (a new request object) its key, encrypted to
        the public key its identity token vouches for; a refusal is one line, and no key.

        A VM gets its key once: its worker asks before anything else runs there, so a later
        request comes from something else on the VM (a job can obtain that VM's identity
        token too) and is refused."""
        from expo_executor.engines.gce.key_channel import KeyRefused

        for vm in vms:
            generation = listing.get(key_request_key(vm.name))
            if generation is None or generation == self._key_requests.get(vm.name):
                continue
            blob = self.bucket.read(key_request_key(vm.name))
            if blob is None:
                continue
            try:
                if vm.name in self._granted:
                    raise KeyRefused("its worker has its key already")
                answer = self.grantor.answer(vm.name, blob.data)
            except KeyRefused as exc:
                self._key_requests[vm.name] = blob.generation
                self.log(f"expocloud: refusing the key request of {vm.name}: {exc}")
                continue
            except Exception as exc:  # noqa: BLE001 - certificates out of reach: next round
                self.log(f"expocloud: cannot check the key request of {vm.name} yet: "
                         f"{type(exc).__name__}: {exc}")
                continue
            self.bucket.write(key_grant_key(vm.name), answer)
            self._key_requests[vm.name] = blob.generation
            self._granted.add(vm.name)

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
        if status.ops:
            self.worker_ops[name] = status.ops
        return status

    def results(self, wanted: set[tuple[str, str]]) -> Iterator[WorkerResult]:
        """The results of ``wanted`` ``(job, worker)`` pairs not read before, one at a time:
        each is acted on before the next is read. A result object is read until it exists,
        then never again (not even when acting on one result read others meanwhile)."""
        for key, worker in sorted(wanted - self._results_seen):
            if (key, worker) in self._results_seen:
                continue
            blob = self.bucket.read(result_key(key, worker))
            if blob is None:
                continue
            self._results_seen.add((key, worker))
            try:
                result = WorkerResult.decode(blob.data, self.key(worker))
            except messages.MessageError as exc:
                self.log(f"expocloud: ignoring a malformed result of {key}: {exc}")
                continue
            if result.key == key and result.worker == worker:
                yield result

    def boot_log(self, name: str) -> str:
        """The last lines VM ``name``'s startup script left in the bucket before it powered
        the VM off ("" if none): unsigned text from the VM, so it is only shown, control
        characters blanked and its length capped, never acted on."""
        blob = self.bucket.read(boot_log_key(name))
        if blob is None:
            return ""
        text = _CONTROL.sub(" ", blob.data.decode("utf-8", "replace"))
        tail = [line.strip() for line in text.splitlines() if line.strip()][-BOOT_LOG_LINES:]
        return " | ".join(tail)[-BOOT_LOG_CHARS:]

    # -- out -----------------------------------------------------------------------------------
    def write_inboxes(self, vms: Iterable[Vm], now: float, heartbeat: float) -> None:
        """Write the inbox of every VM whose assignments changed, or whose last inbox is
        ``heartbeat`` s old (that write only keeps its dead man's switch from firing)."""
        for vm in vms:
            if not (vm.inbox_dirty or now - vm.last_inbox >= heartbeat):
                continue
            self._seq += 1
            self.heartbeats += not vm.inbox_dirty
            inbox = Inbox(self._seq, vm.name, dict(vm.jobs), sorted(vm.cancel))
            self.bucket.write(inbox_key(vm.name), inbox.encode(self.key(vm.name)))
            vm.inbox_dirty = False
            vm.last_inbox = now

    def delete_inbox(self, name: str) -> None:
        self.bucket.delete(inbox_key(name))
        self._keys.pop(name, None)

    def usage(self) -> dict[str, Any]:
        """The storage operations of the run so far, as ``requests.json`` records them."""
        return {"coordinator": dict(getattr(self.bucket, "ops", {})),
                "coordinator_lists": self.lists, "coordinator_heartbeats": self.heartbeats,
                "workers": self.worker_ops}
