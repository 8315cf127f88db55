"""A rerun adopts a crashed run whose worker still lives (adopt.py, recover.py): the jobs in
flight there are not run again; the rerun's jobs of the same identity are ended by the old
worker's results (a timeout prunes, also on that worker), the old worker's inbox is kept
fresh under the crashed run's key, and the worker is stopped once it holds nothing.

Both runs are the real coordinator driven round by round (tests/coordinator_rig.py); the
crashed run's worker exists as the objects the test writes in the crashed run's bucket. Only
the engine's answer to "which of its workers are alive, stop these" is scripted
(``OldWorkers``, the boundary adopt.py reaches them through: a GCE listing and delete, or
the local engine's processes).
"""

from __future__ import annotations

from pathlib import Path

from expo_executor.coordinator import adopt
from expo_executor.coordinator import recover as recovery
from expo_executor.coordinator.adopt import Adoption
from expo_executor.coordinator.harvest import harvest
from expo_executor.coordinator.loop import JobRequest
from expo_executor.coordinator.run_state import KEY as KEY_FILE
from expo_executor.coordinator.run_state import RunState, crashed_runs, record
from expo_executor.coordinator.state import FamilyRef, StateDir
from expo_executor.core.hardness import HardnessPoint
from expo_executor.core.records import JobMeta
from expo_executor.core.scheduler import Outcome, Task
from expo_executor.frontends.base import job_request
from expo_executor.protocol.keys import PULSE_KEY, inbox_key, result_key
from expo_executor.protocol.records import Inbox
from expo_executor.protocol.worker_keys import worker_key
from expo_executor.worker.agent_loop import Worker

from tests.coordinator_rig import Rig
from tests.helpers import KEY

FAMILY = FamilyRef("Snakefile", "solve", "n", 60.0)


def _request(n: int, run: str) -> JobRequest:
    """Job ``n``; from 100 on, a job with no stable identity (as cwltool's)."""
    return job_request(Task(f"{run}-j{n}", f"solve n={n}", family=FAMILY.key,
                            point=HardnessPoint(("solve",), (float(n),))),
                       ["true"], "/", {}, 60.0, family=FAMILY,
                       meta=JobMeta("solve", {"n": str(n)}),
                       identity=f"solve-{n}" if n < 100 else None)


class OldWorkers:
    """The engine's side of the crashed run's workers: alive until stopped or killed."""

    def __init__(self, *names: str) -> None:
        self.alive_now = set(names)
        self.stopped: list[str] = []

    def alive(self) -> set[str]:
        return set(self.alive_now)

    def stop(self, names=None, gone_timeout: float = 0.0) -> int:  # type: ignore[no-untyped-def]
        names = set(self.alive_now if names is None else names) & self.alive_now
        self.stopped.extend(sorted(names))
        self.alive_now -= names
        return len(names)


def _crashed(state_root: Path, jobs: tuple[int, ...]) -> Rig:
    """Run r1: ``jobs`` all running on worker w-1 (4 slots) when its coordinator dies."""
    run_dir = state_root / "runs" / "r1"
    run_dir.mkdir(parents=True)
    old = Rig(run_dir, slots=4)
    old.coordinator.submit([_request(n, "r1") for n in jobs])
    old.round()
    old.ready("w-1")
    old.round()
    assert old.assigned("w-1") == {f"r1-j{n}" for n in jobs}
    record(run_dir, RunState("r1", "local", str(old.direct.root)), KEY).release()  # killed
    return old


def _rerun(state_root: Path, old: Rig, workers: OldWorkers,
           in_flight: int = 4) -> tuple[Rig, Adoption]:
    """Run r2 adopts r1 (as recover.py does) and takes in r1's four jobs again and a new one."""
    state = StateDir(state_root)
    [held] = crashed_runs(state_root, skip=state_root / "runs" / "r2")
    adoption = Adoption(held, workers, old.direct, KEY, lambda line: None)
    found = harvest(held.dir, old.direct, KEY, state, "r2", lambda line: None)
    assert adoption.take_over(found, old.now) == in_flight
    new = Rig(state.new_run("r2"), slots=1)
    new.coordinator.state = new.coordinator.reporter.state = state
    new.coordinator.adopted = [adoption]
    new.coordinator.submit([_request(n, "r2") for n in (1, 2, 3, 5, 6)])
    new.round()
    return new, adoption


