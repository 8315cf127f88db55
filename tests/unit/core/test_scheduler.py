"""The scheduling core: easiest-first dispatch, the frontier, the domino effect, re-queueing.

A hypothesis state machine drives the real Scheduler with random operations and checks every
answer against an independent model (its own task states, worker loads and frontier, computed
from the timeouts the test reported); example tests pin the documented behaviours.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from expo_executor.core.hardness import Frontier, FrontierPoint, HardnessPoint, HardnessSpec
from expo_executor.core.scheduler import (
    Assignment,
    Cancel,
    Confirming,
    Finished,
    Outcome,
    Place,
    Pool,
    Release,
    Requeued,
    Scheduler,
    Skipped,
    Stage,
    Task,
    Unconfirmed,
)
from expo_executor.core.shapes import Shape


def leq(a: HardnessPoint, b: HardnessPoint) -> bool:
    """The partial order, written independently of HardnessPoint.as_easy_as."""
    return a.scope == b.scope and len(a.vector) == len(b.vector) and all(
        x <= y for x, y in zip(a.vector, b.vector))


def minimal(points: set[HardnessPoint]) -> set[HardnessPoint]:
    return {p for p in points if not any(q != p and leq(q, p) for q in points)}


# -- the state machine -----------------------------------------------------------------------
DIMS = {"F2": 2, "F3": 3}  # family -> number of hardness coordinates
SCOPES = [("A",), ("B",)]
# (family, scope, coordinates, cpus, mem_mb, priority, preemptible); family None: never pruned
TASK = st.tuples(st.sampled_from(["F2", "F2", "F3", None]), st.sampled_from(SCOPES),
                 st.lists(st.integers(0, 3), min_size=3, max_size=3), st.sampled_from([1, 1, 2, 3]),
                 st.sampled_from([0, 0, 0, 1000, 3000]), st.sampled_from([0, 0, 0, 1]),
                 st.booleans())
# (cpus, mem_mb, pool); mem_mb 0: memory not tracked
WORKER = st.tuples(st.integers(1, 6), st.sampled_from([0, 0, 4000]), st.sampled_from(list(Pool)))


class SchedulerMachine(RuleBasedStateMachine):
    """Random submits, workers joining and vanishing, assignments and every kind of ending."""

    def __init__(self) -> None:
        super().__init__()
        self.spot_attempts = 2
        self.sched = Scheduler(spot_attempts=self.spot_attempts)
        self.tasks: dict[str, Task] = {}
        self.phase: dict[str, str] = {}  # queued, running or final
        self.where: dict[str, str] = {}  # running task -> worker id
        self.requeued: set[str] = set()
        self.preemptions: Counter[str] = Counter()
        self.cancels: Counter[str] = Counter()  # Cancel events seen per task
        self.cancel_dominator: dict[str, FrontierPoint] = {}
        self.outcomes: dict[str, Outcome] = {}
        self.timeouts: dict[str, set[HardnessPoint]] = {}  # family -> every accepted timeout
        self.timeout_label: dict[tuple[str, HardnessPoint], str] = {}
        self.workers: dict[str, tuple[int, int, Pool]] = {}  # id -> (cpus, mem_mb, pool)
        self.n_tasks = 0
        self.n_workers = 0

    @initialize(spot_attempts=st.integers(0, 2), workers=st.lists(WORKER, min_size=1, max_size=3),
                tasks=st.lists(TASK, min_size=2, max_size=10))
    def start(self, spot_attempts, workers, tasks):
        self.spot_attempts = spot_attempts
        self.sched = Scheduler(spot_attempts=spot_attempts)
        for fields in workers:
            self._add_worker(*fields)
        for fields in tasks:
            self._submit(*fields)

    # -- model helpers -------------------------------------------------------------------
    def keys_in(self, phase: str) -> list[str]:
        return sorted(k for k, p in self.phase.items() if p == phase)

    def on_demand_only(self, key: str) -> bool:
        return not self.tasks[key].preemptible or self.preemptions[key] >= self.spot_attempts

    def model_dominator(self, task: Task) -> HardnessPoint | None:
        if task.family is None or task.point is None:
            return None
        for point in minimal(self.timeouts.get(task.family, set())):
            if leq(point, task.point):
                return point
        return None

    def check_dominator(self, key: str, dominator: FrontierPoint) -> None:
        task = self.tasks[key]
        assert leq(dominator.point, task.point), (key, dominator)
        assert dominator.point in minimal(self.timeouts[task.family]), (key, dominator)
        assert dominator.label == self.timeout_label[(task.family, dominator.point)]

    def free(self) -> dict[str, list]:
        """worker id -> [free cpus, free mem or None when untracked], from the model."""
        free = {w: [cpus, mem if mem else None] for w, (cpus, mem, _) in self.workers.items()}
        for key in self.keys_in("running"):
            slot = free[self.where[key]]
            slot[0] -= self.tasks[key].cpus
            if slot[1] is not None:
                slot[1] -= self.tasks[key].mem_mb
        return free

    def fits(self, key: str, worker_id: str, free: dict[str, list]) -> bool:
        task = self.tasks[key]
        cpus, mem = free[worker_id]
        pool = self.workers[worker_id][2]
        return (cpus >= task.cpus and (mem is None or mem >= task.mem_mb)
                and not (self.on_demand_only(key) and pool is Pool.SPOT))

    def must_precede(self, x: str, y: str) -> bool:
        """x must start no later than y: x is due first and fits wherever y fits."""
        tx, ty = self.tasks[x], self.tasks[y]
        if not (tx.cpus <= ty.cpus and tx.mem_mb <= ty.mem_mb
                and (not self.on_demand_only(x) or self.on_demand_only(y))):
            return False
        if (x in self.requeued) != (y in self.requeued):
            return x in self.requeued  # re-queued tasks go first
        if tx.priority != ty.priority:
            return tx.priority > ty.priority
        return (tx.family is not None and tx.family == ty.family
                and tx.point is not None and ty.point is not None
                and leq(tx.point, ty.point) and tx.point != ty.point)

    def finalize(self, key: str, outcome: Outcome) -> None:
        self.phase[key] = "final"
        self.outcomes[key] = outcome
        self.where.pop(key, None)

    # -- actions, each answer checked against the model ----------------------------------
    def _submit(self, family, scope, coords, cpus, mem_mb, priority, preemptible) -> None:
        key = f"t{self.n_tasks}"
        self.n_tasks += 1
        point = HardnessPoint(scope, tuple(float(c) for c in coords[:DIMS.get(family, 2)]))
        task = Task(key, f"label-{key}", family, point, cpus, mem_mb, priority, preemptible)
        self.tasks[key] = task
        events = self.sched.submit(task)
        if self.model_dominator(task) is not None:
            assert len(events) == 1 and isinstance(events[0], Skipped), events
            assert events[0].key == key and not events[0].killed
            self.check_dominator(key, events[0].dominator)
            self.finalize(key, Outcome.SKIPPED)
        else:
            assert events == []
            self.phase[key] = "queued"

    def _add_worker(self, cpus, mem_mb, pool) -> None:
        worker_id = f"w{self.n_workers}"
        self.n_workers += 1
        self.sched.add_worker(worker_id, cpus, mem_mb, pool)
        self.workers[worker_id] = (cpus, mem_mb, pool)

    def _remove_worker(self, worker_id: str, preempted: bool) -> None:
        events = self.sched.remove_worker(worker_id, preempted=preempted)
        if worker_id not in self.workers:
            assert events == []
            return
        pool = self.workers.pop(worker_id)[2]
        lost = {k for k in self.keys_in("running") if self.where[k] == worker_id}
        assert {e.key for e in events} == lost and len(events) == len(lost), events
        for event in events:
            key = event.key
            if self.cancels[key]:  # it was being killed anyway
                assert event == Skipped(key, self.cancel_dominator[key], killed=True), event
                self.finalize(key, Outcome.SKIPPED)
                continue
            if preempted and pool is Pool.SPOT:
                self.preemptions[key] += 1
            assert event == Requeued(key, worker_id, self.preemptions[key],
                                     self.on_demand_only(key))
            self.phase[key] = "queued"
            self.requeued.add(key)
            del self.where[key]

    def _assign(self) -> None:
        queued_before = set(self.keys_in("queued"))
        assignments = self.sched.assign()
        started = {a.key: i for i, a in enumerate(assignments)}
        assert len(started) == len(assignments), "a task was started twice in one call"
        free = self.free()
        for a in assignments:
            assert isinstance(a, Assignment)
            assert a.key in queued_before, f"{a.key} started while {self.phase[a.key]}"
            assert a.worker_id in self.workers
            assert self.fits(a.key, a.worker_id, free), (a, free)
            dominator = self.model_dominator(self.tasks[a.key])
            assert dominator is None, f"{a.key} started although {dominator} timed out"
            task = self.tasks[a.key]
            free[a.worker_id][0] -= task.cpus
            if free[a.worker_id][1] is not None:
                free[a.worker_id][1] -= task.mem_mb
            self.phase[a.key] = "running"
            self.where[a.key] = a.worker_id
        # Dispatch order is a linear extension (re-queued first, then priority, then hardness).
        for y, y_index in started.items():
            for x in queued_before - {y}:
                if self.must_precede(x, y):
                    assert x in started and started[x] < y_index, (
                        f"{y} {self.tasks[y]} started before {x} {self.tasks[x]}")
        # Work-conserving: whatever is still queued fits on no worker now.
        for key in self.keys_in("queued"):
            assert not any(self.fits(key, w, free) for w in self.workers), key

    def _finish(self, key: str, outcome: Outcome) -> None:
        before = dict(self.sched.outcomes)
        events = self.sched.finish(key, outcome)
        task = self.tasks[key]
        if self.phase[key] != "running":
            assert events == [], events  # late or duplicate: the first report stands
            assert self.sched.outcomes == before
            return
        if self.cancels[key] and outcome is not Outcome.SOLVED:
            assert events == [Skipped(key, self.cancel_dominator[key], killed=True)]
            self.finalize(key, Outcome.SKIPPED)
            return
        self.finalize(key, outcome)
        if outcome is not Outcome.TIMEOUT or task.family is None or task.point is None:
            assert events == [Finished(key, outcome)]
            return
        points = self.timeouts.setdefault(task.family, set())
        if task.point not in points:
            points.add(task.point)
            self.timeout_label[(task.family, task.point)] = task.label
        expected_skips, expected_cancels = set(), set()
        for other, t in self.tasks.items():
            if t.family != task.family or t.point is None or self.model_dominator(t) is None:
                continue
            if self.phase[other] == "queued":
                expected_skips.add(other)
            elif self.phase[other] == "running" and not self.cancels[other]:
                expected_cancels.add(other)
        first, rest = events[0], events[1:]
        assert first == Finished(key, Outcome.TIMEOUT, harder=len(rest)), events
        skips = [e for e in rest if isinstance(e, Skipped)]
        cancels = [e for e in rest if isinstance(e, Cancel)]
        assert len(skips) + len(cancels) == len(rest), rest
        assert sorted(e.key for e in skips) == sorted(expected_skips)
        assert sorted(e.key for e in cancels) == sorted(expected_cancels)
        for event in skips:
            assert not event.killed
            self.check_dominator(event.key, event.dominator)
            self.finalize(event.key, Outcome.SKIPPED)
        for event in cancels:
            assert event.worker_id == self.where[event.key]
            self.check_dominator(event.key, event.dominator)
            self.cancels[event.key] += 1
            self.cancel_dominator[event.key] = event.dominator

    # -- rules: events in any order, and assign() now and then as a coordinator cycle does --
    @rule(fields=TASK, then_assign=st.booleans())
    def submit(self, fields, then_assign):
        self._submit(*fields)
        if then_assign:
            self._assign()

    @precondition(lambda self: len(self.workers) < 5)
    @rule(fields=WORKER, then_assign=st.booleans())
    def add_worker(self, fields, then_assign):
        self._add_worker(*fields)
        if then_assign:
            self._assign()

    @rule(data=st.data(), preempted=st.booleans(), then_assign=st.booleans())
    def remove_worker(self, data, preempted, then_assign):
        self._remove_worker(data.draw(st.sampled_from(sorted(self.workers) + ["never-seen"])),
                            preempted)
        if then_assign:
            self._assign()

    @rule()
    def assign(self):
        self._assign()

    @rule(data=st.data(), late=st.booleans(), then_assign=st.booleans(),
          outcome=st.sampled_from([Outcome.SOLVED, Outcome.FAILED, Outcome.TIMEOUT,
                                   Outcome.TIMEOUT, Outcome.TIMEOUT]))
    def finish(self, data, late, outcome, then_assign):
        """A running task ends; or (late) a report arrives for any task, maybe a stale one."""
        running = self.keys_in("running")
        self._finish(data.draw(st.sampled_from(sorted(self.tasks) if late or not running
                                               else running)), outcome)
        if then_assign:
            self._assign()

    @rule(data=st.data())
    def cancelled(self, data):
        """A worker confirms a kill: usually of a task we cancelled, sometimes of any task."""
        cancelled = sorted(self.cancels)
        key = data.draw(st.sampled_from(cancelled) if cancelled and data.draw(st.booleans())
                        else st.sampled_from(sorted(self.tasks)))
        events = self.sched.cancelled(key)
        if self.phase[key] == "running" and self.cancels[key]:
            assert events == [Skipped(key, self.cancel_dominator[key], killed=True)]
            self.finalize(key, Outcome.SKIPPED)
        else:
            assert events == []

    @rule(data=st.data())
    def withdraw(self, data):
        key = data.draw(st.sampled_from(sorted(self.tasks) + ["never-submitted"]))
        worker_id = self.sched.withdraw(key)
        if key not in self.tasks or self.phase[key] == "final":
            assert worker_id is None
            return
        assert worker_id == self.where.get(key)
        self.finalize(key, Outcome.FAILED)

    # -- invariants, after every step ----------------------------------------------------
    @invariant()
    def frontiers_are_antichains_of_minimal_timeouts(self):
        for family, frontier in self.sched.frontiers.items():
            points = [e.point for e in frontier.points]
            for i, p in enumerate(points):
                for j, q in enumerate(points):
                    assert i == j or not leq(p, q), f"{family}: {p} is as easy as {q}"
            assert set(points) == minimal(self.timeouts.get(family, set())), family
            for entry in frontier.points:
                assert entry.label == self.timeout_label[(family, entry.point)]
        for family in self.timeouts:
            assert family in self.sched.frontiers

    @invariant()
    def states_and_outcomes_match_the_model(self):
        assert self.sched.outcomes == self.outcomes  # also: a final outcome never changes
        for key, phase in self.phase.items():
            if phase == "final":
                expected = self.outcomes[key].value
            elif phase == "queued":
                expected = "queued"
            else:
                expected = "cancelling" if self.cancels[key] else "running"
            assert self.sched.state(key) == expected, key

    @invariant()
    def each_task_has_one_place_that_matches_the_model(self):
        """The one record of where a task stands (core/placing.py), read directly."""
        for key, phase in self.phase.items():
            place = self.sched.place(key)
            if phase != "running":
                assert place == Place(), (key, place)
            elif self.cancels[key]:
                assert place == Place(Stage.CANCELLING, self.where[key],
                                      dominator=self.cancel_dominator[key]), (key, place)
            else:
                assert place == Place(Stage.RUNNING, self.where[key]), (key, place)

    @invariant()
    def counts_add_up(self):
        counts = self.sched.counts()
        assert sum(counts.values()) == len(self.tasks)
        assert counts["queued"] == len(self.keys_in("queued"))
        assert counts["running"] == len(self.keys_in("running"))
        by_outcome = Counter(o.value for o in self.outcomes.values())
        for outcome in Outcome:
            assert counts[outcome.value] == by_outcome[outcome.value]

    @invariant()
    def workers_are_never_over_or_under_booked(self):
        free = self.free()
        reported = self.sched.workers()
        assert set(reported) == set(self.workers)
        seen: set[str] = set()
        for worker_id, (cpus, free_cpus) in reported.items():
            assert cpus == self.workers[worker_id][0]
            assert 0 <= free_cpus <= cpus
            assert free_cpus == free[worker_id][0]
            running = self.sched.running_on(worker_id)
            assert running == {k for k, w in self.where.items() if w == worker_id}
            assert not running & seen, "a task runs on two workers"
            seen |= running
        assert seen == set(self.keys_in("running"))
        assert all(mem is None or mem >= 0 for _, mem in free.values())

    @invariant()
    def nothing_dominated_waits_and_everything_dominated_running_is_cancelled_once(self):
        for key in self.keys_in("queued"):
            assert self.model_dominator(self.tasks[key]) is None, key
        for key in self.keys_in("running"):
            if self.model_dominator(self.tasks[key]) is not None:
                assert self.cancels[key] == 1, key
        assert all(n <= 1 for n in self.cancels.values()), self.cancels

    @invariant()
    def queued_demand_splits_by_pool(self):
        demand = self.sched.queued_demand()
        queued = self.keys_in("queued")
        assert demand[Pool.ON_DEMAND] == sum(
            self.tasks[k].cpus for k in queued if self.on_demand_only(k))
        assert demand[Pool.SPOT] == sum(
            self.tasks[k].cpus for k in queued if not self.on_demand_only(k))


SchedulerMachine.TestCase.settings = settings(
    max_examples=250, stateful_step_count=50, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
test_scheduler_state_machine = SchedulerMachine.TestCase


# -- examples --------------------------------------------------------------------------------
def point(*coords: float, scope: tuple[str, ...] = ()) -> HardnessPoint:
    return HardnessPoint(scope, tuple(float(c) for c in coords))


def task(key: str, *coords: float, family: str | None = "f", scope: tuple[str, ...] = (),
         **kw) -> Task:
    return Task(key, key, family, point(*coords, scope=scope) if coords else None, **kw)


def dispatch_order(sched: Scheduler) -> list[str]:
    """Start tasks one at a time on a single one-CPU worker, solving each."""
    if not sched.workers():
        sched.add_worker("solo", 1)
    assert [cpus for cpus, _ in sched.workers().values()] == [1]
    order = []
    while assignments := sched.assign():
        (assignment,) = assignments
        order.append(assignment.key)
        sched.finish(assignment.key, Outcome.SOLVED)
    return order


def test_categorical_values_dispatch_in_declared_order_not_alphabetically():
    spec = HardnessSpec.parse("variant:heuristic<bnb<brute")
    sched = Scheduler()
    for variant in ("brute", "heuristic", "bnb"):  # submitted out of order
        sched.submit(Task(variant, variant, "f", spec.point({"variant": variant})))
    assert dispatch_order(sched) == ["heuristic", "bnb", "brute"]


def test_numeric_values_dispatch_as_numbers():
    spec = HardnessSpec.parse("n")
    sched = Scheduler()
    for n in ("10", "9", "100", "2"):
        sched.submit(Task(f"n{n}", f"n={n}", "f", spec.point({"n": n})))
    assert dispatch_order(sched) == ["n2", "n9", "n10", "n100"]


def test_a_timeout_of_9_skips_10_but_not_8():
    spec = HardnessSpec.parse("n")
    sched = Scheduler()
    sched.add_worker("w", 1)
    for n in ("9", "10", "8"):
        sched.submit(Task(f"n{n}", f"n={n}", "f", spec.point({"n": n})))
    assert sched.assign() == [Assignment("n8", "w")]
    sched.finish("n8", Outcome.SOLVED)
    assert sched.assign() == [Assignment("n9", "w")]
    events = sched.finish("n9", Outcome.TIMEOUT)
    assert [type(e) for e in events] == [Finished, Skipped] and events[1].key == "n10"
    assert sched.state("n10") == "skipped"
    assert events[1].dominator.label == "n=9"


def test_scopes_partition_the_frontier():
    sched = Scheduler()
    sched.add_worker("w", 1)
    sched.submit(task("a1", 1, 1, scope=("A",)))
    sched.submit(task("a2", 2, 2, scope=("A",)))
    sched.submit(task("b2", 2, 2, scope=("B",)))
    sched.submit(task("b9", 9, 9, scope=("B",)))
    assert sched.assign() == [Assignment("a1", "w")]
    events = sched.finish("a1", Outcome.TIMEOUT)
    assert events == [Finished("a1", Outcome.TIMEOUT, harder=1),
                      Skipped("a2", sched.frontiers["f"].points[0])]
    assert sched.state("b2") == sched.state("b9") == "queued"
    assert sched.submit(task("a3", 3, 3, scope=("A",)))[0].key == "a3"
    assert sched.submit(task("b3", 3, 3, scope=("B",))) == []
    assert dispatch_order(sched) == ["b2", "b3", "b9"]


def test_families_partition_the_frontier_and_tasks_without_a_point_are_never_pruned():
    sched = Scheduler()
    sched.add_worker("w", 1)
    sched.submit(task("f0", 0, family="f"))
    sched.submit(task("g5", 5, family="g"))
    sched.submit(task("none", 7, family=None))
    sched.submit(task("nopoint", priority=-1))
    assert sched.assign() == [Assignment("f0", "w")]
    assert sched.finish("f0", Outcome.TIMEOUT) == [Finished("f0", Outcome.TIMEOUT)]
    assert set(sched.frontiers) == {"f"}
    assert sorted(dispatch_order(sched)) == ["g5", "none", "nopoint"]


def test_domino_effect_skips_queued_and_cancels_running_tasks_it_dominates():
    sched = Scheduler()
    sched.add_worker("w", 4)
    for key, coords in {"easy": (1, 1), "run": (1, 3), "side": (0, 5), "hard": (2, 2),
                        "harder": (3, 3)}.items():
        sched.submit(task(key, *coords))
    assert {a.key for a in sched.assign()} == {"easy", "side", "run", "hard"}
    sched.finish("hard", Outcome.SOLVED)
    assert sched.assign() == [Assignment("harder", "w")]
    events = sched.finish("easy", Outcome.TIMEOUT)
    finished, *consequences = events
    assert isinstance(finished, Finished) and finished.outcome is Outcome.TIMEOUT
    assert finished.harder == len(consequences) == 2
    assert {(type(e), e.key) for e in consequences} == {(Cancel, "run"), (Cancel, "harder")}
    assert all(e.worker_id == "w" and e.dominator.label == "easy" for e in consequences)
    assert sched.state("run") == "cancelling" and sched.state("side") == "running"
    # The worker confirms the kill; a later report from it changes nothing.
    assert sched.cancelled("run") == [Skipped("run", consequences[0].dominator, killed=True)]
    assert sched.cancelled("run") == []
    assert sched.finish("run", Outcome.FAILED) == []
    # A cancelled task that times out on its own is still reported as skipped.
    assert sched.finish("harder", Outcome.TIMEOUT)[0].killed
    assert sched.workers() == {"w": (4, 3)}
    assert sched.outcomes == {"easy": Outcome.TIMEOUT, "hard": Outcome.SOLVED,
                              "run": Outcome.SKIPPED, "harder": Outcome.SKIPPED}


def test_timeout_harder_count_equals_skipped_plus_cancelled():
    sched = Scheduler()
    sched.add_worker("w", 3)
    sched.submit(task("root", 0, 0))
    for i in range(1, 6):
        sched.submit(task(f"q{i}", i, i, cpus=1))
    started = [a.key for a in sched.assign()]
    assert started == ["root", "q1", "q2"]
    events = sched.finish("root", Outcome.TIMEOUT)
    skipped = [e for e in events if isinstance(e, Skipped)]
    cancels = [e for e in events if isinstance(e, Cancel)]
    assert events[0].harder == len(skipped) + len(cancels) == 5
    assert {e.key for e in cancels} == {"q1", "q2"}
    assert {e.key for e in skipped} == {"q3", "q4", "q5"}


def test_a_solved_report_wins_over_a_pending_cancel():
    sched = Scheduler()
    sched.add_worker("w", 2)
    sched.submit(task("a", 0))
    sched.submit(task("b", 1))
    sched.assign()
    assert [type(e) for e in sched.finish("a", Outcome.TIMEOUT)] == [Finished, Cancel]
    assert sched.finish("b", Outcome.SOLVED) == [Finished("b", Outcome.SOLVED)]
    assert sched.cancelled("b") == []
    assert sched.state("b") == "solved"


def test_finished_and_skipped_outcomes_are_final():
    sched = Scheduler()
    sched.add_worker("w", 1)
    sched.submit(task("a", 0))
    sched.submit(task("b", 1))
    sched.assign()
    sched.finish("a", Outcome.TIMEOUT)
    assert sched.state("b") == "skipped"
    for outcome in Outcome:
        assert sched.finish("a", outcome) == []
        assert sched.finish("b", outcome) == []
    assert sched.withdraw("a") is None and sched.withdraw("b") is None
    assert sched.outcomes == {"a": Outcome.TIMEOUT, "b": Outcome.SKIPPED}
    assert sched.assign() == []


def test_requeued_tasks_go_before_fresh_ones():
    sched = Scheduler()
    sched.add_worker("w1", 1)
    sched.submit(task("hard", 9, 9, priority=0))
    assert sched.assign() == [Assignment("hard", "w1")]
    sched.submit(task("easy", 0, 0))
    sched.submit(task("urgent", 0, 0, family="g", priority=5))
    events = sched.remove_worker("w1")
    assert events == [Requeued("hard", "w1", preemptions=0, on_demand_only=False)]
    assert sched.state("hard") == "queued"
    # A late report from the vanished worker is ignored: the task waits to run again.
    assert sched.finish("hard", Outcome.TIMEOUT) == []
    assert dispatch_order(sched) == ["hard", "urgent", "easy"]


def test_requeued_tasks_keep_easiest_first_among_themselves():
    sched = Scheduler()
    sched.add_worker("big", 3)
    for key, n in (("c", 3), ("a", 1), ("b", 2)):
        sched.submit(task(key, n))
    assert len(sched.assign()) == 3
    assert [e.key for e in sched.remove_worker("big", preempted=True)] == ["c", "a", "b"]
    assert dispatch_order(sched) == ["a", "b", "c"]


def test_a_cancelling_task_on_a_lost_worker_is_skipped_not_requeued():
    sched = Scheduler()
    sched.add_worker("w", 2)
    sched.submit(task("a", 0))
    sched.submit(task("b", 1))
    sched.assign()
    cancel = sched.finish("a", Outcome.TIMEOUT)[1]
    assert sched.remove_worker("w") == [Skipped("b", cancel.dominator, killed=True)]
    assert sched.counts()["queued"] == 0 and sched.state("b") == "skipped"


def test_on_demand_only_after_spot_attempts_preemptions():
    sched = Scheduler(spot_attempts=2)
    sched.submit(task("t", 0))
    sched.add_worker("s1", 1, pool=Pool.SPOT)
    assert sched.assign() == [Assignment("t", "s1")]
    assert sched.remove_worker("s1", preempted=True) == [Requeued("t", "s1", 1, False)]
    sched.add_worker("s2", 1, pool=Pool.SPOT)
    assert sched.assign() == [Assignment("t", "s2")]
    # Losing a Spot worker without a preemption (e.g. scaled down) does not count.
    assert sched.remove_worker("s2") == [Requeued("t", "s2", 1, False)]
    sched.add_worker("s3", 1, pool=Pool.SPOT)
    assert sched.assign() == [Assignment("t", "s3")]
    assert sched.remove_worker("s3", preempted=True) == [Requeued("t", "s3", 2, True)]
    assert sched.queued_demand() == {Pool.SPOT: 0, Pool.ON_DEMAND: 1}
    sched.add_worker("s4", 4, pool=Pool.SPOT)
    assert sched.assign() == []  # never on Spot again, however much room it has
    sched.submit(task("fresh", 5))
    assert sched.assign() == [Assignment("fresh", "s4")]
    sched.add_worker("od", 1, pool=Pool.ON_DEMAND)
    assert sched.assign() == [Assignment("t", "od")]
    # A preemption reported for an on-demand or local worker is not a Spot attempt.
    assert sched.remove_worker("od", preempted=True) == [Requeued("t", "od", 2, True)]


def test_a_held_task_its_preempted_worker_never_started_is_not_charged_a_preemption():
    """Issue 30 item 8: a preemption is charged to the job that ran on the preempted VM, not
    to the one it only held; two such VMs made a never-started job on-demand only."""
    sched = Scheduler(spot_attempts=2, prefetch=1)
    for name in ("s1", "s2"):
        sched.add_worker(name, 1, pool=Pool.SPOT)
        sched.submit(task(f"run-{name}", 0, family=None, priority=1))
    sched.submit(task("held", 5, family=None))
    assert sched.assign() == [Assignment("run-s1", "s1"), Assignment("run-s2", "s2"),
                              Assignment("held", "s1")]
    assert sched.remove_worker("s1", preempted=True) == [
        Requeued("run-s1", "s1", 1, False), Requeued("held", "s1", 0, False)]
    sched.withdraw("run-s1")
    assert sched.assign() == [Assignment("held", "s2")]  # held again, by the busy s2
    assert sched.remove_worker("s2", preempted=True) == [
        Requeued("run-s2", "s2", 1, False), Requeued("held", "s2", 0, False)]
    assert sched.preemptions("held") == 0 and sched.demand_pool("held") is Pool.SPOT


def test_non_preemptible_tasks_never_run_on_spot():
    sched = Scheduler(spot_attempts=5)
    sched.add_worker("spot", 8, pool=Pool.SPOT)
    sched.submit(task("pinned", 0, preemptible=False))
    assert sched.assign() == []
    assert sched.queued_demand() == {Pool.SPOT: 0, Pool.ON_DEMAND: 1}
    sched.add_worker("local", 1, pool=Pool.LOCAL)
    assert sched.assign() == [Assignment("pinned", "local")]


def test_zero_spot_attempts_means_on_demand_from_the_start():
    sched = Scheduler(spot_attempts=0)
    sched.add_worker("spot", 1, pool=Pool.SPOT)
    sched.submit(task("t", 0))
    assert sched.assign() == []


def test_a_task_s_own_spot_attempts_override_the_run_s():
    """A CWL tool's expo:Preemptible hint: its jobs move on-demand after their own count."""
    sched = Scheduler(spot_attempts=5)
    sched.submit(task("once", 0, spot_attempts=1))
    sched.submit(task("default", 1))
    sched.add_worker("s1", 2, pool=Pool.SPOT)
    assert sorted(a.key for a in sched.assign()) == ["default", "once"]
    assert sched.remove_worker("s1", preempted=True) == [Requeued("once", "s1", 1, True),
                                                         Requeued("default", "s1", 1, False)]
    sched.add_worker("s2", 2, pool=Pool.SPOT)
    assert sched.assign() == [Assignment("default", "s2")]  # "once" waits for on-demand
    sched.submit(task("never", 2, spot_attempts=0))
    assert sched.assign() == []
    assert sched.queued_demand() == {Pool.SPOT: 0, Pool.ON_DEMAND: 2}


