"""From a Snakemake job to its ``JobRequest``: what the core needs (key, hardness point,
deadline, CPUs), and the command the executor gives it, in one spec.

Hardness and deadlines come from the job's resources, so a profile can add them to an existing
pipeline (``set-resources: {solve: {hardness: "...", deadline: "5m"}}``) without touching the
Snakefile; so do the runtime model's noise wildcards (``hardness_noise: "seed,instance"``, else
the run's ``--expocloud-hardness-noise``). The standard ``runtime`` resource (minutes) is a
deadline too; ``deadline`` is finer.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Mapping, Sequence

from expo_executor.coordinator.shapes import (GCE_LABELS, GPU_MODEL, GPU_TYPE, MACHINE_TYPE,
                                              THREADS, ShapeBook)
from expo_executor.coordinator.state import FamilyRef
from expo_executor.core.errors import ExpoError
from expo_executor.core.hardness import HardnessSpec, parse_duration
from expo_executor.core.records import HardnessMeta, JobMeta
from expo_executor.core.runtime_model import ModelSpec
from expo_executor.core.scheduler import Task
from expo_executor.core.shapes import Shape
from expo_executor.coordinator.requests import JobRequest
from expo_executor.core.shapes import find_misfit
from expo_executor.frontends.base import job_request
from expo_executor.settings.values import noise_columns

HARDNESS = "hardness"
HARDNESS_NOISE = "hardness_noise"  # wildcards the runtime model treats as noise (seed, ...)
DEADLINE = "deadline"
RUNTIME = "runtime"
PREEMPTIBLE = "expocloud_preemptible"  # 0: this rule's jobs run on on-demand VMs only
# Resources a profile gives as words (set-resources: {rule: {machine_type: e2-standard-4}}):
# Snakemake keeps them as expressions for each job, but a constant one is known at planning.
PLANNED_WORDS = (MACHINE_TYPE, GPU_TYPE, GPU_MODEL, GCE_LABELS)
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*")
# what a bare word means to Snakemake's evaluation instead of itself
_NAMES = frozenset({"wildcards", "input", "attempt", "threads", "system_tmpdir", "shutil",
                    "async_run", *dir(builtins)})


@lru_cache(maxsize=256)
def _spec(text: str, setting: str) -> HardnessSpec:
    return HardnessSpec.parse(text, setting)


@dataclass(frozen=True)
class Fleet:
    """What every worker of the run holds, and what a job asking for more threads gets."""

    slots: int  # CPU slots per worker
    mem_mb: int = 0  # memory per worker for its jobs; 0: not tracked
    # Local engine: a job asking for more threads or memory than a worker has runs with what
    # it has, as under plain Snakemake (threads scaled down to --cores; mem_mb a hint unless
    # --resources caps it); on GCE such a job gets a machine of its own (ShapeBook.fit), or,
    # when the user set the slots per worker, is refused.
    shrink_to_fit: bool = False


@dataclass(frozen=True)
class _Annotations:
    deadline_s: float | None
    spec: HardnessSpec | None
    cpus: int
    mem_mb: int
    preemptible: bool
    shape: Shape | None = None


class JobDescriber:
    """Describes jobs of one workflow (identified by its Snakefile's path) for one fleet."""

    def __init__(self, workflow: str, fleet: Fleet,
                 log: Callable[[str], None] = lambda line: None,
                 shapes: ShapeBook | None = None,
                 measured_on: Callable[[Shape | None], tuple[str, str]] | None = None,
                 noise: tuple[str, ...] = ()) -> None:
        self.workflow = workflow
        self.noise = noise  # the run's noise wildcards (a rule's hardness_noise overrides)
        # (engine, machine) a job of a shape is timed on: part of its frontier's key
        self.measured_on = measured_on or (lambda shape: ("local", ""))
        self.fleet = fleet
        self.log = log
        self.shapes = shapes  # per-rule machines (GCE); None: every job on the run's own
        self._said: set[str] = set()  # what was shrunk to fit, logged once per rule
        self._orders: dict[Any, Callable[[str], object] | None] = {}  # rule -> order_values

    @staticmethod
    def rule(job) -> str:
        return f"group {job.groupid}" if job.is_group() else job.name

    @staticmethod
    def wildcards(job) -> dict[str, str]:
        if job.is_group():
            return {}
        return {str(k): str(v) for k, v in dict(job.wildcards_dict).items()}

    def label(self, job) -> str:
        wildcards = self.wildcards(job)
        spec_text = job.resources.get(HARDNESS) if not job.is_group() else None
        if spec_text:
            try:
                return f"{self.rule(job)} {_spec(str(spec_text), HARDNESS).describe(wildcards)}"
            except ExpoError:
                pass
        inner = ", ".join(f"{k}={v}" for k, v in wildcards.items())
        return f"{self.rule(job)} {{{inner}}}" if inner else self.rule(job)

    def check_rule(self, rule: str, values: Mapping[str, object]) -> None:
        """Check a rule's annotations that are values (the Snakefile's or the profile's
        ``set-resources``) before any worker starts; ``values`` leaves out resources given as
        functions, which only the job can evaluate (they may read files earlier jobs make)."""
        threads = values.get(THREADS, 1)
        self._annotations(rule, values.get, threads if isinstance(threads, int) else 1)

    def needs(self, jobs: Sequence) -> _Annotations:
        """What the ready jobs of one rule will need, for the head start (head_start.py):
        judged on the first one's resources (a ready job's inputs exist, so a resource function
        may run now), each job's hardness point checked. Raises ExpoError as :meth:`describe`
        would, so that bad annotations are refused before any worker starts."""
        first = jobs[0]
        notes = self._annotations(first.name, first.resources.get, max(1, int(first.threads)))
        if notes.spec is not None:
            setting = f"resource '{HARDNESS}' of rule '{first.name}'"
            for job in jobs:
                notes.spec.point(self.wildcards(job), setting)
        return notes

    def describe(self, job, argv: list[str], cwd: str | None, env: dict[str, str],
                 **more: Any) -> JobRequest:
        """The job's request, built here once (``frontends.base.job_request``: its task, its
        spec with the command ``argv`` run in ``cwd`` with ``env``, its family and meta;
        ``more``: the spec's and request's other fields). Raises ExpoError (naming the rule's
        resource and the fix) on bad annotations, or on a job no worker can hold."""
        rule = self.rule(job)
        wildcards = self.wildcards(job)
        resources = job.resources
        get = (lambda name: None if name == HARDNESS else resources.get(name)) \
            if job.is_group() else resources.get
        notes = self._annotations(rule, get, max(1, int(job.threads)))
        point = family = None
        if notes.spec is not None:
            point = notes.spec.point(wildcards, f"resource '{HARDNESS}' of rule '{rule}'")
            if notes.deadline_s is not None:
                family = FamilyRef(self.workflow, rule, notes.spec.text, notes.deadline_s,
                                   *self.measured_on(notes.shape))
        task = Task(
            key=_key(job), label=self.label(job), family=family.key if family else None,
            point=point if family else None, cpus=notes.cpus, mem_mb=notes.mem_mb,
            priority=int(getattr(job, "priority", 0) or 0) if not job.is_group() else 0,
            preemptible=notes.preemptible, shape=notes.shape,
            params=dict(wildcards) if family else {},
            deadline_s=notes.deadline_s if family else None,
        )
        hardness = None if point is None or notes.spec is None else HardnessMeta(
            notes.spec.text, tuple(d.name for d in notes.spec.dimensions),
            tuple(point.vector), tuple(point.scope))
        meta = JobMeta(rule, wildcards, tuple(str(o) for o in job.output), hardness,
                       attempt=int(job.attempt))
        spec = None if family is None or notes.spec is None else ModelSpec(
            noise_columns(get(HARDNESS_NOISE)) or self.noise, notes.spec)
        return job_request(task, argv, cwd, env, notes.deadline_s, family=family, meta=meta,
                           model_spec=spec, **more)

    def order(self, job) -> tuple:
        """Where the coordinator's queue puts ``job`` among new ones (``TaskEntry.order``):
        higher priority first, then, for a rule with a deadline, easier first. A group, or an
        annotation only :meth:`describe` can judge (it raises there, naming the fix), sorts as
        no hardness. Snakemake's job selection hands jobs over in this order (job_selection.py),
        having ordered every ready job: the rule's annotations are read as the rule gives them
        (:func:`order_values`), so that a job's other resources are evaluated only when the
        selection looks at it; a rule whose annotations are functions has its jobs evaluated."""
        neutral: tuple = (0.0, ())
        if job.is_group():
            return (0, neutral)
        priority = -int(getattr(job, "priority", 0) or 0)
        rule = job.rule
        if rule not in self._orders:
            self._orders[rule] = order_values(rule)
        get = self._orders[rule] or job.resources.get
        try:
            spec_text = get(HARDNESS)
            if spec_text is None or _deadline(get, job.name) is None:
                return (priority, neutral)
            point = _spec(str(spec_text), HARDNESS).point(self.wildcards(job), HARDNESS)
        except ExpoError:
            return (priority, neutral)
        return (priority, point.sort_key())

    def _annotations(self, rule: str, get: Callable[[str], object],
                     threads: int) -> _Annotations:
        deadline = _deadline(get, rule)
        spec_text = get(HARDNESS)
        spec = None if spec_text is None else \
            _spec(str(spec_text), f"resource '{HARDNESS}' of rule '{rule}'")
        mem = get("mem_mb")
        mem = int(mem) if isinstance(mem, (int, float)) else 0
        shape = self.shapes.shape_of(rule, get, max(1, threads), mem) if self.shapes else None
        if shape is None:
            cpus, mem = self._cpus(rule, threads), self._mem_mb(rule, mem)
        else:
            cpus = self._fit_shape(rule, shape, max(1, threads), mem)
        preemptible = get(PREEMPTIBLE)
        preemptible = 1 if preemptible is None else preemptible
        if str(preemptible) not in ("0", "1", "True", "False"):
            raise ExpoError(f"resource '{PREEMPTIBLE}' of rule '{rule}'",
                            f"{preemptible!r} is not 0 or 1",
                            f"set {PREEMPTIBLE}=0 to keep the rule off Spot VMs, 1 (default) "
                            "to allow them")
        return _Annotations(deadline, spec, cpus, mem, str(preemptible) in ("1", "True"), shape)

    def _fit_shape(self, rule: str, shape: Shape, threads: int, mem: int) -> int:
        """A job's threads and memory against its own machine; the CPUs it takes there."""
        assert self.shapes is not None
        size = self.shapes.size(shape)
        misfit = find_misfit(threads, mem, size.slots, size.mem_mb)
        if misfit is None:
            return threads
        what = "threads" if misfit.resource == "cpus" else "MB"
        setting = f"threads of rule '{rule}'" if misfit.resource == "cpus" else \
            f"resource 'mem_mb' of rule '{rule}'"
        raise ExpoError(setting, f"it needs {misfit.needed} {what} but its machine, "
                        f"{shape.describe()}, has {misfit.have} (the largest machine of this "
                        f"run: {self.shapes.largest()})", f"give rule '{rule}' a larger "
                        f"'{MACHINE_TYPE}' (or auto), or lower its {misfit.resource}")

    def _cpus(self, rule: str, threads: int) -> int:
        cpus = max(1, threads)
        if not find_misfit(cpus, 0, self.fleet.slots, 0):
            return cpus
        if not self.fleet.shrink_to_fit:
            # on GCE only without per-rule machines (rule_machines: a machine is chosen)
            largest = f" (the largest machine of this run: {self.shapes.largest()})" \
                if self.shapes else ""
            machine = f"give rule '{rule}' a '{MACHINE_TYPE}' resource that holds it (or " \
                "auto), " if self.shapes else ""
            raise ExpoError(f"threads of rule '{rule}'",
                            f"it needs {cpus} threads but workers have {self.fleet.slots} slots"
                            f"{largest}", f"{machine}set --expocloud-slots-per-worker {cpus} or "
                            f"lower the rule's threads")
        self._once(f"threads of {rule}", f"rule '{rule}' asks for {cpus} threads; local workers "
                   f"have {self.fleet.slots}: its jobs run with {self.fleet.slots}, as plain "
                   "Snakemake scales threads down to the cores it has")
        return self.fleet.slots

    def _mem_mb(self, rule: str, mem: int) -> int:
        if not find_misfit(1, mem, self.fleet.slots, self.fleet.mem_mb):
            return mem
        if not self.fleet.shrink_to_fit:
            raise ExpoError(f"resource 'mem_mb' of rule '{rule}'",
                            f"it needs {mem} MB but workers have {self.fleet.mem_mb} MB",
                            "lower the rule's mem_mb, or give workers more memory "
                            "(--expocloud-gce-machine-type)" + (
                                f", or give rule '{rule}' a '{MACHINE_TYPE}' resource that "
                                "holds it" if self.shapes else ""))
        self._once(f"mem_mb of {rule}", f"rule '{rule}' asks for {mem} MB; this machine has "
                   f"{self.fleet.mem_mb} MB for jobs: its jobs run anyway, one at a time, as "
                   "plain Snakemake runs them without --resources mem_mb")
        return self.fleet.mem_mb

    def _once(self, what: str, line: str) -> None:
        """Log ``line`` the first time ``what`` happens in this run."""
        if what not in self._said:
            self._said.add(what)
            self.log(f"expocloud: {line}")


def _deadline(get: Callable[[str], object], rule: str) -> float | None:
    if get(DEADLINE) is not None:
        return parse_duration(get(DEADLINE), f"resource '{DEADLINE}' of rule '{rule}'")
    runtime = get(RUNTIME)
    if runtime is None:
        return None
    setting = f"resource '{RUNTIME}' of rule '{rule}'"
    if isinstance(runtime, (int, float)) and not isinstance(runtime, bool):
        if runtime <= 0:
            raise ExpoError(setting, f"{runtime!r} minutes is not positive",
                            "give a positive number of minutes, or a 'deadline' like 90s")
        return float(runtime) * 60.0
    return parse_duration(runtime, setting)


def rule_values(rule) -> dict[str, object]:
    """A Snakemake rule's resources (threads as ``_cores``) that are values, after the
    profile's ``set-resources`` and ``set-threads``; resources given as functions are left out,
    for only a job can evaluate them."""
    values = {}
    for name, resource in rule.resources.items():
        value = _as_given(resource, words=name in PLANNED_WORDS)
        if value is not _JOBS_ONLY:
            values[name] = value
    return values


ORDER_WORDS = (HARDNESS, DEADLINE, RUNTIME)  # what a job's place in the queue depends on


def order_values(rule) -> Callable[[str], object] | None:
    """The rule's :data:`ORDER_WORDS` as every job of it will have them, without evaluating a
    job: each one the rule gives as a value or as a constant of the profile (``'a, n'``,
    ``90s``), or not at all; None when one is a function or an expression only a job can
    evaluate."""
    found: dict[str, object] = {}
    given = dict(rule.resources.items())
    for name in ORDER_WORDS:
        if name in given:
            found[name] = _as_given(given[name], words=True)
            if found[name] is _JOBS_ONLY:
                return None
    return found.get


_JOBS_ONLY = object()  # a resource only a job can evaluate


def _as_given(resource: Any, words: bool) -> object:
    """A rule's resource as every job of it will have it: a value, or (``words``) a constant
    of the profile (:func:`_constant`); ``_JOBS_ONLY`` for a function or an expression."""
    evaluable = getattr(resource, "is_evaluable", None)
    if evaluable is None:  # a Snakemake whose resources are plain values and callables
        return _JOBS_ONLY if callable(resource) else resource
    if not evaluable():
        return resource.value
    word = _constant(getattr(resource, "raw", None)) if words else None
    return word if word else _JOBS_ONLY


def _constant(expression: object) -> str | None:
    """A profile's word (``e2-standard-4``, ``'auto'``, ``team=ml,project=x``) as Snakemake
    will evaluate it for every job: a quoted string, text that is no Python expression (which
    Snakemake's evaluation keeps as it is, on its SyntaxError), or a bare word that is no Python
    name; None for anything else."""
    if not isinstance(expression, str):
        return None
    try:
        value = ast.literal_eval(expression)
    except SyntaxError:
        return expression
    except ValueError:
        return expression if _WORD.fullmatch(expression) \
            and expression.split(".")[0] not in _NAMES else None
    return value if isinstance(value, str) else None


def identity(job) -> str:
    """What names this job in any run of the workflow: its rule and sorted output files (a
    group job's: its members'), hashed. Unlike its key (``j<jobid>``), which a rerun numbers
    afresh, a rerun's job of the same rule and outputs gets the same identity (harvest.py)."""
    members = job.jobs if job.is_group() else [job]
    text = json.dumps(sorted([member.name, sorted(str(o) for o in member.output)]
                             for member in members))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _key(job) -> str:
    """Unique per job and attempt, and safe as a bucket object name."""
    if job.is_group():
        return f"g{str(job.jobid).replace('-', '')[:12]}a{job.attempt}"
    return f"j{job.jobid}a{job.attempt}"
