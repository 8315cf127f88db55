"""What a run cost: VM-hours per pool, machine type and region, dollars, dollars per solved job,
the egress from the bucket to VMs in other regions than the bucket's (the worker software each
VM reads at boot, and each job's staged files: the bytes its result says it read from and wrote
to the bucket, at its VM's rate, ``cost.egress``), the saving against paying
on-demand prices for the same VM-hours, and the same dollars by rule and machine type
(``rule_split``). Pure: built from the run's own
records (``vms.jsonl`` carries each VM's prices, ``cost.json`` the price snapshot's label), so a
report reads the same whatever prices are loaded later.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from expo_executor.core.budget import vm_cost
from expo_executor.core.records import Outcome, VmEnd
from expo_executor.cost.egress import GB
from expo_executor.cost.rule_split import RuleCost, by_rule, split_by_rule


@dataclass(frozen=True)
class CostRow:
    pool: str
    machine_type: str
    vms: int
    preempted: int
    vm_hours: float
    cost_usd: float
    on_demand_usd: float  # the same VM-hours at this type's on-demand price
    region: str = ""  # where the VMs ran, for a run across regions ("" : not recorded)
    egress_usd: float = 0.0  # what they moved to and from the bucket in another region
    staged_egress_usd: float = 0.0  # ... of it, their jobs' staged files (the rest: software)


@dataclass(frozen=True)
class CostReport:
    rows: tuple[CostRow, ...]
    solved: int
    prices: str  # which snapshot priced it
    rules: tuple[RuleCost, ...] = ()  # the same cost split by rule (rule_split.py)

    @property
    def cost_usd(self) -> float:
        return sum(r.cost_usd for r in self.rows)

    @property
    def vm_hours(self) -> float:
        return sum(r.vm_hours for r in self.rows)

    @property
    def on_demand_usd(self) -> float:
        return sum(r.on_demand_usd for r in self.rows)

    @property
    def egress_usd(self) -> float:
        """GCS egress between the bucket and VMs outside its region (cost.egress)."""
        return sum(r.egress_usd for r in self.rows)

    @property
    def staged_egress_usd(self) -> float:
        """The part of :attr:`egress_usd` that jobs' staged files moved."""
        return sum(r.staged_egress_usd for r in self.rows)

    @property
    def per_solved_usd(self) -> float | None:
        return self.cost_usd / self.solved if self.solved else None

    @property
    def saving(self) -> float | None:
        """1 - cost / on-demand cost of the same VM-hours. An upper bound of what Spot saved:
        on on-demand VMs the work lost to preemptions would not have been redone."""
        return 1 - self.cost_usd / self.on_demand_usd if self.on_demand_usd > 0 else None

    def to_dict(self) -> dict:
        return {"prices": self.prices, "cost_usd": self.cost_usd, "vm_hours": self.vm_hours,
                "on_demand_usd": self.on_demand_usd, "egress_usd": self.egress_usd,
                "staged_egress_usd": self.staged_egress_usd,
                "solved": self.solved,
                "per_solved_usd": self.per_solved_usd, "saving": self.saving,
                "rows": [r.__dict__ for r in self.rows],
                "by_rule": [r.__dict__ for r in self.rules]}

    def lines(self) -> list[str]:
        """The cost report as a few log lines."""
        out = [f"cost: ${self.cost_usd:.4f} for {self.vm_hours:.3f} VM-hours ({self.prices})"]
        for r in self.rows:
            out.append(f"  {r.pool} {r.machine_type}" + (f" in {r.region}" if r.region else "")
                       + f": {r.vms} VM(s), {r.vm_hours:.3f} VM-hours, ${r.cost_usd:.4f}"
                       + (f", {r.preempted} preempted" if r.preempted else ""))
        if self.egress_usd > 0:
            out.append(f"  ${self.egress_usd:.4f} egress between the bucket and VMs in other "
                       f"regions (${self.staged_egress_usd:.4f} jobs' staged files, "
                       f"${self.egress_usd - self.staged_egress_usd:.4f} worker software; "
                       "GCS data transfer within Google Cloud)")
        if self.per_solved_usd is not None:
            out.append(f"  ${self.per_solved_usd:.5f} per solved job ({self.solved} solved)")
        if self.saving is not None:
            out.append(f"  {100 * self.saving:.0f}% below on-demand prices for the same VM-hours "
                       f"(${self.on_demand_usd:.4f})")
        if self.rules:
            out.append("cost by rule (each VM's cost split by the slot-hours its jobs held, "
                       "idle and boot time in proportion):")
            out += [f"  {rule}: ${usd:.4f}" for rule, usd in by_rule(self.rules).items()]
        return out

    def to_markdown(self) -> str:
        head = "| pool | machine type | VMs | preempted | VM-hours | cost (USD) | on-demand (USD) |"
        rows = [head, "|" + "---|" * 7]
        rows += [f"| {r.pool} | {r.machine_type}{f' in {r.region}' if r.region else ''} | "
                 f"{r.vms} | {r.preempted} | {r.vm_hours:.3f} | {r.cost_usd:.4f} | "
                 f"{r.on_demand_usd:.4f} |" for r in self.rows]
        rows.append(f"| **total** | | {sum(r.vms for r in self.rows)} | "
                    f"{sum(r.preempted for r in self.rows)} | {self.vm_hours:.3f} | "
                    f"{self.cost_usd:.4f} | {self.on_demand_usd:.4f} |")
        if self.egress_usd > 0:
            rows.append(f"| egress: jobs' staged files | | | | | {self.staged_egress_usd:.4f} | |")
            rows.append(f"| egress: worker software | | | | | "
                        f"{self.egress_usd - self.staged_egress_usd:.4f} | |")
        if self.rules:
            rows += ["", "| rule | pool | machine type | jobs | slot-hours | cost (USD) |",
                     "|" + "---|" * 6]
            rows += [f"| {r.rule} | {r.pool} | {r.machine_type} | {r.jobs} | "
                     f"{r.slot_hours:.3f} | {r.cost_usd:.4f} |" for r in self.rules]
        return "\n".join(rows)


