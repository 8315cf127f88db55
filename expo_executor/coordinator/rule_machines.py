"""The machines a GCE run chooses per rule: a rule's ``machine_type: auto``, and the machine of a
job the run's own workers cannot hold (more threads than their slots, more memory than their
machine), both the type of lowest expected cost per job over the price snapshot
(cost/machine_choice.py), and the ShapeBook that holds them for the run.

Why a job beyond the run's workers gets a machine rather than a refusal: an existing pipeline
(a rule of 3 threads, a pipe group whose jobs run at once) runs on GCE as it is, as it does
locally, with no profile edit per rule. What stays the user's: a rule's own ``machine_type`` (a
type, or auto), and ``--expocloud-slots-per-worker`` when the user sets it (the run's own workers
are then what it describes: the jobs that fit run there, one beyond them gets a machine as
without it). A job no machine type holds (500 threads, 10 TB) is refused before any VM, in one
line.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

from expo_executor.coordinator.settings import ExecutorSettings, worker_memory_mb
from expo_executor.coordinator.shapes import RunMachines, ShapeBook
from expo_executor.coordinator.state import StateDir
from expo_executor.core.errors import ExpoError
from expo_executor.core.hardness import parse_duration
from expo_executor.core.records import EngineName
from expo_executor.cost import machines, preemption_fit, prices
from expo_executor.cost.machine_choice import (Choice, Workload, candidates, choose,
                                               measured_runtimes, workload_of)
from expo_executor.engines.gce.settings import labels, pool_machine_types, regions
from expo_executor.runs.files import read_jsonl

# A rule's machine is at most this large unless its job needs more: expected cost per job
# counts a VM as full, so a larger VM packing more jobs can look cheaper per job while a rule
# of few jobs would pay for it mostly idle (cost.prices.PriceTable.candidates' bound).
USUAL_MAX_VCPUS = 32
ANY_VCPUS = 1 << 20


def shape_book(settings: ExecutorSettings, autos: Mapping[str, tuple[int, int, float | None]],
               state: StateDir, log: Callable[[str], None],
               planned_jobs: Mapping[str, int] | None = None) -> ShapeBook | None:
    """The per-rule machines of a GCE run (None on the local engine, whose workers are this
    machine): the run's own machines, the price snapshot, each ``auto`` rule's machine type,
    the cheapest per job for its (threads, mem_mb, runtime s) in ``autos``, and the choice of
    a machine for a job the run's own workers cannot hold (``planned_jobs``: each rule's
    number of planned jobs, which a VM of the choice can share). Slots per worker the user set
    describe the run's own workers only: a job beyond them gets a machine all the same."""
    if settings.engine != EngineName.GCE:
        return None
    spot, on_demand = pool_machine_types(settings)
    run = RunMachines(spot, on_demand, settings.slots_per_worker,
                      worker_memory_mb(settings, settings.max_workers or 1), settings.gce_disk_gb)
    try:
        table = prices.load(regions(settings)[0])
    except ExpoError:
        table = None  # not priced: said once by the coordinator's own pricing
    rule_machines = {}
    for rule, workload in sorted(autos.items()):
        rule_machines[rule] = _auto_for_rule(settings, rule, workload, state, log)
    return ShapeBook(run, table, priced=settings.budget is not None,
                     rule_machines=rule_machines, gpu_image=settings.gce_gpu_image,
                     run_labels=labels(settings),
                     fit=MachineFit(settings, state, log, dict(planned_jobs or {})))


def _auto_for_rule(settings: ExecutorSettings, rule: str,
                   shape: tuple[int, int, float | None], state: StateDir,
                   log: Callable[[str], None]) -> str:
    """``machine_type: auto`` of one rule: the type with the lowest expected cost per job for
    its threads, memory and runtime (measured in earlier runs of the rule, else its runtime
    resource), on Spot unless the run is on-demand only."""
    pick, workload, table = _cheapest(settings, rule, shape, state)
    log(f"expocloud: machine type auto for rule '{rule}' ({workload.cpus} thread(s), "
        f"{workload.mem_mb} MB, {workload.runtime_s:.0f} s, {workload.runtime_source}): "
        f"{pick.line(_pool(settings))} ({table.label()})")
    return pick.machine_type


def _cheapest(settings: ExecutorSettings, rule: str, shape: tuple[int, int, float | None],
              state: StateDir, exclude: Collection[str] = (),
              jobs: int = 0) -> tuple[Choice, Workload, prices.PriceTable]:
    """The one choice of a rule's machine (``auto``, and a job beyond the run's workers):
    (the Choice, the workload it was made for, the price table). Candidates hold at least 2
    vCPUs (a 1-vCPU worker shares its only core with its job) and at most USUAL_MAX_VCPUS
    unless the job needs more; ``exclude``: types left out; ``jobs``: how many jobs may share
    a VM (0: as many as it holds)."""
    table, models, history = auto_inputs(settings, state)
    workload = dataclasses.replace(workload_of([shape], measured_runtimes(history, {rule})),
                                   jobs=jobs)
    spot = not settings.on_demand_only
    sizes = {t: dims for t in table.candidates(min_vcpus=max(2, shape[0]), max_vcpus=ANY_VCPUS)
             if t not in exclude and (dims := dims_of(t)) is not None}
    least = min((vcpus for vcpus, mem_mb in sizes.values()
                 if vcpus >= shape[0] and mem_mb >= shape[1]), default=0)
    types = [t for t, (vcpus, _) in sizes.items() if vcpus <= max(USUAL_MAX_VCPUS, least)]
    pick = choose(workload, candidates(
        types, dims_of, lambda t: table.hourly(t, spot=spot), models.for_type if spot else None),
        f"resource 'machine_type' of rule '{rule}'")
    return pick, workload, table


