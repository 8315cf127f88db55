"""A job's one shape on its way to the worker (docs/development.md, "One job, there and back"):
the coordinator puts the very ``JobSpec`` its front end built into the worker's inbox, prune
point included, with no wrapper and no field copied; a run that confirms its timeouts sends it
without one (a worker must not act on a timeout not trusted yet). The real coordinator
(tests/coordinator_rig.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from expo_executor.core.hardness import HardnessPoint
from expo_executor.protocol.keys import inbox_key
from expo_executor.protocol.records import Inbox, PrunePoint
from expo_executor.protocol.worker_keys import worker_key

from tests.coordinator_rig import KEY, Rig, work_request


@pytest.mark.parametrize("confirm", [False, True])
def test_the_inbox_holds_the_spec_its_front_end_built(tmp_path: Path, confirm: bool) -> None:
    rig = Rig(tmp_path)
    rig.coordinator.scheduler.confirm_timeouts = confirm
    request = work_request(3)
    assert request.spec.prune == PrunePoint("f", HardnessPoint((), (3.0,)))
    rig.coordinator.submit([request])
    rig.round()
    rig.ready("w-1")
    rig.round()
    placed = rig.coordinator.vms.get("w-1").places.jobs()["j3"]
    if confirm:
        assert placed.prune is None and placed.argv == request.spec.argv
    else:
        assert placed is request.spec, "the front end's spec itself, not a copy"
    inbox = Inbox.decode(rig.direct.read(inbox_key("w-1")).data, worker_key(KEY, "w-1"))
    assert inbox.jobs["j3"].opened(worker_key(KEY, "w-1"), "j3") == placed
