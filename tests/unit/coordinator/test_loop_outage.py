"""The coordinator rides out outages of its own storage and compute calls (C1), round by round
with the real coordinator, bucket and scheduler (tests/coordinator_rig.py): no job fails for
the coordinator's own I/O errors, the outage is said in one line, and once it ends the loop
goes on with whatever the workers did meanwhile. A non-transient error is still given up on,
after its window."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.api_core import exceptions as gexc

from expo_executor.core.scheduler import Outcome
from expo_executor.protocol.keys import PULSE_KEY
from expo_executor.protocol.records import Pulse
from expo_executor.protocol.worker_keys import worker_key

from tests.coordinator_rig import Rig
from tests.helpers import KEY


def _running(tmp_path: Path, *keys: str, slots: int = 1) -> Rig:
    rig = Rig(tmp_path, slots=slots)
    rig.submit(*keys)
    rig.round()  # a VM is created
    rig.ready("w-1")
    rig.round()  # ready: the jobs are assigned
    assert rig.assigned("w-1") == set(keys)
    return rig


@pytest.mark.parametrize("storage, compute", [
    (OSError(5, "Input/output error"), ConnectionError("compute unreachable")),
    (gexc.ServiceUnavailable("backendError"), gexc.TooManyRequests("rateLimitExceeded")),
], ids=["local bucket's OSError", "GCS 503 and Compute 429"])
def test_an_outage_longer_than_ten_seconds_fails_no_job(tmp_path: Path, storage: Exception,
                                                        compute: Exception) -> None:
    """Storage and compute both fail for 120 s of rounds (the old coordinator gave up after
    10 s and failed every open job): nothing is reported meanwhile, the outage is said in one
    line and one reminder a minute, and the result the worker wrote during it is taken
    afterwards."""
    rig = _running(tmp_path, "j")
    rig.bucket.down, rig.engine.down = storage, compute
    for second in range(120):
        assert rig.round(1.0), "the run was given up"
        if second == 60:
            rig.result("j", "w-1", "solved")  # the worker finished during the outage
            rig.ready("w-1")
    assert rig.reports == {}, "no job fails for the coordinator's own I/O errors"
    said = [line for line in rig.lines if "calls fail" in line or "still failing" in line]
    assert len(said) == 2, rig.lines  # once, and a reminder a minute later
    assert "still failing after 60 s" in said[1] and "Traceback" not in "".join(rig.lines)
    rig.bucket.down = rig.engine.down = None
    rig.round(1.0)
    assert rig.reports["j"].outcome is Outcome.SOLVED
    assert any("succeed again after 120 s" in line for line in rig.lines), rig.lines
    assert rig.engine.deleted == [], "the worker was not taken for lost"


def test_a_compute_outage_still_heartbeats_the_workers(tmp_path: Path) -> None:
    """While Compute Engine does not answer, the round still writes the pulse, with a tag for
    the worker: its dead man's switch must not fire because the coordinator's other API is
    down."""
    rig = _running(tmp_path, "j")
    rig.engine.down = gexc.ServiceUnavailable("backendError")
    before = rig.direct.read(PULSE_KEY).generation
    for _ in range(30):
        assert rig.round(1.0)
    after = rig.direct.read(PULSE_KEY)
    assert after.generation != before, "no heartbeat written"
    assert Pulse.decode(after.data).proves("w-1", worker_key(KEY, "w-1"))
    assert rig.reports == {}


def test_a_bug_is_given_up_on_after_its_window(tmp_path: Path) -> None:
    """A non-transient error (a refusal, a bug) fails the open jobs loudly once it has lasted
    ``give_up_after`` s, with the traceback once, not every round."""
    rig = _running(tmp_path, "j")
    rig.engine.down = gexc.Forbidden("compute.instances.list denied")
    rounds = 0
    while rig.round(1.0):
        rounds += 1
        assert rounds < 100, "never given up"
    assert 59 <= rounds <= 61
    assert rig.reports["j"].outcome is Outcome.FAILED
    assert "compute.instances.list denied" in rig.reports["j"].message
    assert sum("Traceback" in line for line in rig.lines) == 1
    assert any("giving up after 60 s" in line for line in rig.lines)


def test_a_worker_gone_during_the_outage_has_its_jobs_run_again(tmp_path: Path) -> None:
    """An outage longer than the workers' grace: the worker deleted itself meanwhile. Once the
    bucket answers, the listing shows it gone and its job is re-queued by the normal lost-worker
    path (run again on a new worker), not failed."""
    rig = _running(tmp_path, "j")
    rig.bucket.down = ConnectionError("no route to storage")
    for _ in range(200):
        assert rig.round(1.0)
    rig.engine.status["w-1"] = "TERMINATED"  # its dead man's switch fired
    rig.bucket.down = None
    rig.round(1.0)
    assert any("w-1 was lost" in line for line in rig.lines), rig.lines
    assert rig.coordinator.scheduler.state("j") == "queued" and rig.reports == {}
    rig.round(1.0)  # a new worker
    rig.ready("w-2")
    rig.round(1.0)
    assert rig.assigned("w-2") == {"j"}
    rig.result("j", "w-2", "solved")
    rig.ready("w-2")
    rig.round(1.0)
    assert rig.reports["j"].outcome is Outcome.SOLVED and rig.reports["j"].worker == "w-2"