def _inbox(old: Rig) -> Inbox:
    return Inbox.decode(old.direct.read(inbox_key("w-1")).data, worker_key(KEY, "w-1"))


def test_jobs_in_flight_are_ended_by_the_old_workers_results(tmp_path: Path) -> None:
    old = _crashed(tmp_path, (1, 2, 3, 5))
    seq = _inbox(old).seq
    workers = OldWorkers("w-1")
    new, adoption = _rerun(tmp_path, old, workers)
    scheduler = new.coordinator.scheduler
    assert {k: scheduler.state(k) for k in ("r2-j1", "r2-j2", "r2-j3", "r2-j5", "r2-j6")} == \
        {"r2-j1": "running", "r2-j2": "running", "r2-j3": "running", "r2-j5": "running",
         "r2-j6": "queued"}  # not run again; only the new job waits for a worker of r2
    assert _inbox(old).seq > seq  # kept fresh, newer than anything w-1 saw
    assert set(_inbox(old).jobs) == {"r1-j1", "r1-j2", "r1-j3", "r1-j5"}

    old.result("r1-j2", "w-1", "solved")
    old.result("r1-j1", "w-1", "timeout")
    old.ready("w-1")
    new.round()
    assert new.reports["r2-j2"].outcome is Outcome.SOLVED
    assert new.reports["r2-j1"].outcome is Outcome.TIMEOUT
    assert new.reports["r2-j6"].outcome is Outcome.SKIPPED  # pruned by the adopted timeout
    assert new.coordinator.state.load_frontier(FAMILY).dominator(
        HardnessPoint(("solve",), (1.0,))) is not None
    # n=3 and n=5 are as hard or harder: cancelled where they run, on the old worker
    assert set(_inbox(old).cancel) == {"r1-j3", "r1-j5"}
    assert workers.stopped == []

    old.result("r1-j3", "w-1", "cancelled")
    old.result("r1-j5", "w-1", "cancelled")
    old.ready("w-1")
    new.round()
    assert {new.reports[k].outcome for k in ("r2-j3", "r2-j5")} == {Outcome.SKIPPED}
    assert workers.stopped == ["w-1"]  # it holds nothing more
    assert new.coordinator.adopted == [] and adoption.done
    assert not (old.coordinator.run_dir / KEY_FILE).exists()  # the crashed run is over
    records = {r["key"]: r for r in new.coordinator.files.jobs()}
    assert records["r2-j2"]["adopted_from"] == "r1" and "adopted_from" not in records["r2-j6"]


def test_a_batch_of_the_old_workers_results_ends_each_of_its_jobs_once(tmp_path: Path) -> None:
    """A worker holding prefetched jobs reports several in one object: each adopted job in it
    ends, once, and the object goes when their records are on disk."""
    old = _crashed(tmp_path, (1, 2, 3, 5))
    new, adoption = _rerun(tmp_path, old, OldWorkers("w-1"))
    old.batch("w-1", ("r1-j2", "solved"), ("r1-j1", "timeout"), ("r1-j3", "failed"))
    old.ready("w-1")
    new.round()
    # n=3 is as hard as the timeout of n=1: being cancelled, its failure is a kill
    assert {k: new.reports[k].outcome for k in ("r2-j1", "r2-j2", "r2-j3")} == \
        {"r2-j1": Outcome.TIMEOUT, "r2-j2": Outcome.SOLVED, "r2-j3": Outcome.SKIPPED}
    assert old.direct.read(result_key("r1-j2", "w-1")) is None, "deleted once recorded"
    new.round()  # (the rig fails a second report of a job)
    assert set(_inbox(old).jobs) == {"r1-j5"} and set(_inbox(old).cancel) == {"r1-j5"}


def test_jobs_of_an_old_worker_that_dies_run_again_here(tmp_path: Path, monkeypatch) -> None:
    old = _crashed(tmp_path, (1, 2, 3, 5))
    workers = OldWorkers("w-1")
    new, adoption = _rerun(tmp_path, old, workers)
    old.result("r1-j2", "w-1", "solved")  # written just before it died: it stands
    workers.alive_now.clear()  # w-1 is gone (preempted, or its VM deleted)
    monkeypatch.setattr(adopt, "ALIVE_EVERY", 0.0)
    new.round()
    assert new.reports["r2-j2"].outcome is Outcome.SOLVED
    scheduler = new.coordinator.scheduler
    assert {scheduler.state(k) for k in ("r2-j1", "r2-j3", "r2-j5")} == {"queued"}
    assert adoption.done and new.coordinator.adopted == []
    assert any("re-queued solve n=1 from lost worker r1/w-1" in line for line in new.lines)


