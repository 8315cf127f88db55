"""The bill by rule: each VM's cost split among the rules (CWL steps) whose jobs it ran, per
machine type, from the run's own records. Pure.

Why a split and not a label per job: VMs are shared across rules in a pool, and a VM's labels
change only by a ``setLabels`` call per VM per change (with the fingerprint of a ``get`` before
it: two calls, each counted against the project's Compute API rate limits), while the billing
export attributes usage per VM and period, not per job. So a shared VM carries the run's labels
(run, workflow, machine), and its cost is split here, as docs/cost.md says:

- a job held ``cpus`` slots for its ``runtime_s`` on the VM its record names (``worker``):
  ``cpus x runtime_s`` slot-seconds;
- a VM's whole cost (its record's ``hourly`` over its life, boot and idle time included) goes to
  the rules in proportion to the slot-seconds their jobs held on it;
- a VM whose record names no finished job (preempted or lost before any of its jobs ended,
  or never given one) goes to the rules in proportion to their slot-seconds on all VMs of its
  machine type and pool; with none there either, to ``NO_RULE``.

A rule with labels of its own (its ``gce_labels``) has VMs of its own, which carry its labels
in the billing export as well; they are split here the same way (to that one rule).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

NO_RULE = "(no job recorded)"

Key = tuple[str, str, str]  # (rule, pool, machine type)


@dataclass(frozen=True)
class RuleCost:
    """What one rule's jobs cost on VMs of one pool and machine type."""

    rule: str
    pool: str
    machine_type: str
    jobs: int
    slot_hours: float  # the slots its jobs held, times their runtime
    cost_usd: float  # its share of those VMs' cost (idle and boot time in proportion)


def split_by_rule(vms: Iterable[tuple[Mapping, float]], jobs: Iterable[Mapping]
                  ) -> tuple[RuleCost, ...]:
    """``vms``: each VM's record with its cost in USD; ``jobs``: the run's job records. Rows
    sorted by rule, pool and machine type; their costs add up to the VMs' cost."""
    held: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for job in jobs:
        worker, seconds = job.get("worker"), _slot_seconds(job)
        if worker is None or seconds is None:
            continue
        held[str(worker)][str(job.get("rule", "?"))] += seconds
        counts[str(worker)][str(job.get("rule", "?"))] += 1
    cost: dict[Key, float] = defaultdict(float)
    slots: dict[Key, float] = defaultdict(float)
    jobs_of: dict[Key, int] = defaultdict(int)
    unheld: list[tuple[str, str, float]] = []
    for record, usd in vms:
        pool, machine = str(record.get("pool")), str(record.get("machine_type", "?"))
        shares = held.get(str(record.get("name")), {})
        total = sum(shares.values())
        if total <= 0:
            unheld.append((pool, machine, usd))
            continue
        for rule, seconds in shares.items():
            key = (rule, pool, machine)
            cost[key] += usd * seconds / total
            slots[key] += seconds / 3600
            jobs_of[key] += counts[str(record.get("name"))][rule]
    _spread(unheld, cost, lambda pool, machine: {
        rule: slots[(rule, p, m)] for rule, p, m in slots if (p, m) == (pool, machine)})
    keys = sorted(set(cost) | set(slots))
    return tuple(RuleCost(rule, pool, machine, jobs_of[(rule, pool, machine)],
                          slots[(rule, pool, machine)], cost[(rule, pool, machine)])
                 for rule, pool, machine in keys)


def _spread(unheld: list[tuple[str, str, float]], cost: dict[Key, float],
            weights_of: Callable[[str, str], dict[str, float]]) -> None:
    """Each VM that held no recorded job: to the rules by their slot-hours on its machine type
    and pool (``weights_of``), or to NO_RULE."""
    for pool, machine, usd in unheld:
        weights = {rule: w for rule, w in weights_of(pool, machine).items() if w > 0}
        total = sum(weights.values())
        if total <= 0:
            cost[(NO_RULE, pool, machine)] += usd
            continue
        for rule, weight in weights.items():
            cost[(rule, pool, machine)] += usd * weight / total


def _slot_seconds(job: Mapping) -> float | None:
    """The slots a job held times its runtime; None for a job that never ran on a VM."""
    runtime = job.get("runtime_s")
    if not isinstance(runtime, (int, float)) or runtime <= 0:
        return None
    cpus = job.get("cpus")
    return float(runtime) * (cpus if isinstance(cpus, int) and cpus > 0 else 1)


def by_rule(rows: Iterable[RuleCost]) -> dict[str, float]:
    """USD per rule, whatever the machine."""
    out: dict[str, float] = defaultdict(float)
    for row in rows:
        out[row.rule] += row.cost_usd
    return dict(sorted(out.items()))
