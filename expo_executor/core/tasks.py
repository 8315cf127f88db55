"""The scheduler's records: a worker's pool, a task, what the scheduler answers (an
``Assignment``, a ``Release`` and the ``Event``s: skipped, model-skipped, cancel, finished,
confirming, requeued, unconfirmed), and its own table rows (``WorkerSlots``, ``TaskEntry`` with its
``Place``: where the task stands, the one record of it).

Pure data: the decisions are :mod:`.scheduler`'s; callers import these names from there too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Mapping

from expo_executor.core.hardness import FrontierPoint, HardnessPoint
from expo_executor.core.records import Outcome
from expo_executor.core.runtime_model import RuntimePrediction
from expo_executor.core.shapes import Shape


class Pool(str, Enum):
    """Where a worker's slots come from; local workers count as reliable."""

    LOCAL = "local"
    SPOT = "spot"
    ON_DEMAND = "on_demand"


@dataclass(frozen=True)
class SkipRule:
    """A model skip's threshold and the setting that set it, named in everything a skip
    records (the run's ``--expocloud-skip-above``, or a CWL tool's ``expo:Hardness`` hint)."""

    above: float
    setting: str = "--expocloud-skip-above"

    def __post_init__(self) -> None:
        if not 0.0 < self.above <= 1.0:
            raise ValueError(f"{self.setting} {self.above} is not a probability in (0, 1]")

    @property
    def text(self) -> str:
        """The setting with its value, e.g. ``--expocloud-skip-above 0.99``."""
        return f"{self.setting} {self.above:g}"


@dataclass(frozen=True)
class Task:
    """What the scheduler needs to know about a job; the front end keeps everything else."""

    key: str
    label: str
    # frontier partition (rule, spec, deadline, engine and machine); None: never pruned
    family: str | None = None
    point: HardnessPoint | None = None
    cpus: int = 1
    mem_mb: int = 0
    priority: int = 0  # higher runs earlier, before hardness order
    preemptible: bool = True
    spot_attempts: int | None = None  # preemptions before on-demand only; None: the run's
    shape: Shape | None = None  # the machine it needs; None: the run's own workers
    # the job's parameters (wildcards), which a runtime model predicts from; and its deadline,
    # at which a timeout is censored and against which the model's p_exceed is asked
    params: Mapping[str, str] = field(default_factory=dict, hash=False, compare=False)
    deadline_s: float | None = None
    # the model skip's threshold for this task's family (a CWL tool's hint); None: the run's
    skip: SkipRule | None = None


@dataclass(frozen=True)
class Assignment:
    key: str
    worker_id: str


@dataclass(frozen=True)
class Release:
    """A held task another worker's free slot should start (``Scheduler.assign``): its
    worker is asked to give it back. It answers that it never started it
    (``Scheduler.released``), or reports it as any job it started first. ``request``
    numbers the request (every one of the run is new): the answer names it, so that a task
    given back, held there again and asked back again gets an answer of its own, and a
    stale answer is never taken for a newer request's."""

    key: str
    worker_id: str
    request: int


@dataclass(frozen=True)
class Skipped:
    """A task that will not run (or was killed) because an easier one timed out."""

    key: str
    dominator: FrontierPoint
    killed: bool = False
    # skipped as it was submitted: a timeout it knew of already dominated it (no timeout of
    # this round set it off, and no worker ever had it)
    on_arrival: bool = False


@dataclass(frozen=True)
class ModelSkipped:
    """A queued task the runtime model skips: it predicts the task passes its deadline with
    ``probability`` >= the threshold of ``rule`` (its family's, else the run's ``skip_above``;
    not the domino effect: no timeout dominates it). A rerun may run it."""

    key: str
    probability: float
    prediction: RuntimePrediction
    rule: SkipRule


@dataclass(frozen=True)
class Cancel:
    """A running task to kill: the coordinator tells its worker, then calls ``cancelled``."""

    key: str
    worker_id: str
    dominator: FrontierPoint


@dataclass(frozen=True)
class Finished:
    """A task ended; for a timeout, ``harder`` counts the tasks it skipped or cancelled.
    ``first_timeout_on``: the worker on which its first run timed out, when that timeout was
    re-run to confirm it (a solved re-run makes it a slow worker's event, not hardness)."""

    key: str
    outcome: Outcome
    harder: int = 0
    first_timeout_on: str | None = None