def test_big_tasks_wait_while_smaller_ones_fill_the_slots():
    sched = Scheduler()
    sched.add_worker("w", 2, mem_mb=1000)
    sched.submit(task("big", 0, cpus=3))
    sched.submit(task("fat", 1, mem_mb=2000))
    sched.submit(task("small", 2, cpus=1, mem_mb=600))
    sched.submit(task("small2", 3, cpus=1, mem_mb=600))
    assert sched.assign() == [Assignment("small", "w")]
    assert sched.workers() == {"w": (2, 1)}
    assert sched.state("big") == sched.state("fat") == sched.state("small2") == "queued"
    sched.finish("small", Outcome.SOLVED)
    assert sched.assign() == [Assignment("small2", "w")]


def test_best_fit_prefers_the_fullest_worker_that_holds_the_task():
    sched = Scheduler()
    sched.add_worker("roomy", 8)
    sched.add_worker("snug", 2)
    sched.submit(task("a", 0, cpus=2))
    sched.submit(task("b", 1, cpus=2))
    assert sched.assign() == [Assignment("a", "snug"), Assignment("b", "roomy")]


def test_a_persisted_frontier_skips_dominated_tasks_at_submission():
    frontier = Frontier()
    frontier.add(point(2, 2), "earlier run: n=2, m=2")
    sched = Scheduler(frontiers={"f": frontier})
    (event,) = sched.submit(task("hard", 3, 2))
    assert event == Skipped("hard", frontier.points[0], on_arrival=True)
    assert sched.submit(task("easy", 1, 5)) == []
    assert sched.counts()["skipped"] == 1 and sched.counts()["queued"] == 1