def test_an_in_flight_job_nobody_submits_again_is_used_later(tmp_path: Path) -> None:
    """Its solution waits for a submission of it (the harvest path: the front end checks its
    outputs); its timeout joins the frontier and prunes what this run has queued."""
    old = _crashed(tmp_path, (1, 2, 3, 5))
    workers = OldWorkers("w-1")
    state = StateDir(tmp_path)
    [held] = crashed_runs(tmp_path, skip=tmp_path / "runs" / "r2")
    adoption = Adoption(held, workers, old.direct, KEY, lambda line: None)
    adoption.take_over(harvest(held.dir, old.direct, KEY, state, "r2", lambda line: None),
                       old.now)
    new = Rig(state.new_run("r2"), slots=1)
    new.coordinator.state = new.coordinator.reporter.state = state
    new.coordinator.adopted = [adoption]
    new.coordinator.submit([_request(6, "r2")])
    new.round()
    old.result("r1-j2", "w-1", "solved")
    old.result("r1-j1", "w-1", "timeout")
    old.ready("w-1")
    new.round()
    assert new.coordinator.harvested["solve-2"].key == "r1-j2"
    assert new.reports["r2-j6"].outcome is Outcome.SKIPPED
    assert state.load_frontier(FAMILY).dominator(HardnessPoint(("solve",), (1.0,))) is not None


def test_a_job_the_worker_was_never_given_is_not_adopted(tmp_path: Path) -> None:
    """A worker holds its own key, so it can sign an inbox of its own: only the jobs the dead
    coordinator recorded giving it (assigned.jsonl) are taken as in flight there."""
    old = _crashed(tmp_path, (1, 2, 3, 5))
    inbox = _inbox(old)
    forged = Inbox(inbox.seq + 1, "w-1", {**inbox.jobs, "r1-j7": inbox.jobs["r1-j1"]})
    old.direct.write(inbox_key("w-1"), forged.encode(worker_key(KEY, "w-1")))
    _new, adoption = _rerun(tmp_path, old, OldWorkers("w-1"))  # (it checks: 4 in flight)
    assert set(adoption.jobs) == {"r1-j1", "r1-j2", "r1-j3", "r1-j5"}


def test_a_job_with_no_stable_identity_is_killed_not_adopted(tmp_path: Path) -> None:
    """Nothing of the rerun can stand for it (cwltool's jobs): its worker kills it, rather
    than run it for nobody; the worker is stopped once that is done."""
    old = _crashed(tmp_path, (1, 2, 3, 100))
    workers = OldWorkers("w-1")
    new, adoption = _rerun(tmp_path, old, workers, in_flight=3)
    assert set(adoption.jobs) == {"r1-j1", "r1-j2", "r1-j3"}
    assert set(_inbox(old).cancel) == {"r1-j100"}
    for n in (1, 2, 3):
        old.result(f"r1-j{n}", "w-1", "solved")
    old.ready("w-1")
    new.round()
    assert workers.stopped == []  # its kill is not confirmed yet
    old.result("r1-j100", "w-1", "cancelled")
    old.ready("w-1")
    new.round()
    assert workers.stopped == ["w-1"] and adoption.done


def test_a_held_job_its_workers_own_timeout_dominates_ends_there_alone(tmp_path: Path) -> None:
    """The old worker does not start a held job that its own timeout dominates, and says so
    (cancelled, not run): that job ends there; the worker is not taken for stopping, and its
    other jobs in flight go on (issue 30, defect 2)."""
    old = _crashed(tmp_path, (1, 2, 3, 5))
    workers = OldWorkers("w-1")
    new, adoption = _rerun(tmp_path, old, workers)
    old.result("r1-j3", "w-1", "timeout")
    old.result("r1-j5", "w-1", "cancelled",
               reason="not started: a timeout on this worker dominates it", ran=False)
    old.ready("w-1")
    new.round()
    assert new.reports["r2-j3"].outcome is Outcome.TIMEOUT
    assert new.reports["r2-j5"].outcome is Outcome.SKIPPED
    assert workers.stopped == [] and not adoption.done
    scheduler = new.coordinator.scheduler
    assert {scheduler.state(k) for k in ("r2-j1", "r2-j2")} == {"running"}  # still there
    assert set(_inbox(old).jobs) == {"r1-j1", "r1-j2"}
    old.result("r1-j1", "w-1", "solved")
    old.result("r1-j2", "w-1", "solved")
    old.ready("w-1")
    new.round()
    assert {new.reports[k].outcome for k in ("r2-j1", "r2-j2")} == {Outcome.SOLVED}
    assert workers.stopped == ["w-1"] and adoption.done


