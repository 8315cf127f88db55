"""Which of a run's VMs Compute Engine preempted: the ``compute.instances.preempted``
operations of the zones the run uses, each reported once, and only those about its own VMs (by
instance id, else by name and a preemption no earlier than the insert; a name can be reused).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from expo_executor.engines.gce.answers import epoch, name_of, one_line
from expo_executor.engines.gce.compute_lib import compute_types
from expo_executor.engines.gce.config import PREEMPT_CLOCK_SLACK_S, PREEMPTED_OP, Call

log = logging.getLogger(__name__)


class Preemptions:
    """The preemption operations seen so far, read through ``operations`` (a
    ZoneOperationsClient) with ``call``'s retries."""

    def __init__(self, operations: Any, project: str, call: Call, timeout: float) -> None:
        self._operations = operations
        self._project = project
        self._call = call
        self._timeout = timeout
        self._lock = threading.Lock()
        self._seen: set[str] = set()

    def since_last(self, zones: list[str], ids: set[int],
                   created_at: dict[str, float]) -> set[str]:
        """The names of the run's VMs (instance ``ids``; ``created_at``: when each name was
        inserted, wall clock) preempted in ``zones`` since the last look."""
        found: set[str] = set()
        for zone in zones:
            try:
                ops = self._call(lambda z=zone: self._preemption_ops(z))
            except Exception as err:  # noqa: BLE001 - look again at the next poll
                log.warning("could not list preemptions in %s: %s", zone, one_line(str(err)))
                continue
            for op in ops:
                with self._lock:
                    if op.name in self._seen:
                        continue
                    self._seen.add(op.name)
                if _ours(op, ids, created_at):
                    found.add(name_of(op.target_link))
        return found

    def _preemption_ops(self, zone: str) -> list[Any]:
        compute = compute_types()

        request = compute.ListZoneOperationsRequest(
            project=self._project, zone=zone, filter=f'operationType = "{PREEMPTED_OP}"')
        return list(self._operations.list(request=request, retry=None, timeout=self._timeout))


def _ours(op: Any, ids: set[int], created_at: dict[str, float]) -> bool:
    """Is a preemption operation about one of our VMs (by id, else by name and time)?"""
    if op.target_id and int(op.target_id) in ids:
        return True
    created = created_at.get(name_of(op.target_link))
    if created is None:
        return False
    when = epoch(op.insert_time)
    return when is None or when >= created - PREEMPT_CLOCK_SLACK_S
