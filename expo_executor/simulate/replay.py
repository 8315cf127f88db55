"""``expocloud simulate --workload FILE.csv``: recorded runtimes replayed under the real
scheduler, on a fixed pool of ``vms x slots`` slots in simulated time, with the domino effect
(``--hardness``) and the learned runtime model (``--hardness-model learned``).

The CSV's columns are the parameters, plus ``runtime_s`` and ``status``: ``ok`` finished at
``runtime_s``; any other status (timeout, memout, crash ...) did not finish, and ended at
``runtime_s``. A job runs ``min(runtime_s, deadline)``: an ``ok`` row past the deadline, or a
row that did not finish and ran to the deadline, times out there; one that ended earlier
without finishing failed. Every job is submitted at the start; the scheduler's answers are
carried out at once (a cancel kills its job at that moment, its slot-seconds counted). No VM
boots, prices or preemptions: :mod:`.simulation` models those, at a cost this many jobs
cannot pay; here the question is which jobs run, what they cost and what the model predicts.
"""

from __future__ import annotations

import csv
import heapq
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from expo_executor.core.errors import ExpoError
from expo_executor.core.hardness import HardnessSpec
from expo_executor.core.runtime_model import ModelSpec, RuntimeModel
from expo_executor.core.scheduler import (Cancel, Event, ModelSkipped, Outcome, Scheduler,
                                          Skipped, Task)
from expo_executor.simulate.remaining import RemainingCheck

FAMILY = "workload"


@dataclass(frozen=True)
class Row:
    """One recorded run: its parameters, how long it ran, and whether it finished."""

    params: Mapping[str, str]
    runtime_s: float
    ok: bool


@dataclass(frozen=True)
class ReplayConfig:
    deadline_s: float
    hardness: HardnessSpec | None = None
    learned: bool = False
    noise: tuple[str, ...] = ()
    skip_above: float | None = None
    vms: int = 50
    slots: int = 8
    trust_after: int = 50