def _pool(settings: ExecutorSettings) -> str:
    return "on-demand" if settings.on_demand_only else "Spot"


@dataclass
class MachineFit:
    """The machine type of a job whose threads or memory the run's own workers cannot hold:
    the cheapest per job that holds it (the same choice as ``auto``), or, with no price table
    for the run's region, the smallest standard type that holds it. A VM is counted as shared
    by at most the rule's planned jobs (a group job's, or a rule's not planned: by one), so a
    rule of one job is not given a VM for five. Never the run's own types (their workers have
    the run's slots, which do not hold the job). Raises ExpoError when no type holds the job.
    The ShapeBook calls it once per (rule, threads, mem_mb); each choice is logged in one
    line."""

    settings: ExecutorSettings
    state: StateDir
    log: Callable[[str], None]
    jobs: Mapping[str, int] = field(default_factory=dict)  # rule -> its planned jobs
    own: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        self.own = tuple(sorted(set(pool_machine_types(self.settings))))

    def __call__(self, rule: str, threads: int, mem_mb: int) -> str:
        need = f"{threads} thread(s)" + (f" and {mem_mb} MB" if mem_mb else "")
        try:
            table = prices.load(regions(self.settings)[0])
        except ExpoError as exc:
            types = [t for t in machines.standard_types() if t not in self.own]
            name = machines.smallest(machines.holding(types, threads, mem_mb),
                                     machines.family(self.own[0]))
            if name is None:
                raise no_machine_holds(rule, threads, mem_mb, types) from None
            self.log(f"expocloud: {named(rule)} needs {need}: its jobs run on {name} (the "
                     f"smallest standard type that holds them; no prices to choose by: "
                     f"{exc.problem})")
            return name
        types = [t for t in table.candidates(max_vcpus=ANY_VCPUS) if t not in self.own]
        if not machines.holding(types, threads, mem_mb):
            raise no_machine_holds(rule, threads, mem_mb, types)
        pick, _workload, _table = _cheapest(self.settings, rule, (threads, mem_mb, None),
                                            self.state, self.own, self.jobs.get(rule, 1))
        self.log(f"expocloud: {named(rule)} needs {need}: its jobs run on {pick.machine_type} "
                 f"(cheapest that holds them: {pick.line(_pool(self.settings))}; "
                 f"{table.label()})")
        return pick.machine_type


def named(rule: str) -> str:
    """A rule, or a group job's ``group NAME``, in words."""
    return rule if rule.startswith("group ") else f"rule '{rule}'"


def no_machine_holds(rule: str, threads: int, mem_mb: int, types: Sequence[str]) -> ExpoError:
    """The one-line refusal of a job no machine type holds, naming the rule's setting."""
    most = machines.largest(types)
    if most is None or threads > most[1].vcpus:
        what = f" (the most: {most[0]}, {most[1].vcpus} vCPUs)" if most else ""
        return ExpoError(f"threads of rule '{rule}'", f"it needs {threads} threads, more than "
                         f"any machine type has{what}", "lower the rule's threads (a profile's "
                         "set-threads, or --max-threads)")
    roomiest = machines.largest(machines.holding(types, threads, 0), by_memory=True)
    assert roomiest is not None  # the type of most vCPUs holds the threads
    return ExpoError(f"resource 'mem_mb' of rule '{rule}'", f"it needs {mem_mb} MB, more than "
                     f"any machine type of {threads}+ vCPUs has (the most: {roomiest[0]}, "
                     f"{roomiest[1].memory_mb} MB)", "lower the rule's mem_mb (a profile's "
                     "set-resources)")


def dims_of(machine_type: str) -> tuple[int, int] | None:
    """(vCPUs, MB) of a machine type, as the choice reads them."""
    dims = machines.shape(machine_type)
    return (dims.vcpus, dims.memory_mb) if dims else None


def auto_inputs(settings: ExecutorSettings,
                state: StateDir) -> tuple[prices.PriceTable, preemption_fit.Models, list]:
    """What 'auto' chooses from: the region's prices, the preemption models fitted to earlier
    runs (capped at the VMs' max run duration) and earlier runs' job records."""
    table = prices.load(regions(settings)[0])
    cap_h = parse_duration(settings.gce_max_run_duration,
                           "--expocloud-gce-max-run-duration") / 3600
    models = preemption_fit.load_models(state.root, cap_h=cap_h)
    history = [r for run in sorted((state.root / "runs").glob("*/jobs.jsonl"))
               for r in read_jsonl(run)]
    return table, models, history
