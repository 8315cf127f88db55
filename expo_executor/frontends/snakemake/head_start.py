"""A head start for the first VMs: the CPUs the first jobs Snakemake will submit (those ready
now) will want, per (shape, pool), read from their rules before it submits any.

Why: between the executor's start and its first job Snakemake still selects jobs (for a sweep
of 5,000 points, seconds of resource evaluation), and only a submitted job used to make the
coordinator create a VM; boot then came on top. Told what is coming, the coordinator's first
round creates the VMs at once (``Scheduler.expect``), and the real queue takes over at the first
submission. Only what the rules say as values counts: a rule whose threads, memory or machine
come from a function waits for its jobs (a function may read a file an earlier job makes), and
so does a rule Snakemake runs in its own process (``localrules``), and, once an earlier run
recorded timeouts, a rule with hardness (its jobs may all be skipped on arrival). A wrong guess costs little:
a VM that gets no job is deleted at the idle timeout, as any idle VM is.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from expo_executor.coordinator.shapes import (DISK_MB, GPU, GPU_MODEL, GPU_TYPE, MACHINE_TYPE,
                                              THREADS, ShapeBook)
from expo_executor.core.errors import ExpoError
from expo_executor.core.scheduler import Pool
from expo_executor.core.shapes import Shape
from expo_executor.frontends.snakemake.describe import HARDNESS, PREEMPTIBLE
from expo_executor.frontends.snakemake.planned_rules import Planned

Demand = dict[tuple[Shape | None, Pool], int]
# what a job's machine and pool are chosen from (coordinator/shapes.py, describe.py); others,
# such as Snakemake's default tmpdir (a function of every job), do not matter here
SIZING = (THREADS, "mem_mb", DISK_MB, MACHINE_TYPE, GPU, GPU_TYPE, GPU_MODEL, PREEMPTIBLE)


def first_wave(workflow: Any) -> Counter:
    """The jobs Snakemake can run now (its DAG's ready jobs, set as the DAG was built), by
    rule; a group job waits for its submission (it is sized for its whole group)."""
    ready = getattr(workflow.dag, "ready_jobs", None) or ()
    return Counter(job.rule for job in ready if not job.is_group())


def planned_demand(planned: Planned, ready: Counter, is_local: Callable[[Any], bool], slots: int,
                   shapes: ShapeBook | None, known_timeouts: bool = False) -> Demand:
    """CPUs per (shape, demand pool) of the ``ready`` jobs (by rule) whose rules give their
    needs as values (``planned``: each rule's values; ``slots``: a worker of the run's own
    machine). A job on the run's own workers wants at most its slots, as the describer caps it.
    With ``known_timeouts`` (an earlier run's frontier is stored) a rule with hardness waits for
    its jobs: they may all be skipped on arrival, and a VM booted for them would be wasted."""
    demand: Demand = {}
    for rule, (values, _) in planned.items():
        jobs = ready.get(rule, 0)
        if not jobs or is_local(rule) or not _sized_by_values(rule, values) \
                or (known_timeouts and _has(rule, HARDNESS)):
            continue
        threads = values.get(THREADS)
        threads = max(1, threads) if isinstance(threads, int) else 1
        mem = values.get("mem_mb")
        try:
            shape = shapes.shape_of(rule.name, values.get, threads,
                                    int(mem) if isinstance(mem, (int, float)) else 0) \
                if shapes else None
        except ExpoError:  # said when its first job comes, as without a head start
            continue
        cpus = min(threads, slots) if shape is None else threads
        pool = Pool.ON_DEMAND if str(values.get(PREEMPTIBLE, 1)) in ("0", "False") \
            else Pool.SPOT
        demand[(shape, pool)] = demand.get((shape, pool), 0) + cpus * jobs
    return demand


def _has(rule: Any, resource: str) -> bool:
    """Whether the rule has the resource, as a value or a function (a profile's string is one)."""
    return any(name == resource for name, _ in rule.resources.items())


def _sized_by_values(rule: Any, values: dict[str, object]) -> bool:
    """Whether each resource the rule's machine and pool are chosen from is a value
    (``rule_values`` left out those that are functions)."""
    return all(name in values for name, _ in rule.resources.items() if name in SIZING)
