"""A rerun takes over the live workers of a run whose coordinator died, and their jobs.

A laptop that slept, a dropped network, a killed ``snakemake``: the workers run on, each with
its jobs, until their dead man's switch fires. When the user runs the workflow again
(``snakemake --unlock``, then the same command with ``--rerun-incomplete``) within the
workers' grace, the new coordinator adopts the old run instead of stopping it:

- with the run key the crash left on the host (run_state.py) it reads each live worker's last
  inbox: the jobs the worker holds (running, or waiting for a slot) are *in flight*, unless a
  result of theirs is in the bucket already (the harvest, harvest.py: a solved one is used, a
  timeout joins its frontier, before anything new starts). So is a held job the dead
  coordinator asked back (its inbox's ``release``): its worker may have started it before it
  read the request, and then runs it to its end. It is still asked back, under a new request
  number (a worker answers only a request new to it, and may have answered the dead
  coordinator's already, in a status the rerun does not trust), and stays in flight
  until the worker answers: its result, or a status that answers the rerun's own inbox
  (``seq_seen``) saying it gave the job back unstarted; an older status (written before the
  take-over, or replayed) proves nothing about what the worker does next;
- it keeps those workers alive: their inboxes are written again at once (same jobs, the next
  sequence number, signed with each worker's key), then the old run's pulse every heartbeat
  (numbered after the crashed coordinator's last, a tag per adopted worker made with its key),
  so no worker deletes itself;
- a job the rerun's front end submits with the stable identity of an in-flight job is not run
  again: the new scheduler holds it as running in a place of its own on that old worker
  (``Scheduler.adopt``; :meth:`Adoption.place`), and the old worker's result ends it as any
  result would (a timeout prunes, a cancel from the domino effect reaches the old worker's
  inbox, a lost worker re-queues it here). A job that ends there without a result (given
  back, not started) re-queues that job alone;
- a held job the old worker does not start because a timeout of its own dominates it is
  reported cancelled, not run: that job ends there (skipped here when the rerun's frontier
  prunes it too, else run again here); the worker goes on with its other jobs. Only a cancel
  of a job it *started* that nobody asked for means the worker is stopping;
- an in-flight job nobody claims still runs to its end: a solved one is there for a later
  submission of it (the harvest path), a timeout joins the frontier;
- each old worker is stopped as soon as it holds nothing more; whatever is left of the old
  run is stopped when the new run ends, and only then is its key deleted.

The old workers get no new work: they are the old run's VMs (its label, its prefix and key),
which the new run's engine does not list; new jobs go to the new run's own workers. When
adoption is not possible (no key, a bucket that does not answer, nothing in flight), the old
run's workers are stopped before the rerun starts anything (recover.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

from expo_executor.coordinator.channel import Channel
from expo_executor.coordinator.crashed_workers import CrashedWorkers
from expo_executor.coordinator.harvest import Harvest
from expo_executor.coordinator.places import Places
from expo_executor.runs.files import RunFiles
from expo_executor.coordinator.run_state import HeldRun
from expo_executor.coordinator.vms import Vm
from expo_executor.core.records import AttemptEnd
from expo_executor.core.scheduler import Cancel, Pool
from expo_executor.protocol import messages
from expo_executor.protocol.bucket import Bucket
from expo_executor.protocol.keys import inbox_key
from expo_executor.protocol.records import Inbox, WorkerResult, WorkerStatus

#: Seconds between looks at which old workers are still alive (a listing of the engine).
ALIVE_EVERY = 30.0


@dataclass
class AdoptedJob:
    """A job in flight on an old worker: its key and worker in the old run, its stable
    identity, and the key of the rerun's job that stands for it once one is submitted."""

    key: str
    worker: str
    submitted: dict  # its line in the old run's submitted.jsonl (harvest.submission)
    claimed_by: str | None = None

    @property
    def identity(self) -> str | None:
        return self.submitted.get("identity")


@dataclass(frozen=True)
class Ended:
    """An adopted job's end: its worker's result (with the rerun's key when claimed), or
    None when it ended there without one (its worker went away before it reported, or gave
    it back unstarted): a job of the rerun that stands for it runs again here."""

    job: AdoptedJob
    result: WorkerResult | None


