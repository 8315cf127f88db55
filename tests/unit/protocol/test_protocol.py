"""The model-based test of the bucket protocol (issue 30): the machines of tests/protocol_model.py
(a run: its coordinator, workers and bucket, and what befalls them) and tests/crash_model.py
(that run, whose coordinator may crash, and the rerun that adopts its workers), over the real
parts, with their invariants; and the shortest known forms of what they found, as tests.

Run count: ``EXPOCLOUD_MODEL_EXAMPLES`` examples (default 100) of up to
``EXPOCLOUD_MODEL_STEPS`` steps (default 40) for each machine (together ~15 s); for a deep
search, e.g. ``EXPOCLOUD_MODEL_EXAMPLES=5000 EXPOCLOUD_MODEL_STEPS=80``.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from expo_executor.coordinator import adopt
from expo_executor.core.scheduler import Outcome
from expo_executor.worker import running_jobs

from tests.crash_model import CrashModel
from tests.protocol_model import ProtocolModel

EXAMPLES = int(os.environ.get("EXPOCLOUD_MODEL_EXAMPLES", "100"))
STEPS = int(os.environ.get("EXPOCLOUD_MODEL_STEPS", "40"))
MACHINE = settings(max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


@pytest.fixture
def paper_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    """A paper job's "session" is killed by ending it (tests/model_worker.PaperJob.wait)."""
    monkeypatch.setattr(running_jobs, "kill_session", lambda pid, grace=2.0: None)


def test_protocol_model(paper_jobs: None) -> None:
    """The machine, ``EXAMPLES`` x up to ``STEPS`` steps (the module says how to run more)."""
    run_state_machine_as_test(ProtocolModel, settings=MACHINE)


def test_a_stale_answer_to_a_release_is_not_the_answer_to_a_newer_one(paper_jobs: None) -> None:
    """Issue 30's defect (1), as the machine's steps (4 jobs, 1 slot, 2 workers, prefetch
    1): a job asked back twice from one worker, and the worker's heartbeat that answered the
    first request read by the coordinator after the second. Taken as the second answer, the
    job runs on another worker while the first, which never read the second request, starts
    it too. Random search finds this only in deep runs; this is its shortest known form."""
    state = ProtocolModel()
    state.start(jobs=4, slots=1, workers=2, prefetch=1)
    state.boot(index=0)  # w-1 up: runs j0, holds j1
    state.tick()
    state.act(index=0, read=True)
    state.boot(index=0)  # w-2 up: j1 is asked back from w-1 for it
    state.tick()
    state.act(index=0, read=True)  # w-1 gives j1 back (its status says so)
    state.preempt(index=1, last_breath=False)  # w-2 goes (it held nothing)
    state.tick()  # j1 queued again, and held on w-1 again while w-3 comes
    state.slow_read(index=0, which=0)  # the coordinator's reads of w-1's status lag
    state.heartbeat(index=0)  # w-1 has read no inbox since: j1 is still "released"
    state.act(index=0, read=True)  # w-1 holds j1 again
    state.boot(index=0)  # w-3 up: j1 is asked back from w-1 again
    state.tick()
    state.catch_up(index=0)  # the coordinator reads w-1's heartbeat: "released j1"
    state.tick()
    state.act(index=1, read=True)  # w-3 starts j1
    state.job_ends(index=0, end="solved")  # j0
    state.act(index=0, read=False)  # w-1 has not read the second request: it starts j1
    state.teardown()


@pytest.fixture
def listing_each_round(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rerun looks at which old workers live every round, not every 30 s of its clock
    (which the machine moves 0.1 s a round): a worker gone silently is seen at once."""
    monkeypatch.setattr(adopt, "ALIVE_EVERY", 0.0)


def test_protocol_model_with_a_crash(paper_jobs: None, listing_each_round: None) -> None:
    """The machine with the crash and the rerun, ``EXAMPLES`` x up to ``STEPS`` steps."""
    run_state_machine_as_test(CrashModel, settings=MACHINE)


def test_jobs_adopted_in_flight_are_not_run_again_and_a_lost_ones_are(
        paper_jobs: None, listing_each_round: None) -> None:
    """The machine's steps through adoption (3 jobs, 1 slot, 1 worker, prefetch 1): the
    coordinator dies with j0 running and j1 held on w-1; the rerun claims both (not run
    again) and gives its own worker j2 only; j0 solved there ends r2-j0; w-1 starts j1, and is
    lost silently: j1 goes to the rerun's own worker, and runs there (once at a time)."""
    state = CrashModel()
    state.start(jobs=3, slots=1, workers=1, prefetch=1)
    state.boot(index=0)
    state.tick()
    state.act(index=0, read=True)  # w-1 runs j0, holds j1
    state.crash()
    state.rerun()
    assert state.coordinator is not None
    scheduler = state.coordinator.scheduler
    assert [scheduler.state(k) for k in ("r2-j0", "r2-j1")] == ["running", "running"]
    state.boot(index=0)  # the rerun's w-1 up
    state.everyone_acts()
    state.everyone_acts()
    assert state.running_on == {"j0": "r1/w-1", "j2": "r2/w-1"}
    state.job_ends(index=0, end="solved")  # j0, on the old worker
    state.act(index=0, read=False)  # w-1 reports j0 (in its next batch), starts j1
    state.report_delay_passes(index=0)
    state.tick()
    assert state.reports["r2-j0"].outcome is Outcome.SOLVED
    assert state.running_on["j1"] == "r1/w-1"
    state.lose(index=0, last_word=False)  # r1/w-1 goes with j1
    state.tick()
    assert scheduler.place("r2-j1").worker_id == "w-1"  # the rerun's own w-1
    state.teardown()
    assert set(state.reports) == {"r2-j0", "r2-j1", "r2-j2"}
