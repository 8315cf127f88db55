"""Prefetch's held jobs on the simulated workers (``SimConfig.prefetch``): what a worker does
with the jobs it holds beyond its free slots, as ``worker/agent.py`` does it.

A held job starts when a slot of its worker frees, in the order it was held: the scheduler
mirrors that (``Scheduler._promote``), and the simulated worker starts what the scheduler
promoted at the time the slot freed (the last job end seen on the VM). A held job the domino
effect cancels, or that the coordinator asks back (``core.scheduler.Release``), is never
started there: the worker answers ``dispatch_s`` later (when it reads its inbox), seen at the
round after. Not modelled: a worker's own pruning of the held jobs its own timeouts dominate
(``JobSpec.prune``; the coordinator's cancel does it a round later).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from expo_executor.core.scheduler import Event, Scheduler
from expo_executor.simulate.cloud import WAKE, SimCloud, SimVm
from expo_executor.simulate.workload import SimJob


@dataclass(frozen=True)
class Answer:
    """A worker's answer about a held job it never started: given back (answering
    ``release``, the request's number), or dropped on a cancel (``release`` None)."""

    key: str
    worker: str
    release: int | None


class HeldJobs:
    """The simulated workers' side of prefetch."""

    def __init__(self, scheduler: Scheduler, cloud: SimCloud, jobs: Mapping[str, SimJob],
                 dispatch_s: float, started: dict[str, float]) -> None:
        self.scheduler = scheduler
        self.cloud = cloud
        self.jobs = jobs
        self.dispatch_s = dispatch_s
        self.started = started  # key -> when its last attempt started
        self.answers: list[Answer] = []
        self.known: dict[str, float] = {}  # a held job -> when its worker knew of it

    def start(self, key: str, vm: SimVm, when: float) -> None:
        self.cloud.start(self.jobs[key], vm, when)
        self.started[key] = when

    def assigned(self, key: str, vm: SimVm, now: float) -> None:
        """An assignment: to a free slot, it starts ``dispatch_s`` later; else it is held."""
        if key in self.scheduler.running_on(vm.name):
            self.start(key, vm, now + self.dispatch_s)
        else:
            self.known[key] = now + self.dispatch_s

    def unstarted(self, key: str, vm: SimVm, now: float, release: int | None) -> bool:
        """A cancel (``release`` None) or a release request (its number) of ``key`` on
        ``vm``: False when it runs there, as the scheduler sees it (a cancel kills it); else
        it is held, and the worker's answer is due."""
        if key in vm.runs or key in self.scheduler.running_on(vm.name):
            return False
        self._answer(Answer(key, vm.name, release), now)
        return True

    def _answer(self, answer: Answer, now: float) -> None:
        self.answers.append(answer)
        self.cloud.at(now + self.dispatch_s, WAKE)

    def take_answers(self, vms: Mapping[str, SimVm],
                     handle: Callable[[list[Event]], None]) -> set[str]:
        """The answers due: a job given back is queued again, a dropped one is skipped;
        returns the workers whose load changed."""
        answers, self.answers = self.answers, []
        touched: set[str] = set()
        for answer in answers:
            vm = vms.get(answer.worker)
            if vm is None or answer.key in vm.runs:
                continue  # its worker is gone (it was re-queued), or it started it first
            if answer.release is not None:
                self.scheduler.released(answer.key, answer.worker, answer.release)
            else:
                handle(self.scheduler.cancelled(answer.key, ran=False))
            touched.add(answer.worker)
        return touched

    def promote(self, vms: Mapping[str, SimVm], workers: set[str], now: float) -> None:
        """Start what the scheduler promoted on ``workers`` (a slot freed): when the slot
        freed (or the worker read of the job, if later); never a job being cancelled (its
        worker was told not to start it)."""
        for name in sorted(workers):
            vm = vms.get(name)
            if vm is None:
                continue
            for key in sorted(self.scheduler.running_on(name) - vm.runs.keys()):
                if self.scheduler.state(key) == "cancelling":  # dropped, never started
                    self._answer(Answer(key, name, None), now)
                    continue
                freed = vm.freed_at if vm.freed_at is not None else now
                self.start(key, vm, max(freed, self.known.pop(key, freed)))
