"""``--expocloud-machine-type auto``: per pool, the machine type with the lowest expected cost
per job. Pure: prices, preemption models and the jobs' shape come in, a choice goes out.

SciSpot (section 4.1) picks the server type that minimises a job's expected cost under
preemption (eq. 10). Our workers run ``k`` jobs at once and many in sequence, so the figure is
``preemption.expected_cost_per_job``: the VM's price times the job's expected time with
recomputation (eq. 4-9, from the type's expected lifetime) plus the boots that preemptions
force, shared by the ``k`` jobs the type holds (by threads and by memory). Bigger VMs hold more
jobs but, on Spot, die sooner (SciSpot Fig. 2), so the largest is not always the cheapest; on
on-demand VMs nothing is recomputed and what remains is price per packed job.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from expo_executor.core.errors import ExpoError
from expo_executor.core.records import Outcome
from expo_executor.cost.preemption import Bathtub, expected_cost_per_job, p_any_preempted

DEFAULT_RUNTIME_S = 600.0  # a job's runtime when neither history nor a runtime resource says
BOOT_S = 90.0  # a GCE worker from insert to ready (boot plus the pinned pip install)


@dataclass(frozen=True)
class Workload:
    """What every job needs (the largest, so each fits) and how long one typically runs."""

    cpus: int
    mem_mb: int
    runtime_s: float
    runtime_source: str  # "measured in N earlier jobs", "runtime resource", "default"
    # how many jobs there are to share a VM; 0: not known, as many as it holds. A rule of one
    # job on a VM that holds five pays for all five slots: its cost per job says so.
    jobs: int = 0


@dataclass(frozen=True)
class Candidate:
    machine_type: str
    vcpus: int
    memory_mb: int
    hourly: float  # USD per VM-hour in this pool
    lifetime_h: float | None  # expected lifetime (eq. 2); None: on-demand, never preempted


@dataclass(frozen=True)
class Choice:
    machine_type: str
    vcpus: int
    cost_per_job: float  # USD, expected
    jobs_per_vm: int
    lifetime_h: float | None
    p_preempted: float  # that a job's run meets a preemption

    def line(self, pool: str) -> str:
        risk = (f", E[lifetime] {self.lifetime_h:.1f} h, {100 * self.p_preempted:.1f}% of jobs "
                "preempted" if self.lifetime_h is not None else "")
        return (f"{pool} {self.machine_type}: ${self.cost_per_job:.5f} per job expected "
                f"({self.jobs_per_vm} at once{risk})")


def jobs_per_vm(workload: Workload, vcpus: int, memory_mb: int) -> int:
    """Jobs a VM holds at once: by threads, and by memory when jobs declare it; never more
    than there are jobs (when known)."""
    fit = vcpus // max(1, workload.cpus)
    if workload.mem_mb > 0:
        fit = min(fit, memory_mb // workload.mem_mb)
    return min(fit, workload.jobs) if workload.jobs > 0 else fit


def evaluate(workload: Workload, candidate: Candidate, boot_s: float = BOOT_S) -> Choice | None:
    """The expected cost per job on ``candidate``; None when a job does not fit it."""
    k = jobs_per_vm(workload, candidate.vcpus, candidate.memory_mb)
    if k < 1:
        return None
    t_h = workload.runtime_s / 3600
    lifetime = candidate.lifetime_h
    cost = expected_cost_per_job(t_h, candidate.hourly, k, lifetime, boot_h=boot_s / 3600)
    p = p_any_preempted(t_h, lifetime) if lifetime is not None else 0.0
    return Choice(candidate.machine_type, candidate.vcpus, cost, k, lifetime, p)


def choose(workload: Workload, candidates: Iterable[Candidate], setting: str,
           boot_s: float = BOOT_S) -> Choice:
    """The cheapest candidate per job; on a tie the smaller VM (finer scaling, less idle
    capacity at the end of a sweep)."""
    choices = [c for c in (evaluate(workload, cand, boot_s) for cand in candidates) if c]
    if not choices:
        raise ExpoError(setting, f"no priced machine type holds a job of {workload.cpus} "
                        f"threads and {workload.mem_mb} MB",
                        "name a machine type, or lower the jobs' threads or mem_mb")
    return min(choices, key=lambda c: (round(c.cost_per_job, 12), c.vcpus, c.machine_type))


def workload_of(shapes: Sequence[tuple[int, int, float | None]],
                history_s: Sequence[float]) -> Workload:
    """From the planned jobs' (threads, mem_mb, runtime resource in s or None) and the
    runtimes measured in earlier runs: the largest job's needs and a typical runtime (the
    median measured one; else the median runtime resource, an upper bound; else a default)."""
    cpus = max((s[0] for s in shapes), default=1)
    mem = max((s[1] for s in shapes), default=0)
    declared = [s[2] for s in shapes if s[2]]
    if history_s:
        return Workload(cpus, mem, statistics.median(history_s),
                        f"median of {len(history_s)} measured jobs")
    if declared:
        return Workload(cpus, mem, statistics.median(declared), "median runtime resource")
    return Workload(cpus, mem, DEFAULT_RUNTIME_S, "no runtime known: default")


def candidates(types: Iterable[str], shape: Callable[[str], tuple[int, int] | None],
               hourly: Callable[[str], float], model: Callable[[str], Bathtub] | None,
               vcpus: int | None = None) -> list[Candidate]:
    """Candidates of one pool (``model`` None: on-demand), optionally of one vCPU count."""
    out = []
    for machine_type in types:
        dims = shape(machine_type)
        if dims is None or (vcpus is not None and dims[0] != vcpus):
            continue
        out.append(Candidate(machine_type, dims[0], dims[1], hourly(machine_type),
                             model(machine_type).expected_lifetime_h() if model else None))
    return out


def measured_runtimes(jobs: Iterable[Mapping], rules: set[str] | None = None) -> list[float]:
    """Runtimes of jobs that ran to completion in earlier runs' records."""
    return [float(j["runtime_s"]) for j in jobs
            if j.get("outcome") == Outcome.SOLVED.value and isinstance(j.get("runtime_s"), (int, float))
            and (rules is None or j.get("rule") in rules)]