def test_withdraw_releases_the_slot_and_returns_the_worker():
    sched = Scheduler()
    sched.add_worker("w", 1)
    sched.submit(task("a", 0))
    sched.submit(task("b", 1))
    sched.assign()
    assert sched.withdraw("a") == "w"
    assert sched.withdraw("b") is None
    assert sched.withdraw("a") is None and sched.withdraw("nobody") is None
    assert sched.finish("a", Outcome.SOLVED) == []
    assert sched.assign() == []
    assert sched.workers() == {"w": (1, 1)}
    assert sched.outcomes == {"a": Outcome.FAILED, "b": Outcome.FAILED}


def test_submitting_a_key_twice_is_refused():
    sched = Scheduler()
    sched.submit(task("a", 0))
    with pytest.raises(ValueError):
        sched.submit(task("a", 1))


def test_adding_a_busy_worker_again_does_not_lose_its_tasks():
    sched = Scheduler()
    sched.add_worker("w", 2)
    sched.submit(task("a", 0))
    sched.assign()
    with pytest.raises(ValueError):
        sched.add_worker("w", 2)
    assert sched.running_on("w") == {"a"}
    assert sched.remove_worker("w") == [Requeued("a", "w", 0, False)]
    sched.add_worker("idle", 1)
    sched.add_worker("idle", 3, pool=Pool.ON_DEMAND)  # an idle worker may re-register
    assert sched.workers() == {"idle": (3, 3)}