@dataclass
class ReplayResult:
    """What a replay gives (``to_dict``: OUT.json)."""

    jobs: int = 0
    solvable: int = 0  # rows that finish ok within the deadline
    solvable_lost: int = 0  # ... of them skipped (either way), killed or not run
    cpu_s: float = 0.0  # slot-seconds spent on jobs, killed ones' included
    oracle_cpu_s: float = 0.0  # the solvable rows' runtimes summed
    model_skips: int = 0
    model_skips_wrong: int = 0  # model skips of rows that would have solved
    domino_skips: int = 0
    makespan_s: float = 0.0
    outcomes: dict[str, int] = field(default_factory=dict)
    remaining: dict[str, Any] = field(default_factory=dict)
    disagreements: list[dict[str, Any]] = field(default_factory=list)
    predicted_vs_actual: list[list[float]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["cpu_vs_oracle"] = self.cpu_s / self.oracle_cpu_s if self.oracle_cpu_s else None
        out["solvable_lost_share"] = self.solvable_lost / self.solvable if self.solvable else 0.0
        out["model_skips_right_share"] = (1.0 - self.model_skips_wrong / self.model_skips
                                          if self.model_skips else None)
        out["remaining_cost_covered"] = self.remaining.get("covered")
        return out


def load_rows(path: Path) -> list[Row]:
    """The CSV's rows, each bad line or missing column as one clear error."""
    try:
        handle = open(path, newline="")
    except OSError as exc:
        raise ExpoError("--workload", f"cannot read {path}: {exc.strerror}",
                        "give a readable CSV file") from None
    with handle:
        reader = csv.DictReader(handle)
        missing = {"runtime_s", "status"} - set(reader.fieldnames or ())
        if missing:
            raise ExpoError("--workload", f"{path} has no column {', '.join(sorted(missing))}",
                            "give the parameters' columns plus runtime_s and status")
        rows = [_row(record, number) for number, record in enumerate(reader, start=2)]
    if not rows:
        raise ExpoError("--workload", f"{path} has no rows", "give at least one recorded run")
    return rows


def _row(record: Mapping[str, str], line: int) -> Row:
    try:
        runtime = float(record["runtime_s"])
    except (TypeError, ValueError):
        runtime = math.nan
    if not math.isfinite(runtime) or runtime < 0:
        raise ExpoError("--workload", f"line {line}: runtime_s {record['runtime_s']!r} is not "
                        "a finite number of seconds >= 0", "fix that line")
    params = {k: str(v) for k, v in record.items() if k not in ("runtime_s", "status")}
    return Row(params, runtime, str(record["status"]).strip().lower() == "ok")


def replay(rows: Sequence[Row], config: ReplayConfig) -> ReplayResult:
    """Run every row under the real scheduler; see the module's docstring."""
    return _Replay(rows, config).run()


class _Replay:
    def __init__(self, rows: Sequence[Row], config: ReplayConfig):
        self.rows, self.config = rows, config
        self.model: RuntimeModel | None = None
        if config.learned:
            from expo_executor.learned.model import LearnedModel

            self.model = LearnedModel(ModelSpec(config.noise, config.hardness))
        models = {FAMILY: self.model} if self.model is not None else None
        self.scheduler = Scheduler(models=models, skip_above=config.skip_above,
                                   trust_after=config.trust_after)
        self.result = ReplayResult(jobs=len(rows))
        self.running: dict[str, tuple[float, str]] = {}  # key -> (start, worker)
        self.ends: list[tuple[float, int, str]] = []
        self.now = 0.0
        self.check = RemainingCheck(len(rows)) if self.model is not None else None
        self.predicted: dict[str, float] = {}

    def _task(self, index: int, row: Row) -> Task:
        spec = self.config.hardness
        point = spec.point(row.params, "--hardness") if spec is not None else None
        label = "{" + ", ".join(f"{k}={v}" for k, v in row.params.items()) + "}"
        return Task(str(index), label, FAMILY, point, params=row.params,
                    deadline_s=self.config.deadline_s)

    def run(self) -> ReplayResult:
        for w in range(self.config.vms):
            self.scheduler.add_worker(f"w{w}", self.config.slots)
        for index, row in enumerate(self.rows):
            self._handle(self.scheduler.submit(self._task(index, row)))
        self._start(self.scheduler.assign())
        while self.ends:
            end, _seq, key = heapq.heappop(self.ends)
            if key not in self.running:
                continue  # killed on the way
            self.now = end
            self._end(key)
            self._start(self.scheduler.assign())
        return self._summary()

    def _duration(self, row: Row) -> tuple[float, Outcome]:
        deadline = self.config.deadline_s
        if row.runtime_s >= deadline or (not row.ok and row.runtime_s >= deadline):
            return deadline, Outcome.TIMEOUT
        return row.runtime_s, Outcome.SOLVED if row.ok else Outcome.FAILED

    def _start(self, assignments: Sequence[Any]) -> None:
        for assignment in assignments:
            key = assignment.key
            self.running[key] = (self.now, assignment.worker_id)
            duration, _ = self._duration(self.rows[int(key)])
            heapq.heappush(self.ends, (self.now + duration, int(key), key))
            if self.model is not None and self.model.version:
                row = self.rows[int(key)]
                self.predicted[key] = self.model.predict(row.params,
                                                         self.config.deadline_s).median_s

    def _end(self, key: str) -> None:
        start, _worker = self.running.pop(key)
        row = self.rows[int(key)]
        duration, outcome = self._duration(row)
        self.result.cpu_s += duration
        if key in self.predicted and outcome is Outcome.SOLVED:
            self.result.predicted_vs_actual.append([round(self.predicted[key], 3), duration])
        if self.check is not None:
            self.check.finished(duration)
        self._handle(self.scheduler.finish(key, outcome, duration))
        self._look_ahead()

    def _look_ahead(self) -> None:
        """At 25% of the jobs decided, the model's 90% interval of the CPU still to spend."""
        if self.check is None or self.model is None or self.check.taken is not None:
            return
        decided = len(self.scheduler.outcomes)
        if decided >= self.check.at:
            self.check.take(self.scheduler, self.model, self.rows, self.running, self.now,
                            self.config.deadline_s)

    def _handle(self, events: Sequence[Event]) -> None:
        for event in events:
            if isinstance(event, Cancel):
                start, _worker = self.running.pop(event.key)
                self.result.cpu_s += self.now - start
                if self.check is not None:
                    self.check.finished(self.now - start)
                self._handle(self.scheduler.cancelled(event.key))
            elif isinstance(event, ModelSkipped):
                self.result.model_skips += 1
                if self._solvable(self.rows[int(event.key)]):
                    self.result.model_skips_wrong += 1
            elif isinstance(event, Skipped):
                self.result.domino_skips += 1

    def _solvable(self, row: Row) -> bool:
        return row.ok and row.runtime_s < self.config.deadline_s

    def _summary(self) -> ReplayResult:
        result, outcomes = self.result, self.scheduler.outcomes
        for index, row in enumerate(self.rows):
            if self._solvable(row):
                result.solvable += 1
                result.oracle_cpu_s += row.runtime_s
                if outcomes.get(str(index)) is not Outcome.SOLVED:
                    result.solvable_lost += 1
        counts: dict[str, int] = {}
        for outcome in outcomes.values():
            counts[outcome.value] = counts.get(outcome.value, 0) + 1
        result.outcomes = counts
        result.makespan_s = self.now
        if self.check is not None:
            result.remaining = self.check.report(result.cpu_s)
        if self.model is not None:
            result.disagreements = [
                {"dimension": d.dimension, "easier": dict(d.easier), "harder": dict(d.harder),
                 "easier_median_s": d.easier_median_s, "harder_median_s": d.harder_median_s}
                for d in self.model.disagreements()]
        return result