def vm_seconds(record: Mapping, now: float) -> float:
    """A VM's billed life in our accounting: creation request to deletion (or ``now``)."""
    if record.get("end") == VmEnd.NOT_CREATED.value:
        return 0.0
    ended = record.get("ended")
    return max(0.0, (ended if ended is not None else now) - float(record["created"]))


def summarize(vms: Iterable[Mapping], jobs: Iterable[Mapping], prices: str,
              now: float, attempts: Iterable[Mapping] | None = None) -> CostReport:
    """Group the VM records by pool, machine type and region (a run across regions prices
    each VM where it ran); price each VM by its own record; split it by rule over
    ``attempts`` (every job record, each attempt's slot-time and staged bytes; default
    ``jobs``)."""
    vms, jobs = list(vms), list(jobs)
    attempts = jobs if attempts is None else list(attempts)
    staged = staged_egress(vms, attempts)
    groups: dict[tuple[str, str, str], list[Mapping]] = {}
    for record in vms:
        if record.get("end") == VmEnd.NOT_CREATED.value:
            continue
        groups.setdefault((str(record.get("pool")), str(record.get("machine_type", "?")),
                           str(record.get("region") or "")), []).append(record)
    priced = [(r, vm_cost(float(r.get("hourly", 0.0)), vm_seconds(r, now)))
              for records in groups.values() for r in records]
    rows = []
    for (pool, machine_type, region), records in sorted(groups.items()):
        seconds = [vm_seconds(r, now) for r in records]
        moved = sum(staged.get(str(r.get("name")), 0.0) for r in records)
        rows.append(CostRow(
            pool, machine_type, len(records),
            sum(1 for r in records if r.get("end") == VmEnd.PREEMPTED.value), sum(seconds) / 3600,
            sum(vm_cost(float(r.get("hourly", 0.0)), s) for r, s in zip(records, seconds)),
            sum(vm_cost(float(r.get("on_demand_hourly", r.get("hourly", 0.0))), s)
                for r, s in zip(records, seconds)),
            region, sum(float(r.get("egress_usd") or 0.0) for r in records) + moved, moved))
    solved = sum(1 for j in jobs if j.get("outcome") == Outcome.SOLVED.value)
    return CostReport(tuple(rows), solved, prices, split_by_rule(priced, attempts))


def staged_egress(vms: Iterable[Mapping], attempts: Iterable[Mapping]) -> dict[str, float]:
    """USD per VM name of its jobs' staged files: each attempt's bytes read from and written
    to the bucket (its record's ``staged_down_bytes`` and ``staged_up_bytes``) at the rate
    its VM's record holds (``egress_usd_per_gb``; absent, as on the local engine or in an
    older record: not priced). Writing from a VM to a bucket in another region is billed as
    Compute Engine's inter-region egress, priced here at the same table (close to it: see
    cost/egress.py)."""
    rate = {str(r.get("name")): float(r.get("egress_usd_per_gb") or 0.0) for r in vms}
    out: dict[str, float] = {}
    for job in attempts:
        worker = str(job.get("worker"))
        moved = sum(n for n in (job.get("staged_down_bytes"), job.get("staged_up_bytes"))
                    if isinstance(n, int) and not isinstance(n, bool) and n > 0)
        if moved and rate.get(worker):
            out[worker] = out.get(worker, 0.0) + moved / GB * rate[worker]
    return out