def test_counts_cover_every_state():
    sched = Scheduler()
    sched.add_worker("w", 2)
    for i in range(5):
        sched.submit(task(f"t{i}", i))
    sched.assign()
    sched.finish("t0", Outcome.SOLVED)
    sched.finish("t1", Outcome.FAILED)
    counts = sched.counts()
    assert counts == {"queued": 3, "running": 0, "solved": 1, "failed": 1, "timeout": 0,
                      "skipped": 0, "model-skipped": 0}
    assert sum(counts.values()) == 5


def test_straggler_rule_keeps_queued_tasks_off_spot():
    sched = Scheduler()
    sched.add_worker("spot", 2, pool=Pool.SPOT)
    sched.submit(task("a", 0))
    sched.submit(task("b", 1))
    assert sched.assign(allow_spot=False) == []
    sched.add_worker("od", 1, pool=Pool.ON_DEMAND)
    assert sched.assign(allow_spot=False) == [Assignment("a", "od")]
    assert sched.assign() == [Assignment("b", "spot")]


# -- confirming a family's first timeout (--expocloud-confirm-timeouts) ---------------------------

def _confirming_run() -> Scheduler:
    """Two one-CPU workers; n1 times out on w1 while w2 runs n0."""
    sched = Scheduler(confirm_timeouts=True)
    sched.add_worker("w1", 1)
    sched.add_worker("w2", 1)
    for n in (1, 0, 2, 3):
        sched.submit(task(f"n{n}", n))
    assert sched.assign() == [Assignment("n0", "w1"), Assignment("n1", "w2")]
    return sched


