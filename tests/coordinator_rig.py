"""The real coordinator driven round by round (``Coordinator.round``) in-process: a scripted
engine, the real local bucket, and workers that exist only as the status and result objects a
test writes for them. The order of events is then exact rather than raced.

The bucket and the engine can be taken down (``down``: the exception every call raises), as
the local bucket's file system or a cloud API may be for a while; the coordinator's code above
them is the real one.
"""

from __future__ import annotations

from pathlib import Path

from expo_executor.coordinator.loop import Coordinator, CoordinatorConfig, JobRequest
from expo_executor.coordinator.state import StateDir
from expo_executor.core.hardness import HardnessPoint
from expo_executor.core.records import HardnessMeta, JobMeta
from expo_executor.core.scheduler import Task
from expo_executor.frontends.base import job_request
from expo_executor.protocol.bucket import LocalBucket
from expo_executor.protocol.keys import result_key
from expo_executor.protocol.records import ResultBatch
from expo_executor.protocol.worker_keys import worker_key

from tests.helpers import KEY, ScriptedEngine, attempt, write_result, write_status


class FlakyBucket(LocalBucket):
    """The coordinator's own view of the local bucket: every call raises ``down`` while set."""

    down: Exception | None = None

    def _check(self) -> None:
        if self.down is not None:
            raise self.down

    def read(self, key, **bounds):  # type: ignore[no-untyped-def]
        self._check()
        return super().read(key, **bounds)

    def write(self, key, data, if_generation_match=None):  # type: ignore[no-untyped-def]
        self._check()
        return super().write(key, data, if_generation_match)

    def list(self, prefix):  # type: ignore[no-untyped-def]
        self._check()
        return super().list(prefix)

    def delete(self, key):  # type: ignore[no-untyped-def]
        self._check()
        super().delete(key)


class FlakyEngine(ScriptedEngine):
    """Its listing (the call the coordinator makes every round) raises ``down`` while set."""

    down: Exception | None = None

    def list(self):  # type: ignore[no-untyped-def]
        if self.down is not None:
            raise self.down
        return super().list()



def work_request(n: int) -> JobRequest:
    """Job ``j{n}`` of a sweep over ``n`` (one hardness dimension, family ``f``, 30-s deadline)."""
    task = Task(f"j{n}", f"work {{n={n}}}", family="f", point=HardnessPoint((), (float(n),)))
    meta = JobMeta("work", {"n": str(n)}, hardness=HardnessMeta("n", ("n",), (float(n),), ()))
    return job_request(task, ["true"], "/", {}, 30.0, meta=meta)

class Rig:
    """One coordinator, ``slots`` per worker, at most ``workers`` workers; ``now`` advances
    only when a test says so."""

    def __init__(self, tmp_path: Path, slots: int = 1, workers: int = 1,
                 give_up_after: float = 60.0) -> None:
        self.bucket = FlakyBucket(tmp_path / "bucket")
        self.direct = LocalBucket(tmp_path / "bucket")  # the workers' side, never down
        self.engine = FlakyEngine()
        self.lines: list[str] = []
        self.config = CoordinatorConfig("run", slots, workers, poll=0.05, heartbeat=10.0,
                                        status_interval=3600,
                                        give_up_after=give_up_after)
        self.state = StateDir(tmp_path / "state")
        self.coordinator = Coordinator(self.config, self.engine, self.bucket, KEY, tmp_path,
                                       self.state, self.lines.append)
        self.now = 10_000.0
        self.reports: dict = {}

    def submit(self, *keys: str, **request: object) -> None:
        self.coordinator.submit([job_request(Task(k, k), ["true"], "/", {}, None,
                                             meta=JobMeta("r", {"i": k}), **request)
                                 for k in keys])

    def round(self, seconds: float = 0.1) -> bool:
        """Advance the clock by ``seconds`` and run one round; collect the reports."""
        self.now += seconds
        going = self.coordinator.round(self.now)
        for key in list(self.coordinator._requests):
            report = self.coordinator.take_report(key)
            if report is not None:
                assert key not in self.reports, f"{key} reported twice"
                self.reports[key] = report
        return going

    def ready(self, worker: str, running: tuple[str, ...] = (),
              released: dict[str, int] | None = None, seq_seen: int = 0) -> None:
        """``worker``'s status: ready, running ``running``, having given ``released`` back
        (job -> the release request it answers), having seen the inbox of ``seq_seen``."""
        write_status(self.direct, worker, running, slots=self.config.slots_per_worker,
                     released=released, seq_seen=seq_seen)

    def result(self, key: str, worker: str, outcome: str, reason: str | None = None,
               ran: bool = True) -> None:
        write_result(self.direct, attempt(key, worker, outcome, self.now, self.now,
                                          reason=reason, ran=ran))

    def batch(self, worker: str, *ends: tuple[str, str]) -> None:
        """One object of ``worker``'s results, ``(job, outcome)`` each, as a worker holding
        prefetched jobs writes it: named for the first job, signed once."""
        results = tuple(attempt(key, worker, outcome, self.now, self.now)
                        for key, outcome in ends)
        self.direct.write(result_key(ends[0][0], worker),
                          ResultBatch(worker, results).encode(worker_key(KEY, worker)),
                          if_generation_match=0)

    def assigned(self, worker: str) -> set[str]:
        vm = self.coordinator.vms.get(worker)
        return set(vm.places.jobs()) if vm is not None else set()
