"""A GCE run's key requests, answered by its coordinator: each VM's worker asks once for its
own key (``engines/gce/key_channel``: the request carries a public key and the VM's identity
token), and the coordinator's round writes the grant, the key encrypted to that public key.
Kept apart from :mod:`.channel`'s statuses and results: a different message with its own
rule (once per VM, never a second grant).
"""

from __future__ import annotations

from typing import Any, Callable

from expo_executor.coordinator.vms import Vm
from expo_executor.protocol.bucket import Bucket, ObjectTooLarge
from expo_executor.protocol.keys import key_grant_key, key_request_key


class KeyRequests:
    """The key requests of one run's VMs and the grants written for them."""

    def __init__(self, bucket: Bucket, grantor: Any, log: Callable[[str], None]) -> None:
        self.bucket = bucket
        self.grantor = grantor  # engines/gce/key_channel.KeyGrantor
        self.log = log
        self._answered: dict[str, int] = {}  # VM -> generation of the request answered
        self._granted: set[str] = set()  # VMs whose worker has its key: never a second one

    def answer(self, vms: list[Vm], listing: dict[str, int]) -> None:
        """Grant each of the run's VMs that asked (a new request object) its key, encrypted to
        the public key its identity token vouches for; a refusal is one line, and no key.

        A VM gets its key once: its worker asks before anything else runs there, so a later
        request comes from something else on the VM (a job can obtain that VM's identity
        token too) and is refused. A VM granted its key is marked ``keyed``: its worker's
        loop, and its READY status, come next (``observe._read_statuses``)."""
        from expo_executor.engines.gce.key_channel import MAX_REQUEST_BYTES, KeyRefused

        for vm in vms:
            generation = listing.get(key_request_key(vm.name))
            if generation is None or generation == self._answered.get(vm.name):
                continue
            try:
                blob = self.bucket.read(key_request_key(vm.name), limit=MAX_REQUEST_BYTES)
            except ObjectTooLarge as exc:
                self._answered[vm.name] = exc.generation
                self.log(f"expocloud: refusing the key request of {vm.name}: {exc}")
                continue
            if blob is None:
                continue
            try:
                if vm.name in self._granted:
                    raise KeyRefused("its worker has its key already")
                answer = self.grantor.answer(vm.name, blob.data)
            except KeyRefused as exc:
                self._answered[vm.name] = blob.generation
                self.log(f"expocloud: refusing the key request of {vm.name}: {exc}")
                continue
            except Exception as exc:  # noqa: BLE001 - certificates out of reach: next round
                self.log(f"expocloud: cannot check the key request of {vm.name} yet: "
                         f"{type(exc).__name__}: {exc}")
                continue
            self.bucket.write(key_grant_key(vm.name), answer)
            self._answered[vm.name] = blob.generation
            self._granted.add(vm.name)
            vm.keyed = True

    def forget(self, name: str) -> None:
        """VM ``name`` ended: nothing more to answer for it."""
        self._answered.pop(name, None)
        self._granted.discard(name)
