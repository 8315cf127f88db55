"""Deleting VMs until they are gone: the one teardown of ``GceEngine.close()``, ``expocloud
cleanup`` and a crashed run's stop (``delete_instances``).

Why a loop and not one delete each: a delete can fail (a rate limit past its retries, a VM
whose insert is still running), and a listing misses a VM whose insert is young. So the VMs
known by name are deleted, their delete operations waited for, and, when a listing is given
(the run's label), whatever it shows is deleted too, until nothing is left or the time is up.
Each logical delete carries one ``request_id`` for all its retries (``clients.delete_call``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from expo_executor.engines.gce.answers import is_done, one_line, op_errors
from expo_executor.engines.gce.clients import delete_call, make_clients
from expo_executor.engines.gce.config import CALLS, TEARDOWN_TIMEOUT_S, Call

log = logging.getLogger(__name__)
Target = tuple[str, str]  # (zone, name)
WAIT_STEP_S = 60.0  # the longest one round waits for delete operations before listing again


@dataclass
class Teardown:
    """Deletes VMs of ``project`` through ``instances`` (an InstancesClient) and waits through
    ``operations`` (its ZoneOperationsClient); ``call`` retries each request."""

    instances: Any
    operations: Any
    project: str
    call: Call
    call_timeout_s: float

    def until_gone(self, known: dict[str, str], timeout_s: float,
                   listed: Callable[[], list[Target] | None] = lambda: [],
                   gone: Callable[[str], None] = lambda _name: None) -> list[Target] | None:
        """Delete the VMs ``known`` (name -> zone) and those ``listed()`` shows (None: the
        listing failed), and wait until none is left or ``timeout_s`` of real time has passed
        (0: the deletes are only started). ``gone(name)`` is told of each VM seen gone (its
        delete DONE without error, or not found). Returns None when all are gone, else what
        may be left, as (zone, name): [] when only the listing failed."""
        unconfirmed = dict(known)
        deadline = time.monotonic() + timeout_s
        issued: dict[str, Target] = {}  # name -> (zone, delete op) not seen DONE
        seen_gone: set[str] = set()

        def confirm(name: str) -> None:
            unconfirmed.pop(name, None)
            seen_gone.add(name)
            gone(name)

        with ThreadPoolExecutor(max_workers=8, thread_name_prefix="gce-delete") as pool:
            while True:
                found = listed()
                left = sorted({*(found or []), *((z, n) for n, z in unconfirmed.items())})
                if found == [] and not unconfirmed:
                    return None
                todo = [(z, n) for z, n in left if n not in issued]
                for (zone, name), (op, was_gone) in zip(todo, self._delete_all(pool, todo)):
                    if was_gone:
                        confirm(name)
                    elif op is not None:
                        issued[name] = (zone, op.name)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    still = [(z, n) for z, n in left if n not in seen_gone]
                    return None if not still and found is not None else still
                for name in self._wait(issued, min(remaining, WAIT_STEP_S)):
                    confirm(name)
                if not todo:  # nothing new to delete: let the running deletions progress
                    time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))

    def delete_quietly(self, target: Target) -> tuple[Any | None, bool]:
        """(the delete operation, False), or (None, True) if the VM is gone already, or
        (None, False) if the call failed (the loop tries again)."""
        zone, name = target
        try:
            op = delete_call(self.instances, self.project, zone, name, self.call_timeout_s,
                             self.call)
        except Exception as err:  # noqa: BLE001 - listed again and retried
            log.warning("deleting %s in %s failed: %s", name, zone, one_line(str(err)))
            return None, False
        return op, op is None

    def _delete_all(self, pool: ThreadPoolExecutor,
                    todo: list[Target]) -> list[tuple[Any | None, bool]]:
        """``delete_quietly`` of each, in parallel; one at a time when the interpreter is
        shutting down (close() from an atexit hook), where no thread may start."""
        try:
            return list(pool.map(self.delete_quietly, todo))
        except RuntimeError:
            return [self.delete_quietly(target) for target in todo]

    def _wait(self, issued: dict[str, Target], bound: float) -> list[str]:
        """Wait (bounded) for the delete operations; forget the ones DONE and return those
        that succeeded (a failed one is deleted again)."""
        deadline = time.monotonic() + bound
        done = []
        for name, (zone, op_name) in list(issued.items()):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                op = self.operations.wait(project=self.project, zone=zone, operation=op_name,
                                          retry=None, timeout=left + 5)
            except Exception as err:  # noqa: BLE001 - listed again shortly
                log.warning("waiting for the deletion of %s failed: %s", name,
                            one_line(str(err)))
                continue
            if is_done(op):
                del issued[name]
                if not op_errors(op)[0]:
                    done.append(name)
        return done


def delete_instances(project: str, items: list[dict], endpoint: str | None = None,
                     timeout_s: float = TEARDOWN_TIMEOUT_S) -> list[str]:
    """Delete ``items`` (dicts with name and zone, as ``listing.find_instances`` returns) and
    wait, bounded by ``timeout_s`` (0: only start the deletes), until they are gone; return
    the names deleted or already gone. The teardown ``GceEngine.close()`` runs, by name."""
    client, operations = make_clients(endpoint)
    teardown = Teardown(client, operations, project, CALLS.caller(), CALLS.timeout_s)
    done: list[str] = []
    teardown.until_gone({item["name"]: item["zone"] for item in items}, timeout_s,
                        gone=done.append)
    return done