def test_a_first_timeout_prunes_nothing_and_reruns_first_on_an_idle_other_worker():
    sched = _confirming_run()
    assert sched.finish("n1", Outcome.TIMEOUT) == [Confirming("n1", "w2")]
    assert sched.state("n1") == "queued" and sched.state("n2") == "queued"
    assert "f" not in sched.frontiers
    # w2 is idle but ran it already; w1 is busy: the re-run waits, w2 takes other work
    assert sched.assign() == [Assignment("n2", "w2")]
    sched.finish("n0", Outcome.SOLVED)
    assert sched.assign() == [Assignment("n1", "w1")]  # ahead of n3


def test_a_timeout_confirmed_by_its_rerun_prunes_and_trusts_its_family():
    sched = _confirming_run()
    sched.finish("n1", Outcome.TIMEOUT)
    sched.finish("n0", Outcome.SOLVED)
    assert sched.assign() == [Assignment("n1", "w1"), Assignment("n2", "w2")]
    events = sched.finish("n1", Outcome.TIMEOUT)
    assert events[0] == Finished("n1", Outcome.TIMEOUT, harder=2, first_timeout_on="w2")
    assert {(type(e), e.key) for e in events[1:]} == {(Cancel, "n2"), (Skipped, "n3")}
    sched.submit(task("m0", 0, family="f", scope=("other",)))
    assert sched.assign() == [Assignment("m0", "w1")]
    assert [type(e) for e in sched.finish("m0", Outcome.TIMEOUT)] == [Finished]  # trusted


