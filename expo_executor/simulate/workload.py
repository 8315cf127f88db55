"""What a simulation runs and on what terms: the workload (jobs with their runtimes, deadlines and
hardness, synthetic or from a past run's records), VM boot delays, and the protocols for prices
and Spot lifetimes. Pure, except :func:`load_run`, which reads a past run's files.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Protocol, Sequence

from expo_executor.runs.files import RunFiles
from expo_executor.core.hardness import HardnessPoint
from expo_executor.core.scheduler import Task
from expo_executor.core.shapes import Shape


class Prices(Protocol):
    """USD per VM-hour (``prices.PriceTable`` fits this)."""

    def hourly(self, machine_type: str, spot: bool) -> float: ...

    def label(self) -> str: ...


@dataclass(frozen=True)
class FixedPrices:
    """Explicit prices, for tests and what-ifs: the same for every machine type."""

    spot: float
    on_demand: float

    def hourly(self, machine_type: str, spot: bool) -> float:
        return self.spot if spot else self.on_demand

    def label(self) -> str:
        return f"fixed prices: Spot ${self.spot:g}/h, on-demand ${self.on_demand:g}/h"


class Lifetimes(Protocol):
    """A Spot VM lifetime model (``preemption.Bathtub`` fits this): hours, and whether the VM
    was preempted (False: it reached the cap and was not)."""

    def sample(self, rng: random.Random) -> tuple[float, bool]: ...


@dataclass(frozen=True)
class BootDelay:
    """Seconds from a VM's creation until its worker says ready.

    ``samples`` (e.g. a past run's ``ready - created``) are resampled when given; else the
    delay is ``mean``, or lognormal with that mean and ``sd`` (boot times are skewed right and
    never negative).
    """

    mean: float
    sd: float = 0.0
    samples: tuple[float, ...] = ()

    def sample(self, rng: random.Random) -> float:
        if self.samples:
            return rng.choice(self.samples)
        if self.sd <= 0 or self.mean <= 0:
            return max(0.0, self.mean)
        sigma2 = math.log(1.0 + (self.sd / self.mean) ** 2)
        return rng.lognormvariate(math.log(self.mean) - sigma2 / 2, math.sqrt(sigma2))

    def text(self) -> str:
        if self.samples:
            return f"resampled from {len(self.samples)} recorded boots"
        return f"{self.mean:g} s" + (f" (lognormal, sd {self.sd:g} s)" if self.sd > 0 else "")


@dataclass(frozen=True)
class SimJob:
    """One job of a workload: how long it would run if nothing stopped it.

    ``runtime_s`` may be ``inf`` (it would never end: it times out at its deadline);
    ``fails``: it exits with an error after ``runtime_s``; ``shape``: it runs only on VMs of
    that per-rule machine (``SimConfig.shape_slots``), which have pools of their own.
    """

    key: str
    label: str
    runtime_s: float
    deadline_s: float | None = None
    family: str | None = None
    point: HardnessPoint | None = None
    cpus: int = 1
    fails: bool = False
    shape: Shape | None = None  # the per-rule machine it needs (None: the run's own)

    def task(self) -> Task:
        return Task(self.key, self.label, self.family, self.point, self.cpus, shape=self.shape)


@dataclass(frozen=True)
class Workload:
    name: str
    jobs: tuple[SimJob, ...]
    note: str = ""  # the assumptions made in building it, printed with the table



# -- workloads ------------------------------------------------------------------------------

def synthetic(n: int, seed: int = 0, *, grid: int = 10, instances: int = 10,
              base_s: float = 60.0, growth: float = 1.25, sigma: float = 0.3,
              deadline_s: float = 1200.0) -> Workload:
    """A hardness sweep of ``n`` jobs: scopes of a ``grid`` x ``grid`` hardness grid with
    ``instances`` jobs per point. A job at (a, b) runs ``base_s * growth**(a+b)`` seconds times
    lognormal noise (sd ``sigma`` of the log), so the hard corner passes the deadline, times
    out, and the domino effect skips what lies beyond it.
    """
    rng = random.Random(f"{seed}:synthetic")
    family = f"sweep [a, b; scope: s] @{deadline_s:g}s"
    jobs: list[SimJob] = []
    per_scope = grid * grid * instances
    for scope in range(math.ceil(n / per_scope)):
        for a in range(grid):
            for b in range(grid):
                for i in range(instances):
                    if len(jobs) == n:
                        break
                    runtime = base_s * growth ** (a + b) * rng.lognormvariate(0.0, sigma)
                    jobs.append(SimJob(
                        f"s{scope}-{a}-{b}-{i}", f"sweep {{s={scope}, a={a}, b={b}, i={i}}}",
                        runtime, deadline_s, family, HardnessPoint((str(scope),), (a, b))))
    note = (f"synthetic: {n} jobs, {grid}x{grid} hardness grid x {instances} instances per "
            f"scope, runtime {base_s:g} s x {growth:g}^(a+b) x lognormal(0, {sigma:g}), "
            f"deadline {deadline_s:g} s")
    return Workload(f"synthetic-{n}", tuple(jobs), note)


def workload_from_jobs(records: Sequence[Mapping[str, Any]], name: str = "run",
                       scale: float = 1.0, rule: str | None = None) -> Workload:
    """A past run's ``jobs.jsonl`` records (one per job) as a workload.

    Solved and failed jobs take their recorded ``runtime_s``; timed-out ones would have run
    past their deadline (``inf``). Skipped jobs never ran to their end, so their runtime is
    unknown: we take their deadline, i.e. assume they would time out (which is why they were
    skipped). ``scale`` multiplies runtimes and deadlines (local runs are short; cloud jobs are
    not). Only ``rule``'s jobs, by default those of the rules with a hardness spec
    (``report.select_jobs``); all are submitted at once: dependencies are not modelled.
    """
    from expo_executor.report.results import select_jobs

    jobs: list[SimJob] = []
    assumed = 0
    for record in select_jobs(records, rule):
        deadline = record.get("deadline_s")
        deadline = float(deadline) * scale if isinstance(deadline, (int, float)) else None
        outcome = record.get("outcome")
        runtime = record.get("runtime_s")
        if outcome == "timeout":
            runtime_s = math.inf
        elif outcome in ("solved", "failed") and isinstance(runtime, (int, float)):
            runtime_s = float(runtime) * scale
        else:  # skipped (or no runtime): assume it would time out
            assumed += 1
            runtime_s = deadline if deadline is not None else 0.0
        hardness = record.get("hardness") if isinstance(record.get("hardness"), dict) else None
        rule_name = str(record.get("rule", "job"))
        point = family = None
        if hardness and deadline is not None and isinstance(hardness.get("vector"), list):
            point = HardnessPoint(tuple(str(s) for s in hardness.get("scope") or ()),
                                  tuple(float(v) for v in hardness["vector"]))
            family = f"{rule_name} [{hardness.get('spec')}] @{deadline:g}s"
        wildcards = record.get("wildcards") if isinstance(record.get("wildcards"), dict) else {}
        label = rule_name + (" {" + ", ".join(f"{k}={v}" for k, v in wildcards.items()) + "}"
                             if wildcards else "")
        jobs.append(SimJob(str(record["key"]), label, runtime_s, deadline, family, point,
                           fails=outcome == "failed"))
    note = (f"{len(jobs)} jobs from run {name}, runtimes and deadlines x {scale:g}; "
            f"{assumed} skipped jobs assumed to time out at their deadline")
    return Workload(name, tuple(jobs), note)


def boot_from_vms(records: Sequence[Mapping[str, Any]]) -> BootDelay | None:
    """Boot delays (``ready - created``) recorded in a run's ``vms.jsonl``, if it has them."""
    samples = tuple(float(r["ready"]) - float(r["created"]) for r in records
                    if isinstance(r.get("ready"), (int, float))
                    and isinstance(r.get("created"), (int, float))
                    and r["ready"] >= r["created"])
    if not samples:
        return None
    return BootDelay(sum(samples) / len(samples), samples=samples)



def load_run(run_dir: Path, scale: float = 1.0,
             rule: str | None = None) -> tuple[Workload, BootDelay | None]:
    """A past run's workload (``jobs.jsonl``) and its recorded boot delays (``vms.jsonl``),
    through the run files' one reader."""
    files = RunFiles(Path(run_dir))
    workload = workload_from_jobs(files.final_jobs(), files.run_id, scale, rule)
    return workload, boot_from_vms(files.vms())