@dataclass(frozen=True)
class Confirming:
    """A family's timeout, not yet trusted: the task runs once more, on another worker with
    nothing else running, before its timeout prunes anything."""

    key: str
    worker_id: str


@dataclass(frozen=True)
class Requeued:
    """A task whose worker vanished goes back to the queue, ahead of fresh tasks."""

    key: str
    worker_id: str
    preemptions: int
    on_demand_only: bool


@dataclass(frozen=True)
class Unconfirmed:
    """A timeout that could not be re-run (no other worker of its shape): it prunes as
    without confirmation."""

    key: str
    worker_id: str


Event = Skipped | Cancel | Finished | Requeued | Confirming | Unconfirmed | ModelSkipped


class Stage(str, Enum):
    """Where a task stands (:class:`Place`)."""

    QUEUED = "queued"  # on no worker: queued, waiting for its re-run, or decided (outcomes)
    HELD = "held"  # on a worker, not started: it starts there as a slot frees (prefetch)
    RUNNING = "running"
    RELEASING = "releasing"  # held, and its worker asked to give it back (Release)
    CANCELLING = "cancelling"  # held or running, and its worker told to kill it (Cancel)


@dataclass
class Place:
    """A task's place: the one record of where it stands, which only the scheduler's moves
    change (:mod:`.placing`). Every other view is derived from it: the workers' running and
    held indexes (:class:`WorkerSlots`), the task's state, and the coordinator's inboxes'
    releases and cancels (``coordinator.places``, by ``Scheduler.place_on``). The inboxes
    also hold what the scheduler does not model, kept there: the payload, a job listed until
    its worker reports it, a stray copy to kill, an adopted run's jobs. ``worker_id``: the
    worker it is on (None when QUEUED); ``dominator``: the timeout it is cancelled for
    (CANCELLING); ``request``: the number of the Release that asks it back (RELEASING; kept
    when CANCELLING follows, as its worker may still answer it)."""

    stage: Stage = Stage.QUEUED
    worker_id: str | None = None
    dominator: FrontierPoint | None = None
    request: int = 0


@dataclass
class WorkerSlots:
    """A worker as the scheduler places on it: its capacity, what is free, and the indexes
    of the tasks placed on it (only :mod:`.placing`'s moves keep them): those that take its
    CPUs (``running``: started, as its worker decides) and those it holds (prefetch)."""

    worker_id: str
    cpus: int
    mem_mb: int
    pool: Pool
    shape: Shape | None = None
    free_cpus: int = 0
    free_mem_mb: int = 0
    running: set[str] = field(default_factory=set)
    # prefetched: assigned, not started; the worker starts them in this order as its slots
    # free (``Scheduler.prefetch``), and so does its mirror here (_promote)
    held: list[str] = field(default_factory=list)
    held_free: int = 0  # CPUs of prefetch left

    def held_cpus(self, prefetch: int) -> int:
        return self.cpus * prefetch - self.held_free


@dataclass
class TaskEntry:
    """A task's row in the scheduler's table: its order in the queue, its preemptions, its
    :class:`Place` (and, read from it, the worker it is on, the timeout it is cancelled for,
    the request that asks it back), and whether it is re-run to confirm its timeout."""

    task: Task
    seq: int
    requeued: bool = False
    preemptions: int = 0
    first_timeout_on: str | None = None  # set while (and after) its timeout is re-run
    place: Place = field(default_factory=Place)
    # its place in the queue by the runtime model (:mod:`.model_hooks`); () without one
    model_rank: tuple = ()

    @property
    def worker_id(self) -> str | None:
        return self.place.worker_id

    @property
    def cancelling(self) -> FrontierPoint | None:
        return self.place.dominator if self.place.stage is Stage.CANCELLING else None

    @property
    def releasing(self) -> int:
        return self.place.request if self.place.stage is Stage.RELEASING else 0

    def order(self) -> tuple:
        hardness = self.task.point.sort_key() if self.task.point else (0.0, ())
        return (not self.requeued, -self.task.priority, self.model_rank, hardness, self.seq)