def test_a_rerun_that_is_solved_prunes_nothing_and_names_the_slow_worker():
    sched = _confirming_run()
    sched.finish("n1", Outcome.TIMEOUT)
    sched.finish("n0", Outcome.SOLVED)
    assert sched.assign()[0] == Assignment("n1", "w1")
    assert sched.finish("n1", Outcome.SOLVED) == [
        Finished("n1", Outcome.SOLVED, first_timeout_on="w2")]
    assert "f" not in sched.frontiers and sched.state("n3") == "queued"


def test_without_another_worker_a_first_timeout_prunes_as_before():
    sched = Scheduler(confirm_timeouts=True)
    sched.add_worker("solo", 1)
    for n in (1, 2):
        sched.submit(task(f"n{n}", n))
    sched.assign()
    assert sched.finish("n1", Outcome.TIMEOUT) == [Confirming("n1", "solo")]
    assert sched.assign() == []  # solo never runs a job twice, and no other worker exists
    events = sched.take_unconfirmed()
    assert events[0] == Unconfirmed("n1", "solo")
    assert events[1] == Finished("n1", Outcome.TIMEOUT, harder=1, first_timeout_on="solo")
    assert sched.state("n1") == "timeout" and sched.state("n2") == "skipped"


def test_confirmation_is_off_by_default():
    sched = Scheduler()
    sched.add_worker("w", 1)
    sched.submit(task("n1", 1))
    sched.submit(task("n2", 2))
    sched.assign()
    assert [type(e) for e in sched.finish("n1", Outcome.TIMEOUT)] == [Finished, Skipped]


# -- jobs in flight on an adopted run's worker (coordinator/adopt.py) -----------------------------

def test_an_adopted_task_runs_on_its_old_worker_which_gets_nothing_else():
    sched = Scheduler()
    assert sched.adopt(task("n3", 3), "old/w1") == []
    sched.submit(task("n1", 1))
    assert sched.assign() == []  # the adopted worker is never placed on
    assert sched.state("n3") == "running" and sched.counts()["running"] == 1
    sched.add_worker("w", 1)
    assert sched.assign() == [Assignment("n1", "w")]
    assert sched.finish("n3", Outcome.SOLVED) == [Finished("n3", Outcome.SOLVED)]
    sched.submit(task("n2", 2))
    assert sched.assign() == []  # its end freed no CPU anywhere: w still runs n1
    assert sched.workers()["old/w1"] == (0, 0)


def test_an_adopted_timeout_prunes_and_a_dominated_adopted_task_is_cancelled():
    sched = Scheduler()
    sched.add_worker("w", 1)
    sched.adopt(task("n1", 1), "old/w1")
    sched.adopt(task("n4", 4), "old/w2")
    sched.submit(task("n2", 2))
    sched.submit(task("n0", 0))
    assert sched.assign() == [Assignment("n0", "w")]
    events = sched.finish("n1", Outcome.TIMEOUT)
    assert events[0] == Finished("n1", Outcome.TIMEOUT, harder=2)
    assert {(type(e), e.key, getattr(e, "worker_id", None)) for e in events[1:]} == \
        {(Cancel, "n4", "old/w2"), (Skipped, "n2", None)}
    # a task adopted after the timeout is cancelled at once
    [cancel] = sched.adopt(task("n5", 5), "old/w2")
    assert cancel.key == "n5" and cancel.worker_id == "old/w2"
    assert sched.cancelled("n4")[0] == Skipped("n4", cancel.dominator, killed=True)


def test_an_adopted_worker_that_dies_requeues_its_tasks_here():
    sched = Scheduler()
    sched.adopt(task("n1", 1), "old/w1")
    sched.adopt(task("n2", 2), "old/w1")
    events = sched.remove_worker("old/w1", preempted=True)
    assert [(type(e), e.key) for e in events] == [(Requeued, "n1"), (Requeued, "n2")]
    sched.add_worker("w", 2)
    assert {a.key for a in sched.assign()} == {"n1", "n2"}


def test_a_timeout_from_outside_the_run_prunes_what_it_dominates():
    sched = Scheduler()
    sched.add_worker("w", 1)
    for n in (0, 2, 3):
        sched.submit(task(f"n{n}", n))
    assert sched.assign() == [Assignment("n0", "w")]
    events = sched.add_timeout("f", task("x", 1).point, "x")
    assert {(type(e), e.key) for e in events} == {(Skipped, "n2"), (Skipped, "n3")}
    assert sched.add_timeout("f", task("y", 2).point, "y") == []  # covered already
    assert sched.state("n0") == "running"


# -- prefetch: a busy worker holds its next task (Scheduler(prefetch=1)) -------------------------

def test_a_busy_worker_holds_its_next_task_and_starts_it_as_a_slot_frees():
    sched = Scheduler(prefetch=1)
    sched.add_worker("a", 1)
    sched.add_worker("b", 1)
    for n in range(6):
        sched.submit(task(f"n{n}", n, family=None))
    # free slots first (n0, n1), then one held task per worker, easiest first
    assert sched.assign() == [Assignment("n0", "a"), Assignment("n1", "b"),
                              Assignment("n2", "a"), Assignment("n3", "b")]
    assert sched.counts()["running"] == 2 and sched.counts()["queued"] == 4
    assert sched.workers() == {"a": (1, 0), "b": (1, 0)}
    sched.finish("n0", Outcome.SOLVED)  # a starts n2 itself: it is running now
    assert sched.running_on("a") == {"n2"}
    assert sched.assign() == [Assignment("n4", "a")]  # and holds the next one
    sched.finish("n3", Outcome.SOLVED)  # a result of a held task: its worker started it
    sched.finish("n1", Outcome.SOLVED)
    assert sched.running_on("b") == set() and sched.workers()["b"] == (1, 1)
    assert sched.assign() == [Assignment("n5", "b")]


