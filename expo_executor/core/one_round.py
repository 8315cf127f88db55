"""A coordinator round's decisions, for the coordinator and the simulator alike. Pure.

A round observes (worker statuses, results, the engine, the meter) and acts (inboxes, creates,
deletes) through its caller: ``coordinator/loop.py`` against the bucket and an engine,
``simulate/simulation.py`` against a simulated cloud. What a round decides in between lives
here, once, so that a simulated run cannot drift from a real one
(``tests/unit/simulate/test_simulation_one_decision.py``). The steps, in the order a round calls them:

1. :func:`take_cancelled`: a cancelled result, and a cancel the scheduler did not ask for
   (its worker is stopping: what it ran there runs elsewhere);
2. :func:`decide`: what a budget phase change takes back (:func:`withdrawn`), then the
   assignments, with prefetch's ``coming`` (:func:`coming`), and the held tasks asked back;
3. :func:`plan`: one scaling round over every shape's pools (``scaling.scale_shapes``);
4. after the plan's creates and deletes (a create that fails may stop a pool):
   :func:`strand`, the queued work no VM alive may run in pools that cannot grow.

No I/O and no clock of its own: ``now`` and every observation come from the caller.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass

from expo_executor.core.budget import Phase, PhaseChange, Withdraw
from expo_executor.core.pool_health import PoolHealth, Stranding, strand_check
from expo_executor.core.scaling import FleetSetup, Load, Money, ScalePlan, room_to_grow, \
    scale_shapes
from expo_executor.core.scheduler import Assignment, Event, Pool, Release, Scheduler
from expo_executor.core.shapes import Shape

_OPEN = ("running", "queued")


def take_cancelled(scheduler: Scheduler, key: str, worker: str, ran: bool,
                   look_again: Callable[[], None] = lambda: None) -> list[Event]:
    """A worker reports ``key`` cancelled (``ran``: it had started it). A cancel the scheduler
    asked for ends the task; one it did not ask for (the task still runs or is queued) may be
    explained by a result not yet taken in (``look_again`` takes in the worker's other
    results: a timeout there may be what it was cancelled for); if not, the worker killed it
    for another reason (it is stopping), and its tasks run elsewhere."""
    events = scheduler.cancelled(key, ran)
    if not events and scheduler.state(key) in _OPEN:
        look_again()
        events = scheduler.cancelled(key, ran)
    if not events and scheduler.state(key) in _OPEN:
        events = scheduler.remove_worker(worker)
    return events


@dataclass(frozen=True)
class Withdrawn:
    """A task the round took back from the run (it fails): ``worker``, the one that held or
    ran it (None: it was queued)."""

    key: str
    worker: str | None


def withdrawn(scheduler: Scheduler, keys: Iterable[str], change: PhaseChange | None,
              phase: Phase = Phase.OK) -> list[Withdrawn]:
    """What a budget phase change takes back, of the run's ``keys`` (in that order): the
    queued tasks (drain; a held one is its worker's), or every unfinished one; each withdrawn
    from the scheduler. Past the limit (``phase``), what became queued since (a held job
    given back, a lost VM's job) is taken back too: no slot will ever start it."""
    withdraw = change.withdraw if change is not None else None
    if withdraw is None and phase >= Phase.LIMIT and sum(scheduler.queued_demand().values()):
        withdraw = Withdraw.QUEUED
    if withdraw is None:
        return []
    queued_only = withdraw is Withdraw.QUEUED
    taken = [k for k in keys if (scheduler.state(k) == "queued" if queued_only
                                 else k not in scheduler.outcomes)]
    return [Withdrawn(key, scheduler.withdraw(key)) for key in taken]


@dataclass(frozen=True)
class Fleet:
    """The VMs a round sees and where they may still grow: every shape's pools (``setups``:
    None, the run's own, and one per per-rule machine) and health, the VMs alive per pool
    (every shape together), and the CPUs of VMs booting per shape."""

    setups: Mapping[Shape | None, FleetSetup]
    healths: Mapping[Shape | None, PoolHealth]
    alive: Mapping[Pool, int]
    booting: Mapping[Shape | None, int]


def coming(scheduler: Scheduler, fleet: Fleet, phase: Phase, stopping: bool,
           now: float) -> dict[Shape | None, int]:
    """CPUs per shape of VMs booting or still to be created (none past the budget's growth
    phase, or once the run stops), whose tasks prefetch must not hold on busy workers
    (``Scheduler.assign``); nothing without prefetch."""
    if scheduler.prefetch == 0:
        return {}
    room: dict[Shape | None, int] = {}
    if phase is Phase.OK and not stopping:
        reliable = {shape: queued[Pool.ON_DEMAND]
                    for shape, queued in scheduler.queued_by_shape().items()}
        room = room_to_grow(fleet.setups, fleet.alive, reliable, fleet.healths, now)
    out = {shape: count * _slots(fleet.setups[shape]) for shape, count in room.items()}
    for shape, cpus in fleet.booting.items():
        out[shape] = out.get(shape, 0) + cpus
    return out


def _slots(setup: FleetSetup) -> int:
    return setup.fleets[setup.main_pool].slots_per_worker


@dataclass(frozen=True)
class Decided:
    """A round's decisions on its tasks: what it withdrew, what it assigns, the held tasks it
    asks back and the timeouts it prunes unconfirmed (with what they set off)."""

    withdrawn: tuple[Withdrawn, ...]
    assignments: tuple[Assignment, ...]
    releases: tuple[Release, ...]
    unconfirmed: tuple[Event, ...]


def decide(scheduler: Scheduler, keys: Collection[str], change: PhaseChange | None,
           phase: Phase, fleet: Fleet, spot_held: frozenset[Shape | None], now: float,
           stopping: bool = False, prefetch: int | None = None) -> Decided:
    """The budget's withdrawals (:func:`withdrawn`, of the run's ``keys``), then, below the budget's limit, the
    assignments: ``prefetch`` (None: unchanged) tasks per CPU held, none of a shape's queue
    that VMs ``coming`` will start; Spot refused to ``spot_held`` shapes (their straggler
    rule, from the last :func:`plan`)."""
    taken = tuple(withdrawn(scheduler, keys, change, phase))
    if phase >= Phase.LIMIT:
        return Decided(taken, (), (), ())
    if prefetch is not None:
        scheduler.set_prefetch(prefetch)
    assignments = scheduler.assign(spot_held=spot_held,
                                   coming=coming(scheduler, fleet, phase, stopping, now))
    return Decided(taken, tuple(assignments), tuple(scheduler.take_releases()),
                   tuple(scheduler.take_unconfirmed()))


def plan(loads: Mapping[Shape | None, Load], now: float, fleet: Fleet, money: Money,
         hourly: Callable[[Pool, Shape | None], float]) -> ScalePlan:
    """One scaling round over every shape's pools (``scaling.scale_shapes``), each VM priced
    by ``hourly(pool, shape)``."""
    prices = {shape: {pool: hourly(pool, shape) for pool in setup.fleets}
              for shape, setup in fleet.setups.items()}
    return scale_shapes(loads, now, fleet.setups, fleet.healths, money, prices)


@dataclass(frozen=True)
class Stranded:
    """A shape's queued work that can never run (``stranding``), and those tasks, withdrawn
    (they fail with its reason)."""

    shape: Shape | None
    stranding: Stranding
    keys: tuple[str, ...]


def strand(scheduler: Scheduler, keys: Collection[str], fleet: Fleet,
           alive: Mapping[Shape | None, Mapping[Pool, int]],
           done: Iterable[Shape | None] = ()) -> list[Stranded]:
    """Queued work (of the run's ``keys``, in that order; looked at only when some is
    stranded) that no VM alive may run, in pools
    that cannot grow, shape by shape (``alive``: VMs per shape and pool; ``done``: shapes
    stranded already, whose work fails on arrival): withdrawn from the scheduler. A stranding
    that is ``whole_run`` leaves its shape with no VM and none to come."""
    queued = scheduler.queued_by_shape()
    out: list[Stranded] = []
    for shape, setup in fleet.setups.items():
        if shape in done:
            continue
        stranding = strand_check(fleet.healths.get(shape, PoolHealth()),
                                 queued.get(shape, {Pool.SPOT: 0, Pool.ON_DEMAND: 0}),
                                 alive.get(shape, {}), setup.fleets)
        if stranding is None:
            continue
        dead = [k for k in keys if scheduler.state(k) == "queued"
                and scheduler.task(k).shape == shape
                and scheduler.demand_pool(k) in stranding.dead]
        for key in dead:
            scheduler.withdraw(key)
        out.append(Stranded(shape, stranding, tuple(dead)))
    return out