def test_a_held_job_not_started_for_an_unconfirmed_timeout_runs_again_alone(
        tmp_path: Path) -> None:
    """The rerun confirms timeouts on a second worker: the old worker's own timeout does not
    prune here, so the held job it did not start runs again here, and only that job."""
    old = _crashed(tmp_path, (1, 2, 3, 5))
    workers = OldWorkers("w-1")
    new, adoption = _rerun(tmp_path, old, workers)
    new.coordinator.scheduler.confirm_timeouts = True
    old.result("r1-j5", "w-1", "cancelled",
               reason="not started: a timeout on this worker dominates it", ran=False)
    old.ready("w-1")
    new.round()
    scheduler = new.coordinator.scheduler
    assert scheduler.state("r2-j5") == "queued"
    assert {scheduler.state(k) for k in ("r2-j1", "r2-j2", "r2-j3")} == {"running"}
    assert workers.stopped == [] and set(adoption.jobs) == {"r1-j1", "r1-j2", "r1-j3"}


ASKED = 7  # the number of the dead coordinator's release request


def _asked_back(old: Rig, key: str) -> int:
    """The dead coordinator's last inbox for w-1 asks held job ``key`` back (another worker's
    free slot was to run it), as its release protocol writes it; returns its sequence number."""
    inbox = _inbox(old)
    last = Inbox(inbox.seq + 1, "w-1", {k: j for k, j in inbox.jobs.items() if k != key},
                 list(inbox.cancel), {key: ASKED})
    old.direct.write(inbox_key("w-1"), last.encode(worker_key(KEY, "w-1")))
    return last.seq


def test_a_job_asked_back_that_its_worker_started_is_adopted(tmp_path: Path) -> None:
    """The dead coordinator asked r1-j5 back, and its worker had started it already (it then
    runs to its end there): it is in flight, not run a second time by the rerun."""
    old = _crashed(tmp_path, (1, 2, 3, 5))
    _asked_back(old, "r1-j5")
    workers = OldWorkers("w-1")
    new, adoption = _rerun(tmp_path, old, workers)  # (it checks: 4 in flight)
    assert new.coordinator.scheduler.state("r2-j5") == "running"
    assert _inbox(old).release == {"r1-j5": ASKED + 1} and "r1-j5" not in _inbox(old).jobs
    old.result("r1-j5", "w-1", "solved")
    old.ready("w-1", running=("r1-j1", "r1-j2", "r1-j3"), seq_seen=_inbox(old).seq)
    new.round()
    assert new.reports["r2-j5"].outcome is Outcome.SOLVED
    assert _inbox(old).release == {} and workers.stopped == []


def test_a_job_asked_back_that_its_worker_gave_back_runs_here(tmp_path: Path) -> None:
    """Its worker says it gave r1-j5 back unstarted, in a status that answers the rerun's
    inbox: the rerun runs it, and only it; its other jobs stay in flight there."""
    old = _crashed(tmp_path, (1, 2, 3, 5))
    _asked_back(old, "r1-j5")
    workers = OldWorkers("w-1")
    new, adoption = _rerun(tmp_path, old, workers)
    old.ready("w-1", running=("r1-j1", "r1-j2", "r1-j3"), released={"r1-j5": ASKED + 1},
              seq_seen=_inbox(old).seq)
    new.round()
    scheduler = new.coordinator.scheduler
    assert scheduler.state("r2-j5") == "queued"
    assert {scheduler.state(k) for k in ("r2-j1", "r2-j2", "r2-j3")} == {"running"}
    assert _inbox(old).release == {} and set(adoption.jobs) == {"r1-j1", "r1-j2", "r1-j3"}
    assert workers.stopped == []


