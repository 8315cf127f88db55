"""A head start for the first VMs: the CPUs the jobs Snakemake can run now will want, per
(shape, pool), before it submits any of them.

Why: between the executor's start and its first job Snakemake still selects jobs (for a sweep
of 5,000 points, seconds of resource evaluation), and only a submitted job used to make the
coordinator create a VM; boot then came on top. Told what is coming, the coordinator's first
round creates the VMs at once (``Scheduler.expect``), and the real queue takes over at the first
submission.

Only the jobs ready now count (their inputs exist, so their resources may be evaluated; a
summary of the sweep waits for its own submission), judged by the describer on one job per rule
with every ready job's hardness point checked (``JobDescriber.needs``): bad annotations are then
refused before any worker starts, as they would be at the first submission. Left out: a rule
Snakemake runs in its own process (``localrules``), group jobs (sized for their whole group when
submitted), and, once an earlier run recorded timeouts, a rule with hardness (its jobs may all
be skipped on arrival). A wrong guess costs little: a VM that gets no job is deleted at the
idle timeout, as any idle VM is.

GCE only: the ready jobs are still checked on the local engine (bad input refused as early), but
its workers start when the first job comes, as before: a local worker starts in about a second
and costs nothing. (A local head start once made Snakemake's test_protected_symlink_output fail:
a worker ready early forked its workflow's template beside the first job, and the template's
load of the Snakefile, which creates a file when parsed, undid the job's removal of its old
output. Templates are now born in their first job (worker/workflow_template.py), so that is no
longer a reason; a local head start was not tried again.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from expo_executor.core.scheduler import Pool
from expo_executor.core.shapes import Shape
from expo_executor.frontends.snakemake.describe import JobDescriber

Demand = dict[tuple[Shape | None, Pool], int]


def first_wave(workflow: Any) -> dict[Any, list[Any]]:
    """The jobs Snakemake can run now (its DAG's ready jobs, set as the DAG was built), by
    rule; group jobs left out."""
    by_rule: dict[Any, list[Any]] = {}
    for job in getattr(workflow.dag, "ready_jobs", None) or ():
        if not job.is_group():
            by_rule.setdefault(job.rule, []).append(job)
    return by_rule


def planned_demand(ready: dict[Any, list[Any]], is_local: Callable[[Any], bool],
                   describer: JobDescriber, known_timeouts: bool = False) -> Demand:
    """CPUs per (shape, demand pool) of the ``ready`` jobs (by rule), as the describer sizes
    them. Raises ExpoError on a bad annotation (see the module)."""
    demand: Demand = {}
    for rule, jobs in sorted(ready.items(), key=lambda item: item[0].name):
        if is_local(rule):
            continue
        needs = describer.needs(jobs)
        if known_timeouts and needs.spec is not None:
            continue
        pool = Pool.SPOT if needs.preemptible else Pool.ON_DEMAND
        demand[(needs.shape, pool)] = demand.get((needs.shape, pool), 0) + needs.cpus * len(jobs)
    return demand