def test_a_held_task_is_cancelled_by_the_domino_effect_and_requeued_with_its_worker():
    sched = Scheduler(prefetch=1)
    sched.add_worker("a", 1)
    sched.add_worker("b", 1)
    for n in (1, 2, 3, 4):
        sched.submit(task(f"n{n}", n))
    sched.assign()  # a: n1 (+ n3 held), b: n2 (+ n4 held)
    events = sched.finish("n1", Outcome.TIMEOUT)
    assert {(type(e), e.key, getattr(e, "worker_id", None)) for e in events[1:]} == \
        {(Cancel, "n2", "b"), (Cancel, "n3", "a"), (Cancel, "n4", "b")}
    assert sched.running_on("a") == {"n3"} and sched.state("n3") == "cancelling"  # started
    assert not sched.cancelled("n3", ran=False)[0].killed, "held, never started: not killed"
    requeued = sched.remove_worker("b")
    assert {e.key for e in requeued} == {"n2", "n4"}  # cancelling: skipped as killed
    assert all(isinstance(e, Skipped) for e in requeued)


def test_a_cancelled_task_its_worker_ran_is_killed():
    sched = Scheduler(prefetch=0)
    sched.add_worker("a", 1)
    sched.add_worker("b", 1)
    for n in (1, 2):
        sched.submit(task(f"n{n}", n))
    sched.assign()
    sched.finish("n1", Outcome.TIMEOUT)
    assert sched.cancelled("n2")[0].killed


def test_held_tasks_go_back_to_the_queue_when_their_worker_is_lost():
    sched = Scheduler(prefetch=1)
    sched.add_worker("a", 1)
    for n in (1, 2):
        sched.submit(task(f"n{n}", n, family=None))
    assert len(sched.assign()) == 2
    events = sched.remove_worker("a", preempted=True)
    assert [(type(e), e.key) for e in events] == [(Requeued, "n1"), (Requeued, "n2")]
    sched.add_worker("b", 2)
    assert {a.key for a in sched.assign()} == {"n1", "n2"}


def test_with_prefetch_two_or_more_a_worker_is_refilled_only_when_low_then_in_full():
    sched = Scheduler(prefetch=3)
    sched.add_worker("a", 2)
    for n in range(20):
        sched.submit(task(f"n{n}", n, family=None, cpus=1))
    assert [a.key for a in sched.assign()] == [f"n{n}" for n in range(8)]  # 2 run, 6 held
    sched.finish("n0", Outcome.SOLVED)  # n2 starts: 5 CPUs held, more than its 2
    sched.finish("n1", Outcome.SOLVED)
    sched.finish("n2", Outcome.SOLVED)
    assert sched.assign() == [], "3 held CPUs > 2: not refilled yet"
    sched.finish("n3", Outcome.SOLVED)  # 2 held CPUs: low
    assert sched.running_on("a") == {"n4", "n5"}
    assert [a.key for a in sched.assign()] == [f"n{n}" for n in range(8, 12)], \
        "filled up to cpus * prefetch (6 held) in the same round"
    assert sched.counts()["queued"] == 20 - 8 - 4 + 6
    assert sched.assign() == []


def test_refill_on_low_counts_held_cpus_not_tasks():
    sched = Scheduler(prefetch=2)
    sched.add_worker("a", 2)
    for n, (key, cpus) in enumerate((("big", 2), ("h1", 1), ("h2", 2), ("h3", 1))):
        sched.submit(task(key, n, family=None, cpus=cpus))
    assert [a.key for a in sched.assign()] == ["big", "h1", "h2", "h3"]  # 4 CPUs held
    sched.finish("big", Outcome.SOLVED)  # h1 starts; h2 (2 CPUs) waits for both
    assert sched.running_on("a") == {"h1"}
    for key in ("h4", "h5"):
        sched.submit(task(key, 9, family=None))
    # the free CPU takes h4; h2 and h3 are two tasks but three CPUs: not low yet
    assert [a.key for a in sched.assign()] == ["h4"]


def test_the_queues_last_tasks_are_spread_over_the_workers_not_held_by_the_first():
    """Refill in full would hand the queue's last tasks to the first worker that ran low,
    while the others, about to run low too, would find nothing left: each worker refilled
    takes at most its share of the queue (here 2 tasks for 4 workers: one)."""
    sched = Scheduler(prefetch=4)
    for name in "abcd":
        sched.add_worker(name, 1)
    for n in range(22):
        sched.submit(task(f"n{n}", n, family=None))
    assert len(sched.assign()) == 20  # each runs one and holds four; two tasks left
    a_jobs = ["n0", *[f"n{n}" for n in range(4, 20, 4)]]  # a's, in the order it runs them
    for key in a_jobs[:4]:
        sched.finish(key, Outcome.SOLVED)  # a holds one now: low
    assert [(x.key, x.worker_id) for x in sched.assign()] == [("n20", "a")]
    sched.finish("n1", Outcome.SOLVED)
    for key in ("n5", "n9", "n13"):
        sched.finish(key, Outcome.SOLVED)  # b is low too, and finds the last task
    assert [(x.key, x.worker_id) for x in sched.assign()] == [("n21", "b")]


def test_prefetch_leaves_the_queue_to_workers_still_booting():
    """Two tasks, two one-slot VMs, one ready: holding the second task on the busy first
    worker would leave the second VM idle and run the two one after the other."""
    sched = Scheduler(prefetch=1)
    sched.add_worker("a", 1)
    for n in (0, 1):
        sched.submit(task(f"n{n}", n, family=None))
    assert sched.assign(coming={None: 1}) == [Assignment("n0", "a")], "n1 held by busy a"
    sched.add_worker("b", 1)
    assert sched.assign(coming={}) == [Assignment("n1", "b")]


def test_only_the_queue_beyond_the_coming_cpus_is_held_easiest_first():
    sched = Scheduler(prefetch=2)
    sched.add_worker("a", 1)
    for n in range(5):
        sched.submit(task(f"n{n}", n, family=None))
    # one runs; of four queued, two stay for the two coming CPUs: a holds the two easiest
    assert [x.key for x in sched.assign(coming={None: 2})] == ["n0", "n1", "n2"]
    assert sum(sched.queued_demand().values()) == 2, "n3 and n4 wait for the coming CPUs"


def test_coming_cpus_of_another_shape_do_not_stop_holding():
    big = Shape(machine_type="n2-standard-8")
    sched = Scheduler(prefetch=1)
    sched.add_worker("a", 1)
    for n in (0, 1):
        sched.submit(task(f"n{n}", n, family=None))
    assert len(sched.assign(coming={big: 8})) == 2


# -- taking a held task back (Release) ------------------------------------------------------
def held_on_a(*tasks: Task) -> Scheduler:
    """One-slot worker ``a`` runs the first task and holds the second; the rest are queued."""
    sched = Scheduler(prefetch=1)
    sched.add_worker("a", 1)
    for item in tasks:
        sched.submit(item)
    assert [x.key for x in sched.assign()] == [tasks[0].key, tasks[1].key]
    return sched


