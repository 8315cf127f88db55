"""The runtime model's hooks in the scheduler: the queue's order by predicted runtime, the model
skip (``skip_above``), feeding each finished task to its family's model, and the probe rule.
Part of :class:`~expo_executor.core.scheduler.Scheduler`, whose table it reads and changes.

Order. A task of a family with a model is queued by ``model_rank``, before its hardness key:
- with a declared order, by ``RuntimeModel.rank`` alone. The model is monotone in the declared
  dimensions (its rank depends only on the dimensions and the scope's non-noise columns, and is
  made monotone over them), so a task as easy as another never ranks after it, and ties fall to
  the hardness key: the queue stays a linear extension of the declared order. The one exception
  is where the data disagrees with the order beyond doubt (``disagreements``): there the data
  orders, and the domino effect leaves the disputed tasks alone (``_disputed``);
- with no declared order, by (wave, rank): a task's wave is its place among the jobs of its
  group (every parameter but the last noise column, ``ModelSpec.group``), so one job of every
  group runs before a second of any; and a second waits while its group's first runs (the probe
  rule, :meth:`_waits_for_probe`), since the first tells the model what the group costs.

Cost. Predictions move only when the model learns: a task's group after each finish (only that
group's queued tasks are ranked again), every task after a refit (``RuntimeModel.version``),
which the model schedules as its observations grow by a fraction, not per finish. A re-ranked
task is pushed again; its old heap entry is stale (its order differs) and is dropped when met.

Skip. With a threshold P, a queued task (never a running one) whose ``p_exceed`` of its
deadline is >= P is skipped (``ModelSkipped``), once its family's model is trusted: it has seen
``trust_after`` finished tasks. Predictions are looked at when they move (a finish of the group,
a refit) and when a task arrives. The threshold is the task's family's (``Task.skip``: a CWL
tool's hint, carried by each of its tasks), else the run's ``skip_above``; the skip records the
one that applied (``ModelSkipped.rule``), so that its sentence names the setting to change.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping

from expo_executor.core.records import Outcome
from expo_executor.core.runtime_model import RuntimeModel, RuntimeObservation
from expo_executor.core.tasks import Event, ModelSkipped, SkipRule, Task, TaskEntry

Group = tuple[str, tuple[tuple[str, str], ...]]  # (family, ModelSpec.group)


class ModelHooks:
    """The scheduler's part that consults runtime models."""

    outcomes: dict[str, Outcome]
    _entries: dict[str, TaskEntry]
    _queued: set[str]
    _queue: list[tuple[tuple, str]]
    _dequeue: Callable[[str], None]

    def _init_models(self, models: Mapping[str, RuntimeModel] | None,
                     skip_above: float | None, trust_after: int) -> None:
        if skip_above is not None and not 0.0 < skip_above <= 1.0:
            raise ValueError(f"skip_above {skip_above} is not a probability in (0, 1]")
        self.models: dict[str, RuntimeModel] = dict(models or {})
        self.skip_above = skip_above
        self.trust_after = trust_after
        self._versions: dict[str, int] = {}  # family -> model version the ranks were made at
        self._members: dict[Group, list[str]] = {}  # a group's tasks, by submission
        self._by_family: dict[str, list[str]] = {}  # a family's tasks, for a refit's re-rank
        self._probes: dict[Group, str] = {}  # a group's first started task
        self._seen: set[Group] = set()  # groups with a finished task
        self._group_keys: dict[str, Group] = {}  # task key -> its group, made once
        # heap entries set aside while their group's probe runs (the probe rule)
        self._parked: dict[Group, list[tuple[tuple, str]]] = {}

    def queued_keys(self) -> list[str]:
        """The queued tasks (for an estimate of what the rest will cost)."""
        return sorted(self._queued)

    def _model_of(self, task: Task) -> RuntimeModel | None:
        return self.models.get(task.family) if task.family is not None else None

    def _group_of(self, task: Task, model: RuntimeModel) -> Group:
        group = self._group_keys.get(task.key)
        if group is None:
            group = self._group_keys[task.key] = (task.family or "",
                                                  model.spec.group(task.params))
        return group

    def _model_arrival(self, entry: TaskEntry) -> ModelSkipped | None:
        """A new task: its wave and rank, or its skip when the model already rules it out."""
        model = self._model_of(entry.task)
        if model is None:
            return None
        family = entry.task.family or ""
        self._versions.setdefault(family, model.version)  # a later refit re-ranks (_feed)
        members = self._members.setdefault(self._group_of(entry.task, model), [])
        members.append(entry.task.key)
        self._by_family.setdefault(family, []).append(entry.task.key)
        entry.model_rank = self._rank(entry, model, len(members) - 1)
        skip = self._model_skip(entry, model)
        if skip is not None:
            self.outcomes[entry.task.key] = Outcome.MODEL_SKIPPED
        return skip

    def _rank(self, entry: TaskEntry, model: RuntimeModel, wave: int) -> tuple:
        rank = model.rank(entry.task.params)
        return (rank,) if model.spec.ordered is not None else (wave, rank)

    def skip_rule(self, task: Task) -> SkipRule | None:
        """The threshold that applies to ``task``: its family's own, else the run's."""
        if task.skip is not None:
            return task.skip
        return SkipRule(self.skip_above) if self.skip_above is not None else None

    def _model_skip(self, entry: TaskEntry, model: RuntimeModel) -> ModelSkipped | None:
        task = entry.task
        rule = self.skip_rule(task)
        if rule is None or task.deadline_s is None or model.observations < self.trust_after:
            return None
        prediction = model.predict(task.params, task.deadline_s)
        if prediction.p_exceed < rule.above:
            return None
        return ModelSkipped(task.key, prediction.p_exceed, prediction, rule)

    def _feed(self, entry: TaskEntry, outcome: Outcome, runtime_s: float | None) -> list[Event]:
        """A task ended: its model learns (a timeout censored at the deadline), and the tasks
        whose prediction moved are ranked again and, if trusted and over their threshold,
        skipped."""
        task = entry.task
        model = self._model_of(task)
        if model is None:
            return []
        if outcome is Outcome.SOLVED and runtime_s is not None:
            model.observe(RuntimeObservation(task.params, max(runtime_s, 0.0), True))
        elif outcome is Outcome.TIMEOUT and (task.deadline_s or runtime_s) is not None:
            seconds = task.deadline_s if task.deadline_s is not None else runtime_s
            model.observe(RuntimeObservation(task.params, float(seconds or 0.0), False))
        else:
            return []
        family, group = task.family or "", self._group_of(task, model)
        self._seen.add(group)
        if self._versions.get(family) != model.version:
            return self._rerank(self._by_family.get(family, []), family)
        return self._rerank(self._members.get(group, []), family)

    def _rerank(self, keys: list[str], family: str) -> list[Event]:
        """Rank ``keys``' queued tasks again (pushing those whose rank moved) and skip those
        the model now rules out. Drops decided tasks from ``keys`` as it goes. The jobs of a
        group differ only in their last noise column, so the model is asked once per group."""
        model = self.models[family]
        self._versions[family] = model.version
        events: list[Event] = []
        waves: dict[Group, int] = {}
        asked: dict[Group, tuple[float, ModelSkipped | None]] = {}
        still = [k for k in keys if k not in self.outcomes]
        keys[:] = still
        for key in still:
            entry = self._entries[key]
            group = self._group_of(entry.task, model)
            wave = waves[group] = waves.get(group, -1) + 1
            if key not in self._queued:
                continue
            if group not in asked:
                asked[group] = (model.rank(entry.task.params), self._model_skip(entry, model))
            rank, skip = asked[group]
            if skip is not None:
                self._dequeue(key)
                self.outcomes[key] = Outcome.MODEL_SKIPPED
                events.append(ModelSkipped(key, skip.probability, skip.prediction, skip.rule))
                continue
            ranked = (rank,) if model.spec.ordered is not None else (wave, rank)
            if ranked != entry.model_rank:
                entry.model_rank = ranked
                heapq.heappush(self._queue, (entry.order(), key))
        return events

    def _parks(self, order: tuple, key: str) -> bool:
        """With no declared order, a group's second task waits while its first runs and no
        task of the group has finished (the first says what the group costs): its heap entry
        is set aside until then (:meth:`_unpark`), so that waiting tasks cost no scan."""
        entry = self._entries[key]
        model = self._model_of(entry.task)
        if model is None or model.spec.ordered is not None:
            return False
        group = self._group_of(entry.task, model)
        if not self._probe_runs(group, key):
            return False
        self._parked.setdefault(group, []).append((order, key))
        return True

    def _probe_runs(self, group: Group, key: str) -> bool:
        if group in self._seen:
            return False
        probe = self._probes.get(group)
        if probe is None or probe == key:
            return False
        return probe not in self.outcomes and self._entries[probe].worker_id is not None

    def _unpark(self) -> None:
        """Back to the queue: the tasks of groups whose probe no longer runs (it finished,
        or was skipped, withdrawn or re-queued)."""
        for group in [g for g in self._parked if not self._probe_runs(g, "")]:
            for item in self._parked.pop(group):
                heapq.heappush(self._queue, item)

    def _started(self, entry: TaskEntry) -> None:
        """A task was placed on a worker: the first of its group is the group's probe."""
        model = self._model_of(entry.task)
        if model is not None:
            self._probes.setdefault(self._group_of(entry.task, model), entry.task.key)

    def _disputed(self, task: Task) -> bool:
        """Does the trusted model say the declared order is wrong where ``task`` is? Then no
        timeout's domino effect skips or cancels it."""
        model = self._model_of(task)
        return model is not None and model.observations >= self.trust_after \
            and model.disputes(task.params)
