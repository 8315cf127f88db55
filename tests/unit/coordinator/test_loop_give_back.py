"""Prefetch holds a job on a busy worker before anyone knows which slot frees first. When a
worker comes up (or idles) while easier jobs wait there, the coordinator asks a held job back
(the inbox's ``release``) and keeps the free slot for it; the worker's status says it gave it
back, and only then does it run elsewhere: it never runs twice. The real coordinator, round by
round (tests/coordinator_rig.py)."""

from __future__ import annotations

from pathlib import Path

from expo_executor.core.scheduler import Outcome
from expo_executor.protocol.keys import inbox_key, status_key
from expo_executor.protocol.records import Inbox
from expo_executor.protocol.worker_keys import worker_key
from expo_executor.worker.agent import Worker

from tests.coordinator_rig import KEY, Rig, work_request


def _asked_back(tmp_path: Path) -> Rig:
    """w-1 runs j0 and holds j1 while w-2 boots; w-2 comes up, and j2 (which j1's timeout
    would prune) does not start there: j1 is asked back from w-1 for it."""
    rig = Rig(tmp_path, slots=1, workers=2)
    rig.coordinator.scheduler.set_prefetch(1)
    rig.coordinator.submit([work_request(n) for n in range(3)])
    rig.round()
    rig.ready("w-1")
    rig.round()
    assert rig.assigned("w-1") == {"j0", "j1"}, rig.lines
    rig.ready("w-2")
    rig.round()
    assert rig.assigned("w-2") == set(), "j2 would start before j1"
    assert rig.assigned("w-1") == {"j0"}
    inbox = Inbox.decode(rig.direct.read(inbox_key("w-1")).data, worker_key(KEY, "w-1"))
    assert inbox.release == {"j1": 1} and set(inbox.jobs) == {"j0"}
    return rig


def test_a_held_job_given_back_runs_on_the_worker_that_asked_for_it(tmp_path: Path) -> None:
    rig = _asked_back(tmp_path)
    rig.round()
    assert rig.assigned("w-2") == set(), "no answer yet: still waiting for j1"
    rig.ready("w-1", running=("j0",), released={"j1": 2})
    rig.round()
    assert rig.assigned("w-2") == set(), "an answer to another request is none to this one"
    rig.ready("w-1", running=("j0",), released={"j1": 1})
    rig.round()
    assert "j1" in rig.assigned("w-2"), rig.lines
    assert rig.coordinator.vms.get("w-1").places.releases() == {}
    inbox = Inbox.decode(rig.direct.read(inbox_key("w-1")).data, worker_key(KEY, "w-1"))
    assert inbox.release == {} and "j1" not in inbox.jobs
    rig.result("j1", "w-2", "solved")
    rig.round()
    assert rig.reports["j1"].outcome is Outcome.SOLVED and rig.reports["j1"].worker == "w-2"


def test_a_held_job_its_worker_started_before_it_read_the_request_ends_there(
        tmp_path: Path) -> None:
    rig = _asked_back(tmp_path)
    rig.result("j0", "w-1", "solved")
    rig.result("j1", "w-1", "solved")
    rig.round()
    assert rig.reports["j1"].worker == "w-1"
    assert rig.coordinator.vms.get("w-1").places.releases() == {}
    assert "j2" in rig.assigned("w-1") | rig.assigned("w-2"), "nothing to wait for now"


def test_a_job_asked_back_twice_before_its_worker_read_between_is_answered_twice(
        tmp_path: Path) -> None:
    """Issue 30 item 1: w-1 gives j1 back; the slot that asked for it is lost, so j1 is held on
    w-1 again, and asked back again for w-3, before w-1 read an inbox in between. Its worker
    (the real agent's inbox reader) must answer the new request, not take it for the one it
    answered: else w-3 waits for j1 for good. Requests and answers carry identities."""
    rig = _asked_back(tmp_path)
    worker = Worker(rig.direct, "w-1", 1, worker_key(KEY, "w-1"), tmp_path / "vm",
                    poll=0.1, slow_poll=5.0, zygote=False)
    worker.seen.add("j0")  # it runs j0
    worker._read_inbox()  # it gives j1 back, and its status says so
    rig.engine.status["w-2"] = "TERMINATED"  # the slot j1 was asked back for is lost
    rig.round()
    assert rig.assigned("w-1") == {"j0", "j1"}, "j1 is held on w-1 again"
    rig.round()
    new = next(name for name in rig.engine.status if name not in ("w-1", "w-2"))
    rig.ready(new)
    rig.round()
    assert rig.assigned("w-1") == {"j0"} and rig.assigned(new) == set(), "asked back again"
    worker._read_inbox()  # w-1 reads the second request
    rig.round()
    assert "j1" in rig.assigned(new), rig.lines


def test_a_replayed_answer_does_not_give_back_a_job_its_worker_holds_again(
        tmp_path: Path) -> None:
    """Issue 30, a suspicion confirmed and fixed by the request numbers: w-1's status that
    gave j1 back, replayed (a bucket writer can copy a signed object, not forge one) once j1
    is held on w-1 again, read and asked back again, must not requeue j1, which w-1 holds
    and may start: only an answer to the new request does."""
    rig = _asked_back(tmp_path)
    worker = Worker(rig.direct, "w-1", 1, worker_key(KEY, "w-1"), tmp_path / "vm",
                    poll=0.1, slow_poll=5.0, zygote=False)
    worker.seen.add("j0")
    worker._read_inbox()  # it gives j1 back
    answer = rig.direct.read(status_key("w-1")).data
    rig.engine.status["w-2"] = "TERMINATED"
    rig.round()
    assert rig.assigned("w-1") == {"j0", "j1"}
    worker._read_inbox()  # w-1 holds j1 again
    assert "j1" in worker.pending
    rig.round()
    new = next(name for name in rig.engine.status if name not in ("w-1", "w-2"))
    rig.ready(new)
    rig.round()  # j1 asked back again
    rig.direct.write(status_key("w-1"), answer)  # the old answer, replayed
    rig.round()
    assert rig.assigned(new) == set() and rig.coordinator.scheduler.state("j1") == "running", \
        "taken for the new request's answer, j1 would run on two workers"
    worker._read_inbox()
    rig.round()
    assert "j1" in rig.assigned(new) and "j1" not in worker.pending