def test_a_job_its_worker_gave_back_before_the_crash_is_answered_again_at_once(
        tmp_path: Path) -> None:
    """The worker (the real one) gave r1-j5 back to the dead coordinator, in a status the
    rerun does not trust (written before the take-over). The rerun asks it back under a new
    number, so the worker, which answers only a request new to it, answers at once and the
    rerun runs it. Asked under the old number, the worker said nothing more, and on GCE (its
    status rewritten once a day) the rerun waited for r1-j5 to the end of its time (a hang
    CI saw once, issue 30)."""
    old = _crashed(tmp_path, (1, 2, 3, 5))
    _asked_back(old, "r1-j5")
    worker = Worker(old.direct, "w-1", 1, worker_key(KEY, "w-1"), tmp_path / "vm",
                    zygote=False, heartbeat=86400.0)
    worker._read_inbox()  # it answers the dead coordinator's request
    assert worker.released == {"r1-j5": ASKED}
    new, adoption = _rerun(tmp_path, old, OldWorkers("w-1"))
    assert new.coordinator.scheduler.state("r2-j5") == "running"  # in flight: no answer yet
    worker._read_inbox()  # the rerun's inbox: a request new to it
    new.round()
    assert new.coordinator.scheduler.state("r2-j5") == "queued"
    assert "r1-j5" not in adoption.jobs and _inbox(old).release == {}


def test_a_status_older_than_the_rerun_does_not_give_a_job_back(tmp_path: Path) -> None:
    """A status that says r1-j5 was given back but answers an inbox of the dead coordinator
    (its ``seq_seen``; a late write, or a replay) does not prove that the worker will never
    start it: r1-j5 stays in flight there until an answer to the rerun's own inbox (issue 30:
    a replayed ``released`` is not trusted)."""
    old = _crashed(tmp_path, (1, 2, 3, 5))
    seq = _asked_back(old, "r1-j5")
    new, adoption = _rerun(tmp_path, old, OldWorkers("w-1"))
    old.ready("w-1", released={"r1-j5": ASKED}, seq_seen=seq)
    new.round()
    assert new.coordinator.scheduler.state("r2-j5") == "running"
    assert "r1-j5" in adoption.jobs and _inbox(old).release == {"r1-j5": ASKED + 1}


def test_the_adopted_workers_hear_the_pulse_while_another_crashed_run_is_stopped(
        tmp_path: Path, monkeypatch) -> None:
    """Two crashed runs: r1's worker has jobs in flight (adopted), r2's workers have none
    (stopped, and the rerun waits until they are gone: on GCE, up to minutes). While it
    waits, r1's worker keeps hearing the pulse: a wait for one run's VMs to go never
    outlasts the grace of another run's adopted workers (issue 30)."""
    old = _crashed(tmp_path, (1, 2))
    (tmp_path / "runs" / "r2").mkdir()
    record(tmp_path / "runs" / "r2", RunState("r2", "local", str(tmp_path / "r2-bucket")),
           KEY).release()  # killed too
    pulse_during_the_wait: list[bool] = []

    class Engine(OldWorkers):
        """Each crashed run's workers: r1's w-1 lives; r2's VMs take a while to go."""

        def __init__(self, state: RunState, run_dir: Path) -> None:
            super().__init__(*(("w-1",) if state.run_id == "r1" else ()))
            self.run = state.run_id

        def stop(self, names=None, gone_timeout: float = 0.0,  # type: ignore[no-untyped-def]
                 waiting=None) -> int:
            if self.run == "r2":
                before = old.direct.read(PULSE_KEY).generation
                if waiting is not None:
                    waiting()  # one look at r2's VMs: still listed
                pulse_during_the_wait.append(old.direct.read(PULSE_KEY).generation != before)
            return super().stop(names)

    monkeypatch.setattr(recovery, "CrashedWorkers", Engine)
    found = recovery.recover(tmp_path, tmp_path / "runs" / "r3", lambda line: None,
                             heartbeat=0.0)  # (a pulse is due at every look)
    [adoption] = found.adopted
    adoption.channel.close()
    assert adoption.run_id == "r1" and set(adoption.jobs) == {"r1-j1", "r1-j2"}
    assert pulse_during_the_wait == [True]
