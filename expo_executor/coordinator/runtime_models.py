"""The run's runtime models: one per family (rule, spec, deadline, engine and machine: the
frontier's own key), built on the family's first job by a factory the launch chose, started
from what the family's earlier runs learned, and saved beside its frontier so that a rerun
starts informed.

The factory is named by ``--expocloud-hardness-model``: 'learned' is ``expo_executor.learned``'s
model (a library's, imported here lazily and only then, so a run without a model never loads
it); ``module:attribute`` is a callable of the user's own, ``(ModelSpec, saved dict or None)
-> RuntimeModel``. The book also keeps each job's prediction as it was taken in (before the
model learned of its end): the job's record carries it, for the report's predicted-against-actual
table. The estimate of what is left is picked here, in one place (:meth:`ModelBook.estimate`).
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Mapping
from typing import Any

from expo_executor.coordinator.estimates import DrawnEstimate, FamilyLeft
from expo_executor.coordinator.persist import Persister
from expo_executor.coordinator.requests import JobRequest
from expo_executor.coordinator.state import FamilyRef, StateDir
from expo_executor.core.errors import ExpoError
from expo_executor.core.remaining import JobLeft, Remaining, remaining
from expo_executor.core.runtime_model import ModelSpec, Pending, RuntimeModel, RuntimePrediction

ModelFactory = Callable[[ModelSpec, Mapping[str, Any] | None], RuntimeModel]
SETTING = "--expocloud-hardness-model"
SAVE_EVERY_S = 60.0  # while the run goes on: a crash loses at most this much of what it learned


def factory_of(name: str) -> ModelFactory | None:
    """The factory ``name`` means (None for 'none'); raises ExpoError, before anything
    starts, when it cannot be loaded."""
    if name == "none":
        return None
    if name == "learned":
        try:
            learned = importlib.import_module("expo_executor.learned")
        except ImportError as exc:
            raise ExpoError(SETTING, f"the learned model cannot be loaded ({exc})",
                            "install the package with its model extra, or set "
                            f"{SETTING} none") from None
        found = getattr(learned, "model_factory", None)
        if not callable(found):
            raise ExpoError(SETTING, "expo_executor.learned has no model_factory",
                            f"set {SETTING} none, or report this as a bug")
        return found
    module, _, attribute = name.partition(":")
    try:
        found = getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as exc:
        raise ExpoError(SETTING, f"cannot load {name!r} ({exc})",
                        "name an importable module:attribute, or use learned or none") from None
    if not callable(found):
        raise ExpoError(SETTING, f"{name!r} is not callable", "name a model factory")
    return found


class ModelBook:
    """The run's models by family key, and each job's prediction as it was taken in."""

    def __init__(self, factory: ModelFactory, state: StateDir, persist: Persister,
                 skip_above: float | None = None, drawn: DrawnEstimate | None = None) -> None:
        self.factory = factory
        self.state = state
        self.persist = persist
        self.skip_above = skip_above
        self.models: dict[str, RuntimeModel] = {}
        self._refs: dict[str, FamilyRef] = {}
        self.predictions: dict[str, RuntimePrediction] = {}
        self._saved = 0.0  # when the models were last saved
        self.drawn = drawn or DrawnEstimate()
        self._taken = 0  # jobs taken in: new ones call for a new estimate

    def take_in(self, request: JobRequest) -> RuntimeModel | None:
        """The model of the job's family (built on its first job, from the saved one), and
        the job's prediction noted; None for a job of no family or with no deadline."""
        family, task = request.family, request.task
        if family is None or task.family is None or task.deadline_s is None:
            return None
        model = self.models.get(task.family)
        if model is None:
            spec = request.model_spec or ModelSpec()
            model = self.models[task.family] = self.factory(spec, self.state.load_model(family))
            self._refs[task.family] = family
        self._taken += 1
        prediction = model.predict(dict(task.params), task.deadline_s)
        if not math.isnan(prediction.median_s):  # NaN: the model knows nothing yet
            self.predictions[task.key] = prediction
        return model

    def save(self, now: float | None = None) -> None:
        """Each model's state beside its frontier (through the persister: retried if the disk
        fails), for the next run of the family to start from: at once (``now`` None: the end
        of the run), else once :data:`SAVE_EVERY_S` has passed since the last save (a big
        model's state is not written every status interval)."""
        if now is not None:
            if now - self._saved < SAVE_EVERY_S:
                return
            self._saved = now
        for key, model in self.models.items():
            ref, data = self._refs[key], model.to_dict()
            self.persist.write(f"the runtime model of {key}",
                               lambda ref=ref, data=data: self.state.save_model(ref, data),
                               {"family": key})

    def estimate(self, left: Mapping[str, float | None], requests: Mapping[str, JobRequest],
                 slots: int, slot_hour_usd: float, now: float = 0.0) -> Remaining | None:
        """What is left of the jobs ``left`` (key -> seconds running so far, None queued); None
        when nothing is known of it yet. The one place that picks how: when every model draws
        it whole (the learned one), its joint draws, the estimate the replay validated,
        recomputed off the thread after the models move (``estimates``); else each job's
        prediction as taken in, summed as independent (``core.remaining``)."""
        if self.models and all(callable(getattr(m, "remaining_draws", None))
                               for m in self.models.values()):
            return self._drawn(left, requests, slots, slot_hour_usd, now)
        jobs = [JobLeft(self.predictions[key], requests[key].task.deadline_s,
                        requests[key].task.cpus, elapsed or 0.0)
                for key, elapsed in left.items() if key in self.predictions]
        return remaining(jobs, slots, slot_hour_usd) if jobs else None

    def _drawn(self, left: Mapping[str, float | None], requests: Mapping[str, JobRequest],
               slots: int, slot_hour_usd: float, now: float) -> Remaining | None:
        """The drawn estimate: asked for again when a model has refitted, jobs came in, or the
        jobs left have fallen by a tenth (a draw's totals then hold many jobs since done)."""
        if not any(model.version for model in self.models.values()):
            return None  # no model has fitted yet: nothing to draw from
        counted = {key: elapsed for key, elapsed in left.items()
                   if requests[key].task.family in self.models}
        key = (tuple(sorted((name, m.version) for name, m in self.models.items())),
               self._taken, round(math.log1p(len(counted)) / math.log(1.1)))  # 10% fewer left
        if self.drawn.wanted(key, now):
            by_family: dict[str, tuple[Any, list[Pending]]] = {}
            for job, elapsed in counted.items():
                task = requests[job].task
                by_family.setdefault(task.family or "", (task, []))[1].append(
                    Pending(dict(task.params), elapsed or 0.0, elapsed is not None))
            families = [FamilyLeft(self.models[name], tuple(jobs), first.deadline_s or 0.0,
                                   first.cpus, first.skip.above if first.skip is not None
                                   else self.skip_above)
                        for name, (first, jobs) in by_family.items()]
            self.drawn.recompute(key, now, families)
        running = {job: (elapsed, requests[job].task.cpus) for job, elapsed in counted.items()
                   if elapsed is not None}
        return self.drawn.current(len(counted), running, now, slots, slot_hour_usd)
