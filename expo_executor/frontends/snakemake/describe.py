"""From a Snakemake job to what the core needs: key, hardness point, deadline, CPUs.

Hardness and deadlines come from the job's resources, so a profile can add them to an existing
pipeline (``set-resources: {solve: {hardness: "...", deadline: "5m"}}``) without touching the
Snakefile. The standard ``runtime`` resource (minutes) is a deadline too; ``deadline`` is finer.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from expo_executor.coordinator.state import FamilyRef
from expo_executor.core.errors import ExpoError
from expo_executor.core.hardness import HardnessSpec, parse_duration
from expo_executor.core.records import HardnessMeta, JobMeta
from expo_executor.core.scheduler import Task
from expo_executor.frontends.base import find_misfit

HARDNESS = "hardness"
DEADLINE = "deadline"
RUNTIME = "runtime"
PREEMPTIBLE = "expocloud_preemptible"  # 0: this rule's jobs run on on-demand VMs only


@dataclass(frozen=True)
class JobDescription:
    task: Task
    deadline_s: float | None
    family: FamilyRef | None
    meta: JobMeta


@lru_cache(maxsize=256)
def _spec(text: str, setting: str) -> HardnessSpec:
    return HardnessSpec.parse(text, setting)


class JobDescriber:
    """Describes jobs of one workflow (identified by its Snakefile's path)."""

    def __init__(self, workflow: str) -> None:
        self.workflow = workflow

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

    def describe(self, job, slots_per_worker: int, worker_mem_mb: int = 0) -> JobDescription:
        """Raises ExpoError (naming the rule's resource and the fix) on bad annotations, or on
        a job no worker can hold (``worker_mem_mb`` 0: memory not tracked)."""
        rule = self.rule(job)
        wildcards = self.wildcards(job)
        deadline = self._deadline(job, rule)
        cpus = max(1, int(job.threads))
        if find_misfit(cpus, 0, slots_per_worker, 0):
            raise ExpoError(f"threads of rule '{rule}'",
                            f"it needs {cpus} threads but workers have {slots_per_worker} slots",
                            f"set --expocloud-slots-per-worker {cpus} or lower the rule's threads")
        spec_text = None if job.is_group() else job.resources.get(HARDNESS)
        point = family = None
        if spec_text is not None:
            setting = f"resource '{HARDNESS}' of rule '{rule}'"
            spec = _spec(str(spec_text), setting)
            point = spec.point(wildcards, setting)
            if deadline is not None:
                family = FamilyRef(self.workflow, rule, spec.text, deadline)
        mem = job.resources.get("mem_mb", 0)
        mem = int(mem) if isinstance(mem, (int, float)) else 0
        if find_misfit(1, mem, slots_per_worker, worker_mem_mb):
            raise ExpoError(f"resource 'mem_mb' of rule '{rule}'",
                            f"it needs {mem} MB but workers have {worker_mem_mb} MB",
                            "lower the rule's mem_mb, or give workers more memory "
                            "(--expocloud-gce-machine-type)")
        preemptible = job.resources.get(PREEMPTIBLE, 1)
        if str(preemptible) not in ("0", "1", "True", "False"):
            raise ExpoError(f"resource '{PREEMPTIBLE}' of rule '{rule}'",
                            f"{preemptible!r} is not 0 or 1",
                            f"set {PREEMPTIBLE}=0 to keep the rule off Spot VMs, 1 (default) "
                            "to allow them")
        task = Task(
            key=_key(job), label=self.label(job), family=family.key if family else None,
            point=point if family else None, cpus=cpus,
            mem_mb=mem,
            priority=int(getattr(job, "priority", 0) or 0) if not job.is_group() else 0,
            preemptible=str(preemptible) in ("1", "True"),
        )
        hardness = None if point is None or spec_text is None else HardnessMeta(
            _spec(str(spec_text), HARDNESS).text,
            tuple(d.name for d in _spec(str(spec_text), HARDNESS).dimensions),
            tuple(point.vector), tuple(point.scope))
        meta = JobMeta(rule, wildcards, tuple(str(o) for o in job.output), hardness,
                       attempt=int(job.attempt))
        return JobDescription(task, deadline, family, meta)

    @staticmethod
    def _deadline(job, rule: str) -> float | None:
        if job.resources.get(DEADLINE) is not None:
            return parse_duration(job.resources.get(DEADLINE),
                                  f"resource '{DEADLINE}' of rule '{rule}'")
        runtime = job.resources.get(RUNTIME)
        if runtime is None:
            return None
        setting = f"resource '{RUNTIME}' of rule '{rule}'"
        if isinstance(runtime, (int, float)) and not isinstance(runtime, bool):
            if runtime <= 0:
                raise ExpoError(setting, f"{runtime!r} minutes is not positive",
                                "give a positive number of minutes, or a 'deadline' like 90s")
            return float(runtime) * 60.0
        return parse_duration(runtime, setting)


def _key(job) -> str:
    """Unique per job and attempt, and safe as a bucket object name."""
    if job.is_group():
        return f"g{str(job.jobid).replace('-', '')[:12]}a{job.attempt}"
    return f"j{job.jobid}a{job.attempt}"
