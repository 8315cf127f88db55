"""The fake Compute Engine's zone operations: created by inserts, deletes and preemptions,
DONE at once or later (``op_delay``), read by ``zoneOperations.get``/``list``/``wait``, and
found again by a request's ``requestId`` (a retried insert answers its first operation).
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

from expo_executor.emulator.api_error import not_found
from expo_executor.emulator.compute_filter import compile_filter, page
from expo_executor.emulator.compute_vm import now_rfc3339, zone_url

WAIT_CAP_S = 30.0  # operations.wait answers after this long even if the operation is not DONE


class Operations:
    """Every zone operation, by project and zone. ``changed`` is the fake's condition (over
    its lock): ``new`` and ``finish`` are called with it held, and wake ``wait``; ``stopped``
    says the fake is shutting down (a waiter then answers at once)."""

    def __init__(self, changed: threading.Condition, stopped: Callable[[], bool]) -> None:
        self._changed = changed
        self._stopped = stopped
        self._ops: dict[tuple[str, str], dict[str, dict]] = {}  # (project, zone) -> name -> op
        self._by_request_id: dict[tuple[str, str], tuple[str, str]] = {}

    def new(self, project: str, zone: str, op_type: str, target: str, *,
            target_id: str | None = None, done: bool = True, user: str = "fake@example.com",
            error: dict | None = None, group: str | None = None) -> dict:
        """A new operation on ``target`` (an instance's name; "" for a bulk insert), RUNNING
        or, when ``done``, DONE (failed with ``error`` if given)."""
        stamp = now_rfc3339()
        name = f"operation-{int(time.time() * 1000)}-{secrets.token_hex(6)}-{secrets.token_hex(4)}"
        url = zone_url(project, zone)
        op: dict[str, Any] = {
            "kind": "compute#operation", "id": str(secrets.randbits(63)), "name": name,
            "zone": url, "operationType": op_type,
            "targetLink": f"{url}/instances/{target}" if target else f"{url}/instances",
            "status": "RUNNING", "user": user, "progress": 0, "insertTime": stamp,
            "startTime": stamp, "selfLink": f"{url}/operations/{name}",
        }
        if target_id is not None:
            op["targetId"] = target_id
        if group is not None:
            op["operationGroupId"] = group
        self._ops.setdefault((project, zone), {})[name] = op
        if done:
            self.finish(op, error)
        return op

    def finish(self, op: dict, error: dict | None = None) -> None:
        """DONE, failed with ``error`` (``compute_faults.operation_error``) if given."""
        op.update(status="DONE", progress=100, endTime=now_rfc3339())
        if error is not None:
            op["error"] = {"errors": [error["detail"]]}
            op["httpErrorStatusCode"] = error["http"]
            op["httpErrorMessage"] = error["http_message"]
        self._changed.notify_all()

    def remembered(self, project: str, request_id: str | None) -> dict | None:
        """The operation a request with this ``requestId`` already created, if any."""
        if not request_id:
            return None
        hit = self._by_request_id.get((project, request_id))
        if hit is None:
            return None
        return self._ops.get((project, hit[0]), {}).get(hit[1])

    def remember(self, project: str, zone: str, request_id: str | None, op: dict) -> None:
        if request_id:
            self._by_request_id[(project, request_id)] = (zone, op["name"])

    def zones(self, project: str) -> set[str]:
        """The zones where ``project`` has operations (an aggregated list names them all)."""
        return {zone for (owner, zone) in self._ops if owner == project}

    # -- the API ----------------------------------------------------------------------------
    def get(self, project: str, zone: str, name: str) -> dict:
        with self._changed:
            op = self._ops.get((project, zone), {}).get(name)
            if op is None:
                raise not_found(project, f"zones/{zone}", "operations", name)
            return op

    def wait(self, project: str, zone: str, name: str) -> dict:
        """The operation once DONE, or as it is after ``WAIT_CAP_S`` (as the real API does)."""
        deadline = time.monotonic() + WAIT_CAP_S
        with self._changed:
            op = self.get(project, zone, name)
            while op["status"] != "DONE" and not self._stopped():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(left)
            return op

    def list(self, project: str, zone: str, query: dict) -> dict:
        with self._changed:
            keep = compile_filter(query.get("filter", ""))
            items = [op for op in self._ops.get((project, zone), {}).values() if keep(op)]
            chunk, nxt = page(items, query)
            out: dict[str, Any] = {"kind": "compute#operationList",
                                   "id": f"projects/{project}/zones/{zone}/operations",
                                   "items": chunk,
                                   "selfLink": f"{zone_url(project, zone)}/operations"}
            if nxt:
                out["nextPageToken"] = nxt
            return out
