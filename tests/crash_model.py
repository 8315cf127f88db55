"""The protocol's model (tests/protocol_model.py) with a coordinator crash and the rerun's adoption
(issue 30): the machine's rules, and two more.

- ``crash``: the coordinator's object is dropped mid-run, with no teardown: its VMs and
  workers stay and go on (the other rules still act on them), its run's key and records stay
  on the host, its lock is freed (run_state.py), as when ``snakemake`` is killed; once a run,
  and only while a job is held or running on a worker (an earlier crash is a plain restart);
- ``rerun``: a new run starts as recover.py starts it: it finds the crashed run
  (``crashed_runs``), harvests its results (``harvest``), and adopts its live workers
  (``Adoption.take_over``; or, nothing being in flight, stops them), then the new coordinator
  (its own bucket prefix, engine and workers) is given the adoption and the harvest, and the
  rerun submits again, with the same stable identities, every job the dead run had not
  reported solved (as Snakemake's ``--rerun-incomplete``); a job the harvest found solved is
  submitted as solved (the front end's part: its outputs exist). A failure the dead run did not
  report may run again (the harvest takes solved jobs and timeouts only).

The engine's side of the old workers (``CrashedWorkers``: which live, stop these) is the
model's: a stop deletes the VM and its worker (``OldWorkers``).

The invariants hold across both runs, kept by job: a job adopted in flight does not run a
second time at once, one its old worker gives back, does not start, or loses runs here, and
the rerun ends with every job it submitted reported. When the machine ends after a crash with
no rerun, the rerun comes first.
"""

from __future__ import annotations

from hypothesis.stateful import precondition, rule

from expo_executor.coordinator.adopt import Adoption
from expo_executor.coordinator.harvest import harvest
from expo_executor.coordinator.loop import Coordinator
from expo_executor.coordinator.run_state import crashed_runs
from expo_executor.core.records import AttemptEnd
from expo_executor.core.scheduler import Outcome

from tests.helpers import KEY
from tests.memory_bucket import MemoryBucket
from tests.protocol_model import CloudEngine, ProtocolModel, model_request


class OldWorkers:
    """The engine's answer about the crashed run's workers: the model's VMs of that run."""

    def __init__(self, model: CrashModel, run: str) -> None:
        self.model, self.run = model, run

    def alive(self) -> set[str]:
        return {n.split("/")[1] for n in self.model.workers if n.startswith(f"{self.run}/")}

    def stop(self, names=None, gone_timeout: float = 0.0) -> int:  # type: ignore[no-untyped-def]
        names = self.alive() if names is None else set(names) & self.alive()
        for name in sorted(names):
            self.model.vanish(f"{self.run}/{name}")
        return len(names)


class CrashModel(ProtocolModel):
    """The run, which may crash once, and its rerun."""

    crashed = False
    dead: list[Coordinator]

    def in_flight(self) -> bool:
        """Some job is held or running on a worker: a crash then leaves work to adopt (an
        earlier one is the plain restart, which the machine would otherwise mostly try)."""
        scheduler = self.coordinator.scheduler  # type: ignore[union-attr]
        return any(k not in scheduler.outcomes and scheduler.state(k) == "running"
                   for k in self.keys)

    @precondition(lambda self: not self.crashed and self.in_flight())
    @rule()
    def crash(self) -> None:
        assert self.coordinator is not None
        self.crashed = True
        self.dead = [self.coordinator]  # dropped: only its channel is closed, at the end
        self.coordinator = None
        self.held.release()  # the process is gone: the kernel frees its lock

    @precondition(lambda self: self.crashed and self.run == "r1")
    @rule()
    def rerun(self) -> None:
        old_store, old = self.store, self.run
        [held] = crashed_runs(self.dir)
        # a failure the dead coordinator did not report is one the rerun runs again
        # (Snakemake submits it again; the harvest takes solved jobs and timeouts only)
        for key, (_where, end) in list(self.ended.items()):
            if end is AttemptEnd.FAILED and key not in self.reports:
                del self.ended[key]
        self.held = held
        workers = OldWorkers(self, old)
        adoption = Adoption(held, workers, old_store.view(), KEY, self.lines.append)
        found = harvest(held.dir, old_store.view(), KEY, self.state, "r2", self.lines.append)
        in_flight = adoption.take_over(found, self.now)
        self.run, self.store = "r2", MemoryBucket()
        self.view, self.engine = self.store.view(), CloudEngine()
        self.coordinator = Coordinator(self.config, self.engine, self.view, KEY,
                                       self.state.new_run(self.run), self.state,
                                       self.lines.append)
        self.coordinator.scheduler.set_prefetch(self.prefetch)
        self.coordinator.harvested = dict(found.solved)
        if in_flight:
            self.coordinator.adopted = [adoption]
        else:  # as recover.py: its workers stopped, the run over
            adoption.channel.close()
            workers.stop()
            held.end()
        solved = {k for k, r in self.reports.items() if r.outcome is Outcome.SOLVED}
        requests = [model_request(int(k[1:]), self.run) for k in self.keys if k not in solved]
        for request in requests:  # the front end: a harvested job whose outputs exist
            request.harvested = self.coordinator.harvested.get(request.identity)
        self.keys = [r.task.key for r in requests]
        self.unscheduled = {r.task.key for r in requests if r.harvested is not None}
        self.reports = {}
        self.coordinator.submit(requests)
        self.tick()

    def run_to_end(self) -> None:
        if self.crashed and self.run == "r1":
            self.rerun()
        super().run_to_end()

    def close(self) -> None:
        for coordinator in getattr(self, "dead", []):
            coordinator.channel.close()
        if self.coordinator is not None:
            for adoption in self.coordinator.adopted:
                adoption.channel.close()
        super().close()
