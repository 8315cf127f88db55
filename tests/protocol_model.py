"""The protocol's model (issue 30), for its model-based test (tests/unit/protocol/
test_protocol.py): a Hypothesis state machine over the real parts, interleaving what a run's
parties do and what befalls them.

The real parts: the coordinator (``coordinator.loop.Coordinator``, one ``tick`` a step, on a
``tests.helpers.ScriptedEngine``), with its scheduler (``core.scheduler``), channel and the
jobs' places; and each worker, the real agent class with its job processes on paper
(``tests/model_worker.PaperWorker``: its inbox reading, releases, starts, domino skips
through ``core.held_jobs`` and ``core.hardness``, kills, reports and last words are the real
code; only processes, log files and its loop's timing are the test's). The bucket between them
is ``tests/memory_bucket``: each party reads through a view of its own that the machine can
make lag (a reader sees older generations, or no object yet, for a while: slow and reordered
reads). Simulated: the jobs (one runs until the machine ends it: solved, failed, or past its
deadline) and the cloud (a preemption: the VM and its worker vanish, with or without its last
breath; a lost worker: it stops, crashed with its last word or silently with its VM down).

The jobs: ``j0 .. j{n-1}``, one hardness family, job ``jk`` at point ``k`` (a timeout of ``jk``
dominates every ``jm`` with ``m >= k``), on Spot VMs with prefetch 0 to 2.

Invariants, checked as the run goes:

- no job runs twice at once, and none starts again after one of its attempts ended with a
  result the coordinator can hear of (one its worker wrote before it vanished, and not where
  the coordinator's reads lag): a released job runs at most once;
- every kill and skip is justified: a job is cancelled (killed, or not started) by a worker,
  or reported skipped, only once a job at least as easy has really timed out;
- a job is charged a Spot preemption only if it was running on a VM that was preempted, or
  given a free slot there that its worker had not read yet (the coordinator cannot tell the
  two apart: both were to run there); a held job, never started, is never charged;

and, when the machine stops (teardown: every view catches up, the workers that are left run
their jobs to their end, the coordinator ticks), the run ends: every job is reported, none is
lost.

A coordinator crash and the rerun's adoption of its workers: tests/crash_model.py, this
machine with two more rules (workers are known as ``<run>/<vm>``, the truth is kept by job,
``j{n}``, across both runs).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

from expo_executor.coordinator.loop import Coordinator, CoordinatorConfig, JobRequest
from expo_executor.coordinator.run_state import RunState, record
from expo_executor.coordinator.state import FamilyRef, StateDir
from expo_executor.core.records import AttemptEnd, WorkerState
from expo_executor.core.scheduler import Outcome, Pool, Task
from expo_executor.core.tasks import Stage
from expo_executor.frontends.base import job_request
from expo_executor.protocol.keys import inbox_key, status_key, WORKERS_PREFIX

from tests.coordinator_rig import work_request
from tests.helpers import KEY, ScriptedEngine
from tests.memory_bucket import BucketView, MemoryBucket
from tests.model_worker import PaperWorker

DRAIN_ROUNDS = 300  # coordinator rounds the run has to end in, once nothing goes wrong
FINAL = (AttemptEnd.SOLVED, AttemptEnd.FAILED, AttemptEnd.TIMEOUT)
pick = st.integers(0, 7)  # an index into whatever is there (taken modulo its size)
FAMILY = FamilyRef("Snakefile", "work", "n", 30.0)  # one frontier, kept in the state dir


def model_request(n: int, run: str) -> JobRequest:
    """Job ``n`` of run ``run`` (its key ``j{n}`` in the first run, ``r2-j{n}`` in a rerun),
    with the stable identity and frontier a rerun finds it by (as a Snakemake job's)."""
    base = work_request(n)
    task = Task(base.task.key if run == "r1" else f"{run}-j{n}", base.task.label,
                family=FAMILY.key, point=base.task.point)
    return job_request(task, ["true"], "/", {}, 30.0, meta=base.meta, family=FAMILY,
                       identity=f"work-{n}")


def job(key: str) -> str:
    """The job a key of either run stands for (``j{n}``): the truth is kept by job."""
    return key.rsplit("-", 1)[-1]


class CloudEngine(ScriptedEngine):
    """The scripted engine, and the preemptions it has seen (said once, as GCE's operations
    say them)."""

    def __init__(self) -> None:
        super().__init__()
        self.notices: set[str] = set()

    def preempted(self) -> set[str]:
        notices, self.notices = self.notices, set()
        return notices


class ProtocolModel(RuleBasedStateMachine):
    """One run: its coordinator, its workers as the engine brings them up, the bucket."""

    @initialize(jobs=st.integers(2, 6), slots=st.integers(1, 2), workers=st.integers(1, 3),
                prefetch=st.integers(0, 2))
    def start(self, jobs: int, slots: int, workers: int, prefetch: int) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="protocol-model-"))
        self.state = StateDir(self.dir)  # the host's state: frontiers, runs/<run>/
        self.store = MemoryBucket()
        self.view = self.store.view()
        self.engine = CloudEngine()
        self.config = CoordinatorConfig("model", slots, workers, poll=0.05, heartbeat=10.0,
                                        status_interval=3600, pool=Pool.SPOT,
                                        straggler_rule=False)
        self.run, self.prefetch, self.lines = "r1", prefetch, []
        run_dir = self.state.new_run(self.run)
        self.held = record(run_dir, RunState(self.run, "local", self.store.url), KEY)
        self.coordinator: Coordinator | None = Coordinator(
            self.config, self.engine, self.view, KEY, run_dir, self.state, self.lines.append)
        self.coordinator.scheduler.set_prefetch(prefetch)
        self.slots = slots
        self.keys = [f"j{n}" for n in range(jobs)]
        self.coordinator.submit([model_request(n, self.run) for n in range(jobs)])
        self.now = 10_000.0
        self.workers: dict[str, PaperWorker] = {}  # "<run>/<vm>" -> the VM's worker
        self.booted: set[str] = set()
        self.gone: set[str] = set()
        self.running_on: dict[str, str] = {}  # the truth: job -> the worker running it
        self.ended: dict[str, tuple[str, AttemptEnd]] = {}  # job -> where and how it ended
        self.timeouts: set[int] = set()  # points of the jobs that really timed out
        self.preempted_running: Counter[str] = Counter()  # job -> times its VM was preempted
        self.reports: dict = {}
        self.unscheduled: set[str] = set()  # jobs submitted solved (a rerun's harvested ones)
        self.tick()

    # -- the truth, as the parties act --------------------------------------------------------
    def started(self, key: str, worker: str) -> None:
        key = job(key)
        assert key not in self.running_on, \
            f"{key} starts on {worker} while it runs on {self.running_on.get(key)}"
        assert key not in self.ended, f"{key} starts on {worker} after an attempt of it ended"
        self.running_on[key] = worker

    def result(self, key: str, worker: str, end: AttemptEnd, reason: str | None,
               ran: bool) -> None:
        key = job(key)
        if self.running_on.get(key) == worker:
            del self.running_on[key]
        if end in FINAL:
            self.ended[key] = (worker, end)
        if end is AttemptEnd.TIMEOUT:
            self.timeouts.add(int(key[1:]))
        if end is AttemptEnd.CANCELLED and not (reason or "").startswith("worker stopping"):
            self.justified(key, f"{worker} cancelled it ({reason}; ran: {ran})")

    def justified(self, key: str, what: str) -> None:
        point = int(job(key)[1:])
        assert any(t <= point for t in self.timeouts), \
            f"{key}: {what}, and no job as easy has timed out (timeouts: {sorted(self.timeouts)})"

    # -- the coordinator ----------------------------------------------------------------------
    @rule()
    def tick(self) -> None:
        """One coordinator round (raised, not ridden out: the bucket here never fails); none
        while no coordinator lives."""
        self.now += 0.1
        if self.coordinator is None:
            return
        self.coordinator.tick(self.now)
        for key in self.keys:
            report = self.coordinator.take_report(key)
            if report is None:
                continue
            assert key not in self.reports, f"{key} reported twice"
            self.reports[key] = report
            if report.outcome is Outcome.SKIPPED:
                self.justified(key, f"reported skipped ({report.message})")
        for key in set(self.keys) - self.unscheduled:
            charged = self.coordinator.scheduler.preemptions(key)
            assert charged <= self.preempted_running[job(key)], \
                f"{key} charged {charged} preemption(s), preempted while running " \
                f"{self.preempted_running[job(key)]} time(s)"
        self.follow_engine()

    def follow_engine(self) -> None:
        """VMs the coordinator created get a worker; the ones it deleted take theirs away."""
        run = self.run
        for name in sorted(f"{run}/{vm}" for vm in self.engine.status):
            if name not in self.workers and name not in self.gone:
                self.workers[name] = PaperWorker(
                    self.store.view(), name.split("/")[1], self.slots, KEY,
                    lambda key, vm: self.started(key, f"{run}/{vm}"),
                    lambda key, vm, *end: self.result(key, f"{run}/{vm}", *end))
        for name in sorted(n for n in self.workers if n.startswith(f"{run}/")
                           and n.split("/")[1] not in self.engine.status):
            self.vanish(name)

    def given_a_slot(self, name: str) -> set[str]:
        """The jobs the scheduler gave a free slot of VM ``name`` (RUNNING there), started or
        not: its worker starts them at its next read of its inbox, so the coordinator cannot
        tell one not read yet from one started, and both were to run there. A held job
        (prefetch) is not among them: it waits for a slot."""
        if self.coordinator is None:
            return set()
        scheduler = self.coordinator.scheduler
        return {job(key) for key in set(self.keys) - self.unscheduled
                if key not in scheduler.outcomes
                and scheduler.place(key).worker_id == name
                and scheduler.place(key).stage is Stage.RUNNING}

    def vanish(self, name: str, preempted: bool = False) -> None:
        """The VM ``name`` ("<run>/<vm>") is gone, and its jobs' processes with it."""
        worker = self.workers.pop(name)
        self.gone.add(name)
        self.booted.discard(name)
        for key in list(worker.running):
            if self.running_on.get(job(key)) == name:
                del self.running_on[job(key)]
        if preempted:
            slot = self.given_a_slot(worker.worker_id) if name.startswith(self.run) else set()
            for key in {job(k) for k in worker.running} | slot:
                self.preempted_running[key] += 1
        # An end it never wrote (a solved result waiting for company), or wrote where the
        # coordinator's reads lag (it reads a lost VM's results once, when it loses it), may
        # go unheard: that job may run again (never twice at once).
        lagging = name.startswith(self.run) and \
            self.view.lags_on(f"{WORKERS_PREFIX}{worker.worker_id}/results/")
        unsent = {job(k) for k in worker.unsent}
        for key in [k for k, (where, _) in self.ended.items() if where == name]:
            if key in unsent or lagging:
                del self.ended[key]

    # -- the workers --------------------------------------------------------------------------
    def worker(self, index: int, booted: bool = True) -> PaperWorker | None:
        names = sorted(n for n in self.workers if (n in self.booted) == booted)
        return self.workers[names[index % len(names)]] if names else None

    def name_of(self, worker: PaperWorker) -> str:
        return next(n for n, w in self.workers.items() if w is worker)

    @rule(index=pick)
    def boot(self, index: int) -> None:
        """A VM's worker comes up: its first status says ready."""
        worker = self.worker(index, booted=False)
        if worker is not None:
            worker._write_status(WorkerState.READY)
            self.booted.add(self.name_of(worker))

    @rule(index=pick, read=st.booleans())
    def act(self, index: int, read: bool) -> None:
        """A worker's loop goes round once, reading its inbox first or not."""
        worker = self.worker(index)
        if worker is not None:
            if read:
                worker._read_inbox_now()
            worker.tick()

    @rule()
    def everyone_acts(self) -> None:
        """Every worker up reads its inbox and goes round once, then the coordinator: a round
        of a run where nothing races (the other rules take it apart)."""
        for name in sorted(self.booted):
            worker = self.workers[name]
            worker._read_inbox_now()
            worker.tick()
        self.tick()

    @rule(index=pick)
    def heartbeat(self, index: int) -> None:
        worker = self.worker(index)
        if worker is not None:
            worker._write_status(WorkerState.READY)

    @rule(index=pick)
    def report_delay_passes(self, index: int) -> None:
        worker = self.worker(index)
        if worker is not None:
            worker._send_results()

    @rule(index=pick, end=st.sampled_from(["solved", "failed", "timeout"]))
    def job_ends(self, index: int, end: str) -> None:
        """A running job ends; its worker notices at its next pass."""
        running = sorted(self.running_on)
        if not running:
            return
        worker = self.workers[self.running_on[running[index % len(running)]]]
        key = next(k for k in worker.running if job(k) == running[index % len(running)])
        if end == "timeout":
            worker.time_out(key)
        else:
            worker.running[key].proc.end(0 if end == "solved" else 1)  # type: ignore[union-attr]

    # -- the cloud ----------------------------------------------------------------------------
    @rule(index=pick, last_breath=st.booleans())
    def preempt(self, index: int, last_breath: bool) -> None:
        worker = self.worker(index) or self.worker(index, booted=False)
        if worker is None:
            return
        name = self.name_of(worker)
        if last_breath and name in self.booted:
            worker.stop_preempted()
        if name.startswith(self.run):  # (a dead coordinator's engine hears nothing)
            self.engine.notices.add(worker.worker_id)
            self.engine.status[worker.worker_id] = "TERMINATED"
        self.vanish(name, preempted=True)

    @rule(index=pick, last_word=st.booleans())
    def lose(self, index: int, last_word: bool) -> None:
        """A worker stops, crashed (its last word: its jobs reported lost) or silently, and its
        VM powers off (the startup script's end; a local worker's process exits)."""
        worker = self.worker(index)
        if worker is None:
            return
        if last_word:
            worker.crashed(RuntimeError("the model's crash"))
        name = self.name_of(worker)
        if name.startswith(self.run):
            self.engine.status[worker.worker_id] = "TERMINATED"  # its VM powers off
        self.vanish(name)

    # -- the bucket's readers -----------------------------------------------------------------
    def reader(self, index: int) -> tuple[BucketView, list[str]]:
        """A party's view and the prefixes it may lag on."""
        names = sorted(self.workers)
        if index % (len(names) + 1) == 0 or not names:
            vms = [self.workers[n].worker_id for n in names if n.startswith(self.run)]
            prefixes = [status_key(n) for n in vms] + \
                [f"{WORKERS_PREFIX}{n}/results/" for n in vms]
            return self.view, prefixes
        worker = self.workers[names[index % (len(names) + 1) - 1]]
        return worker.bucket, [inbox_key(worker.worker_id)]  # type: ignore[return-value]

    @rule(index=pick, which=pick)
    def slow_read(self, index: int, which: int) -> None:
        """A reader goes on seeing part of the bucket as it is now."""
        view, prefixes = self.reader(index)
        if prefixes:
            view.hold(prefixes[which % len(prefixes)])

    @rule(index=pick)
    def catch_up(self, index: int) -> None:
        self.reader(index)[0].catch_up()

    # -- the end ------------------------------------------------------------------------------
    def teardown(self) -> None:
        try:
            if sys.exc_info()[0] is None and hasattr(self, "coordinator"):
                self.run_to_end()
        finally:
            if hasattr(self, "coordinator"):
                self.close()

    def close(self) -> None:
        if self.coordinator is not None:
            self.coordinator.channel.close()
        self.held.release()
        shutil.rmtree(self.dir, ignore_errors=True)

    def run_to_end(self) -> None:
        """Nothing goes wrong any more: every reader catches up, every worker comes up, acts
        and solves what it runs, the coordinator ticks; the run must end with every job
        reported."""
        for _ in range(DRAIN_ROUNDS):
            if len(self.reports) == len(self.keys):
                break
            self.view.catch_up()
            for name in sorted(self.workers):
                worker = self.workers[name]
                worker.bucket.catch_up()  # type: ignore[attr-defined]
                if name not in self.booted:
                    worker._write_status(WorkerState.READY)
                    self.booted.add(name)
                worker._read_inbox_now()
                worker.tick()
                worker._write_status(WorkerState.READY)  # its heartbeat
                for job in worker.running.values():
                    job.proc.end(0)  # type: ignore[union-attr]
                worker.tick()
                worker._send_results()
            self.tick()
        missing = sorted(set(self.keys) - set(self.reports))
        assert not missing, f"the run does not end: {missing} never reported " \
            f"({ {k: self.coordinator.scheduler.state(k) for k in missing} })"
