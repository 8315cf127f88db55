"""The rules Snakemake plans to run, read once before the run and before any worker: their
resources that are values (a resource function waits for its job: it may read a file an earlier
job makes), the machine types 'auto' chooses for them, and the refusals that are better said
now than on every worker (a conda:, container: or envmodules: directive the GCE image is not
said to provide).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any, NamedTuple

from snakemake_interface_executor_plugins.settings import DeploymentMethod

from expo_executor.coordinator.launch import resolve_machine_types
from expo_executor.coordinator.settings import ExecutorSettings
from expo_executor.coordinator.shapes import AUTO, GPU_MODEL, GPU_TYPE, MACHINE_TYPE
from expo_executor.coordinator.state import StateDir
from expo_executor.core.errors import ExpoError
from expo_executor.core.records import EngineName
from expo_executor.engines.gce.settings import worker_provides
from expo_executor.frontends.snakemake.describe import THREADS, rule_values

# (deployment method, the Rule attribute holding its directive, the directive as written)
SOFTWARE_DIRECTIVES = ((DeploymentMethod.CONDA, "conda_env", "conda:"),
                       (DeploymentMethod.APPTAINER, "container_img", "container:"),
                       (DeploymentMethod.ENV_MODULES, "env_modules", "envmodules:"))


class PlannedRule(NamedTuple):
    """A rule Snakemake plans to run: its resources that are values, and its number of jobs."""

    values: dict[str, object]
    jobs: int


# Snakemake's Rule objects, keyed as the workflow's DAG gives them
Planned = dict[Any, PlannedRule]


def planned_rules(workflow: Any, given_cores: int | None) -> Planned:
    """Each rule Snakemake plans to run: (its resources that are values, threads capped as
    Snakemake caps a job's, its number of planned jobs). Listed once, before the run; no
    job's resources are evaluated (a resource function may read a file an earlier job
    makes)."""
    needrun = getattr(workflow.dag, "needrun_jobs", None)
    counts = Counter(job.rule for job in (needrun() if needrun else []))
    max_threads = workflow.resource_settings.max_threads
    return {rule: PlannedRule(capped_rule_values(rule, max_threads, given_cores), jobs)
            for rule, jobs in sorted(counts.items(), key=lambda item: item[0].name)}


def capped_rule_values(rule: Any, max_threads: int | None,
                       given_cores: int | None) -> dict[str, object]:
    """The rule's resources that are values, its threads capped as Snakemake caps a job's
    (``--max-threads``, and ``--cores``, which limits threads even for remote jobs)."""
    values = rule_values(rule)
    caps = [c for c in (max_threads, given_cores) if isinstance(c, int)]
    if isinstance(values.get(THREADS), int) and caps:
        values[THREADS] = min(values[THREADS], *caps)
    return values


def _shape(values: dict[str, object]) -> tuple[int, int, float | None]:
    """(threads, mem_mb, runtime in s) of a rule, where it gives them as values."""
    threads, mem_mb, runtime = values.get(THREADS), values.get("mem_mb"), values.get("runtime")
    return (max(1, threads) if isinstance(threads, int) else 1,
            mem_mb if isinstance(mem_mb, int) else 0,
            float(runtime) * 60 if isinstance(runtime, (int, float)) else None)


def resolve_auto_machine_types(settings: ExecutorSettings, planned: Planned, state: StateDir,
                               log: Callable[[str], None]) -> ExecutorSettings:
    """'auto' machine types, chosen for the planned jobs' rules (threads, mem_mb, runtime
    where the rule gives them as values: a function waits for its job)."""
    shapes = []
    for values, jobs in planned.values():
        if any(values.get(name) for name in (MACHINE_TYPE, GPU_TYPE, GPU_MODEL)):  # its own
            continue
        shapes += [_shape(values)] * jobs
    return resolve_machine_types(settings, shapes, state,
                                 {rule.name for rule in planned} or None, log)


def auto_rules(planned: Planned) -> dict[str, tuple[int, int, float | None]]:
    """The rules whose ``machine_type`` resource is 'auto', with (threads, mem_mb, runtime
    in s) for the choice of their machine."""
    return {rule.name: _shape(values) for rule, (values, _) in planned.items()
            if values.get(MACHINE_TYPE) == AUTO}


def software_fix(method: DeploymentMethod) -> str:
    """How to lift the refusal of a deployment method on GCE."""
    if method == DeploymentMethod.ENV_MODULES:
        return ("run it on the local engine, or install the tools in an image "
                "(--expocloud-gce-image with --expocloud-gce-worker-software image) and drop "
                "the method")
    return (f"use an image that has {method.item_to_choice()} (--expocloud-gce-image) and say "
            f"so with --expocloud-gce-worker-provides {method.item_to_choice()}, or run it on "
            "the local engine")


def check_software(settings: ExecutorSettings, methods: Any, planned: Planned) -> None:
    """GCE workers run the host's pinned environment and what their image provides: a
    planned rule whose conda:, container: or envmodules: directive Snakemake is told to
    deploy (``methods``) is refused here, before any VM, unless
    --expocloud-gce-worker-provides says the image has the tool (conda, apptainer), rather
    than failing on every worker."""
    if settings.engine != EngineName.GCE:
        return
    provided = worker_provides(settings)
    for method, attribute, directive in SOFTWARE_DIRECTIVES:
        using = [r.name for r in planned if getattr(r, attribute, None)]
        if method in methods and using and method.item_to_choice() not in provided:
            raise ExpoError(
                f"--software-deployment-method {method.item_to_choice()}",
                f"rule '{using[0]}' has a {directive} directive, and the GCE worker image "
                f"is not said to provide {method.item_to_choice()}",
                software_fix(method))