class Adoption:
    """One crashed run taken over: its live workers, their jobs in flight, its bucket."""

    def __init__(self, held: HeldRun, workers: CrashedWorkers, bucket: Bucket, run_key: bytes,
                 log: Callable[[str], None]) -> None:
        self.held = held
        self.run_id = held.state.run_id
        self.workers = workers
        self.channel = Channel(bucket, run_key, log)
        self.log = log
        self.vms: dict[str, Vm] = {}
        self.jobs: dict[str, AdoptedJob] = {}  # old key -> job
        self._by_identity: dict[str, AdoptedJob] = {}
        self._claims: dict[str, AdoptedJob] = {}  # the rerun's key -> job
        self._last_alive = 0.0
        self._answers_after = 0  # set at the take-over: see _given_back

    # -- taking over ---------------------------------------------------------------------------
    def take_over(self, found: Harvest, now: float) -> int:
        """Read each live worker's last inbox: what it holds and no result ended is in flight.
        Workers holding nothing are stopped at once. Returns the jobs in flight."""
        files = RunFiles(self.held.dir)
        submitted = {r["key"]: r for r in files.submitted() if "key" in r}
        # an inbox is signed with its worker's key, which the worker holds: only the jobs the
        # coordinator recorded giving it count (as for the harvest)
        given = {(r.get("key"), r.get("worker")) for r in files.assigned()}
        inboxes = {name: self._inbox(name) for name in sorted(self.workers.alive())}
        # a job asked back from one worker and given to another: in flight on the other
        listed = {key for inbox in inboxes.values() if inbox for key in inbox.jobs}
        idle, seq = [], 0
        for name, inbox in inboxes.items():
            seq = max(seq, inbox.seq if inbox else 0)
            held = set(inbox.jobs) | {k for k in inbox.release if k not in listed} \
                if inbox else set()
            mine = {k for k in held if k not in found.ended and (k, name) in given}
            # a job with no stable identity (cwltool's) can never be claimed: killed, not
            # left to run for nobody
            nameless = {k for k in mine if not submitted.get(k, {}).get("identity")}
            if inbox is None or not mine - nameless:
                idle.append(name)
                continue
            jobs = {k: job for k, job in inbox.jobs.items() if k in mine}
            # asked back again in the rerun's own name (the next number): a worker answers
            # only a request new to it, and one it answered before the crash would never be
            # answered again (a GCE worker's status is otherwise rewritten once a day)
            release = {k: n + 1 for k, n in inbox.release.items() if k in mine - nameless}
            self.vms[name] = Vm(name, now, Pool.SPOT, ready=True, listed=True,
                                places=Places(jobs, set(inbox.cancel) | nameless, release))
            for key in sorted(mine - nameless):
                job = AdoptedJob(key, name, submitted[key])
                self.jobs[key] = job
                self._by_identity[job.identity] = job
        self.channel.continue_after(seq)
        self._answers_after = seq  # a status answers the rerun's inboxes past this
        self.channel.continue_pulse(self.vms)
        if idle:
            self.workers.stop(idle)
        self.channel.write_inboxes(self.vms.values(), now)  # at once: the grace runs
        self.channel.write_pulse(self.vms.values(), now, 0.0)
        self._last_alive = now
        return len(self.jobs)

    def _inbox(self, name: str) -> Inbox | None:
        try:
            blob = self.channel.bucket.read(inbox_key(name))  # bounded: a MessageError
            if blob is None:
                return None
            inbox = Inbox.decode(blob.data, self.channel.key(name))
        except messages.MessageError as exc:
            self.log(f"expocloud: ignoring the inbox of {name} of run {self.run_id}: {exc}")
            return None
        return inbox if inbox.to in ("", name) else None

    def place(self, job: AdoptedJob) -> str:
        """The scheduler's worker id for an adopted job: its old worker's name in the old run,
        and the job's own key, apart from every worker of the rerun and from each other. The
        rerun places nothing there, and each adopted job leaves its old worker on its own
        (ended, given back, not started), so that one can be re-queued without the others."""
        return f"{self.run_id}/{job.worker}/{job.key}"

    def claim(self, identity: str | None, key: str) -> str | None:
        """The rerun's job ``key`` stands for the in-flight job of this ``identity``, if there
        is one not claimed yet: returns the scheduler's id of the worker running it."""
        job = self._by_identity.get(identity) if identity else None
        if job is None or job.claimed_by is not None or job.key not in self.jobs:
            return None
        job.claimed_by = key
        self._claims[key] = job
        return self.place(job)

    def cancel(self, event: Cancel) -> bool:
        """A claimed job the domino effect cancels: into its old worker's inbox. False when
        ``event`` is not for an adopted job."""
        job = self._claims.get(event.key)
        if job is None or job.key not in self.jobs or job.worker not in self.vms:
            return False
        vm = self.vms[job.worker]
        vm.places.cancel(job.key)
        return True

    # -- each round ----------------------------------------------------------------------------
    def round(self, now: float) -> list[Ended]:
        """Read what the old workers reported: returns the adopted jobs that ended (a result,
        a job given back, or a worker gone). The caller acts on them, then :meth:`settle`."""
        ended: list[Ended] = []
        gone: set[str] = set()
        if now - self._last_alive >= ALIVE_EVERY:
            self._last_alive = now
            gone = set(self.vms) - self.workers.alive()
        for vm, status in self.channel.statuses(self.vms.values()):  # and the new results
            ended.extend(self._given_back(vm, status))
        wanted = {(key, vm.name) for vm in self.vms.values() for key in vm.places}
        # a worker's "preempted", "lost" or "stopping" result ends what it still holds: its
        # other results (read in key order) are taken first
        results = sorted(self.channel.results(wanted),
                         key=lambda r: r.end in (AttemptEnd.PREEMPTED, AttemptEnd.LOST,
                                                 AttemptEnd.CANCELLED))
        for result in results:
            ended.extend(self._take(result))
        for name in sorted(gone):
            ended.extend(self._gone(name, "is gone"))
        return ended

    def settle(self, now: float, heartbeat: float) -> None:
        """Write the inboxes that changed (a job done, a cancel), and the pulse when it is
        ``heartbeat`` s old; stop the old workers left with nothing."""
        self.channel.write_inboxes(self.vms.values(), now)
        self.keep_alive(now, heartbeat)
        done = [name for name, vm in self.vms.items() if not vm.places]
        if done:
            self.workers.stop(done)
            for name in done:
                self._forget(name)

    def keep_alive(self, now: float, heartbeat: float) -> None:
        """The pulse, when the last is ``heartbeat`` s old: each round (:meth:`settle`), and
        while the rerun, before it starts, waits for another crashed run's VMs to go
        (recover.py), which may take longer than these workers' grace."""
        self.channel.write_pulse(self.vms.values(), now, heartbeat)

    def _given_back(self, vm: Vm, status: WorkerStatus | None) -> list[Ended]:
        """Held jobs asked back that the worker says it gave back unstarted: they end there
        without a result. Only a status that answers an inbox of this run counts (its
        ``seq_seen`` past the take-over): one older than that (the worker's last before, or a
        replay) was written before the worker read what it is asked now."""
        if status is None or status.seq_seen <= self._answers_after:
            return []
        ended = []
        for key, _request in vm.places.given_back(status.released):
            job = self.jobs.get(key)
            if job is not None and job.worker == vm.name:
                ended.append(Ended(self.jobs.pop(key), None))
        return ended

    def _take(self, result: WorkerResult) -> list[Ended]:
        """One result of an old worker. A cancel of a job it had started (``ran``) that
        nobody asked for is the worker stopping (``Worker._kill_all``): everything it holds
        ends. A cancel of one it never started (its own timeout dominates it) ends that job
        only: the worker goes on."""
        vm = self.vms.get(result.worker)
        if vm is None:
            return []
        asked = vm.places.asked_to_cancel(result.key)
        vm.places.forget(result.key)  # the next write says it is done
        job = self.jobs.get(result.key)
        if job is None or job.worker != result.worker:  # one killed at the take-over
            return []
        if result.end in (AttemptEnd.PREEMPTED, AttemptEnd.LOST) \
                or (result.end is AttemptEnd.CANCELLED and result.ran and not asked):
            return self._gone(result.worker, f"ended ({result.end.value})", result)
        del self.jobs[result.key]
        if job.claimed_by is not None:
            result = dataclasses.replace(result, key=job.claimed_by, logs=())
        return [Ended(job, result)]

    def _gone(self, name: str, how: str, result: WorkerResult | None = None) -> list[Ended]:
        """Old worker ``name`` is gone, or going: its jobs end without a result (the claimed
        ones run again in the rerun)."""
        vm = self.vms.get(name)
        if vm is None:
            return []
        self.log(f"expocloud: adopted worker {name} of run {self.run_id} {how}; its "
                 f"{len(vm.places.jobs()) + (result is not None)} job(s) in flight run again if wanted")
        ended = [Ended(self.jobs.pop(key), None) for key in vm.places if key in self.jobs]
        if result is not None and result.key in self.jobs:
            ended.append(Ended(self.jobs.pop(result.key), None))
        self.workers.stop([name])
        self._forget(name)
        return ended

    def _forget(self, name: str) -> None:
        self.vms.pop(name, None)
        self.channel.delete_inbox(name)

    # -- the end -------------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return not self.vms

    def close(self, gone_timeout: float) -> None:
        """The rerun is ending: stop whatever of the old run is left, and forget its key."""
        try:
            self.workers.stop(gone_timeout=gone_timeout)
        finally:
            self.channel.close()
        self.held.end()