def test_a_new_worker_asks_back_an_easier_held_task_instead_of_starting_a_harder_one():
    """The CI failure of the CWL sweep on emulated GCE: a worker came up while another held
    the easier brute points behind a long job, and started the hardest at once."""
    sched = held_on_a(task("x1", 1), task("x2", 2), task("x3", 3))
    sched.add_worker("b", 1)
    assert sched.assign() == [], "x3 would start before x2, whose timeout prunes it"
    assert sched.take_releases() == [Release("x2", "a", 1)]
    assert sched.workers()["b"] == (1, 0), "b's slot waits for x2: b is not idle"
    assert sched.assign() == [] and sched.take_releases() == [], "asked once, still waiting"
    assert sched.released("x2", "a", 1)
    assert sched.assign()[0] == Assignment("x2", "b")
    assert sched.running_on("b") == {"x2"} and sched.running_on("a") == {"x1"}


def test_an_idle_worker_asks_back_a_held_task_when_the_queue_has_none_for_it():
    sched = held_on_a(task("n0", 0, family=None), task("n1", 1, family=None))
    sched.add_worker("b", 1)
    assert sched.assign() == [] and sched.take_releases() == [Release("n1", "a", 1)]
    assert sched.released("n1", "a", 1)
    assert sched.assign() == [Assignment("n1", "b")]


def test_a_harder_task_its_held_neighbours_cannot_prune_starts_at_once():
    """Another family's held task (or none) is no reason to wait: the queue's task starts,
    and nothing is asked back (the worker is not idle)."""
    sched = held_on_a(task("x1", 1), task("x2", 2), task("y9", 9, family="g"))
    sched.add_worker("b", 1)
    assert sched.assign() == [Assignment("y9", "b")]
    assert sched.take_releases() == []


def test_a_held_task_asked_back_that_its_worker_started_first_ends_as_usual():
    sched = held_on_a(task("x1", 1), task("x2", 2), task("x3", 3))
    sched.add_worker("b", 1)
    sched.assign()
    sched.finish("x1", Outcome.SOLVED)  # a's slot freed before it read the request
    assert sched.running_on("a") == {"x2"}
    assert sched.finish("x2", Outcome.SOLVED) == [Finished("x2", Outcome.SOLVED)]
    assert not sched.released("x2", "a", 1), "no answer can undo a result"
    assert [x.key for x in sched.assign()] == ["x3"], "nothing waits for x2 any more"


def test_an_answer_from_another_worker_or_to_no_request_changes_nothing():
    sched = held_on_a(task("x1", 1), task("x2", 2), task("x3", 3))
    assert not sched.released("x2", "a", 1), "never asked back"
    sched.add_worker("b", 1)
    sched.assign()
    assert not sched.released("x2", "b", 1)
    assert not sched.released("x2", "a", 2), "an answer to no request made"
    assert sched.state("x2") == "running" and sched.counts()["queued"] == 2


def test_a_held_task_asked_back_and_then_dominated_is_cancelled_not_requeued():
    sched = held_on_a(task("x1", 1), task("x2", 2), task("x3", 3))
    sched.add_worker("b", 1)
    sched.assign()
    events = sched.finish("x1", Outcome.TIMEOUT)
    assert {(type(e), e.key) for e in events[1:]} == {(Cancel, "x2"), (Skipped, "x3")}
    assert sched.state("x2") == "cancelling"  # the coordinator asks this before ``released``
    skipped = sched.cancelled("x2", ran=False)
    assert [(type(e), e.key, e.killed) for e in skipped] == [(Skipped, "x2", False)]
    assert not sched.released("x2", "a", 1)
    assert sched.assign() == [] and sched.workers()["b"] == (1, 1), "b waits no more"


def test_a_worker_lost_while_its_held_task_is_asked_back_requeues_it_once():
    sched = held_on_a(task("x1", 1), task("x2", 2), task("x3", 3))
    sched.add_worker("b", 1)
    sched.assign()
    sched.remove_worker("a")
    assert not sched.released("x2", "a", 1), "its answer comes too late: x2 is queued again"
    assert [x.key for x in sched.assign()] == ["x1", "x2"], "x1 runs on b, x2 held there"
    assert sched.running_on("b") == {"x1"} and sched.counts()["queued"] == 2


def test_a_task_asked_back_again_is_given_back_only_by_an_answer_to_the_new_request():
    """Issue 30 item 1: x2 is given back, held on a again (b, that asked, is gone) and asked
    back again for c: the answer to the first request, replayed, is no answer to the second."""
    sched = held_on_a(task("x1", 1), task("x2", 2), task("x3", 3))
    sched.add_worker("b", 1)
    sched.assign()
    assert sched.take_releases() == [Release("x2", "a", 1)]
    assert sched.released("x2", "a", 1)
    sched.remove_worker("b")
    assert sched.assign() == [Assignment("x2", "a")], "held on a again"
    sched.add_worker("c", 1)
    assert sched.assign() == [] and sched.take_releases() == [Release("x2", "a", 2)]
    assert not sched.released("x2", "a", 1), "a stale answer"
    assert sched.state("x2") == "running" and sched.workers()["c"] == (1, 0)
    assert sched.released("x2", "a", 2)
    assert sched.assign()[0] == Assignment("x2", "c")


def test_a_held_tasks_place_moves_held_releasing_and_back_to_queued_on_one_record():
    sched = held_on_a(task("x1", 1), task("x2", 2), task("x3", 3))
    assert sched.place("x1") == Place(Stage.RUNNING, "a")
    assert sched.place("x2") == Place(Stage.HELD, "a") and sched.state("x2") == "running"
    sched.add_worker("b", 1)
    sched.assign()
    assert sched.place("x2") == Place(Stage.RELEASING, "a", request=1)
    sched.finish("x1", Outcome.SOLVED)  # a's slot frees: it may have started x2
    assert sched.running_on("a") == {"x2"} and sched.place("x2").stage is Stage.RELEASING
    assert sched.released("x2", "a", 1) and sched.place("x2") == Place()
    assert sched.running_on("a") == set() and sched.workers()["a"] == (1, 1)


def test_set_prefetch_deepens_and_shallows_what_a_worker_holds():
    sched = Scheduler(prefetch=1)
    sched.add_worker("a", 1)
    for n in range(20):
        sched.submit(task(f"n{n}", n, family=None))
    assert [a.key for a in sched.assign()] == ["n0", "n1"]  # one runs, one held
    sched.set_prefetch(4)
    assert [a.key for a in sched.assign()] == ["n2", "n3", "n4"], "held up to 4 now"
    sched.set_prefetch(2)
    for key in ("n0", "n1"):  # n1 then n2 start: n3 and n4 held, the new depth
        sched.finish(key, Outcome.SOLVED)
    assert sched.assign() == [], "two held: not below the new depth of 2"
    sched.finish("n2", Outcome.SOLVED)  # n3 starts: one held, low
    assert [a.key for a in sched.assign()] == ["n5"]


@pytest.mark.parametrize("prefetch", [0, 1])
def test_prefetch_below_two_refills_after_every_task(prefetch):
    sched = Scheduler(prefetch=prefetch)
    sched.add_worker("a", 2)
    for n in range(10):
        sched.submit(task(f"n{n}", n, family=None))
    assert len(sched.assign()) == 2 + 2 * prefetch
    sched.finish("n0", Outcome.SOLVED)
    assert [a.key for a in sched.assign()] == [f"n{2 + 2 * prefetch}"]


def test_without_prefetch_nothing_is_held():
    sched = Scheduler()
    sched.add_worker("a", 1)
    for n in (1, 2):
        sched.submit(task(f"n{n}", n, family=None))
    assert sched.assign() == [Assignment("n1", "a")]
