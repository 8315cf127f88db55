"""A coordinator round's decisions, for the coordinator and the simulator alike. Pure.

A round observes (worker statuses, results, the engine, the meter) and acts (inboxes, creates,
deletes) through its caller: ``coordinator/loop.py`` against the bucket and an engine,
``simulate/simulation.py`` against a simulated cloud. What a round decides in between is one
call, :func:`round_of`: the round's observations in (:class:`Seen`), everything the caller must
carry out out (:class:`Acts`), so that a simulated run cannot drift from a real one
(``tests/unit/simulate/test_simulation_one_decision.py``). Its steps, in order:

1. :func:`take_cancelled`: the round's cancelled results, and a cancel the scheduler did not
   ask for (its worker is stopping: what it ran there runs elsewhere);
2. :func:`decide`: what a budget phase change takes back (:func:`withdrawn`), then the
   assignments, with prefetch's ``coming`` (:func:`coming`), and the held tasks asked back;
3. one scaling plan over every shape's pools (``scaling.scale_shapes``);
4. :func:`strand`: the queued work no VM alive may run in pools that cannot grow.

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


@dataclass(frozen=True)
class Cancelled:
    """A worker's result: it cancelled ``key`` (``ran``: it had started it)."""

    key: str
    worker: str
    ran: bool


def unasked(scheduler: Scheduler, key: str) -> bool:
    """A cancel the scheduler did not ask for (the task still runs or is queued): before the
    round, its caller takes in the worker's other results (I/O: a timeout there may be what it
    was cancelled for, and then the cancel is one the scheduler asked for after all)."""
    return scheduler.state(key) in _OPEN


def take_cancelled(scheduler: Scheduler, cancelled: Cancelled) -> list[Event]:
    """A cancelled result. A cancel the scheduler asked for ends the task; one it still did not
    ask for once every result of the worker is in (:func:`unasked`) means the worker killed it
    for another reason (it is stopping), and its tasks run elsewhere."""
    events = scheduler.cancelled(cancelled.key, cancelled.ran)
    if not events and scheduler.state(cancelled.key) in _OPEN:
        events = scheduler.remove_worker(cancelled.worker)
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
    rule, from the last round's plan)."""
    taken = tuple(withdrawn(scheduler, keys, change, phase))
    if phase >= Phase.LIMIT:
        return Decided(taken, (), (), ())
    if prefetch is not None:
        scheduler.set_prefetch(prefetch)
    assignments = scheduler.assign(spot_held=spot_held,
                                   coming=coming(scheduler, fleet, phase, stopping, now))
    return Decided(taken, tuple(assignments), tuple(scheduler.take_releases()),
                   tuple(scheduler.take_unconfirmed()))


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


@dataclass(frozen=True)
class Seen:
    """A round's observations. ``keys``: the run's tasks, in order; ``cancelled``: the
    round's cancelled results (every other result taken in already, :func:`unasked`);
    ``change`` and ``phase``: the budget's; ``alive``: VMs per shape and pool;
    ``prices``: each shape's VM per pool and hour; ``spot_held``: the shapes the last plan's
    straggler rule holds off Spot; ``stranded``: shapes stranded already; ``prefetch``: the
    depth (None: unchanged); ``stopping``: the run stops (no growth, no scaling, no stranding);
    ``blind``: the engine could not be read (no scaling, no stranding). ``loads`` is read once
    the round's assignments are in the scheduler (a VM given work is busy, its job no longer
    queued): the caller's view of its VMs, which the core does not keep."""

    keys: Collection[str]
    cancelled: tuple[Cancelled, ...]
    change: PhaseChange | None
    phase: Phase
    fleet: Fleet
    alive: Mapping[Shape | None, Mapping[Pool, int]]
    money: Money
    prices: Mapping[Shape | None, Mapping[Pool, float]]
    loads: Callable[[], Mapping[Shape | None, Load]]
    now: float
    spot_held: frozenset[Shape | None] = frozenset()
    stranded: frozenset[Shape | None] = frozenset()
    prefetch: int | None = None
    stopping: bool = False
    blind: bool = False


@dataclass(frozen=True)
class Acts:
    """What a round's caller carries out, in this order: the events of each cancelled result
    (in ``Seen.cancelled``'s order), the decisions on the tasks, the scaling plan (None: no
    scaling this round) and the work stranded."""

    cancelled: tuple[tuple[Event, ...], ...]
    decided: Decided
    plan: ScalePlan | None
    stranded: tuple[Stranded, ...]


def round_of(scheduler: Scheduler, seen: Seen) -> Acts:
    """One round's decisions: the cancelled results, the budget's withdrawals and the
    assignments (:func:`decide`), one scaling plan, the stranded work.

    No plan in a round that stops the run, is blind, or whose budget change is ``STOP`` (the
    caller deletes every VM). Stranding looks at the pools' health and the VMs alive as the
    round saw them, before the plan's creates and deletes: work a failed create strands (its
    pool stopped) is stranded one round later. Cancelled results come last of the round's
    results: the caller took in the finished ones, and, for a cancel the scheduler did not ask
    for (:func:`unasked`), read the worker's other results first (that is I/O, so it is the
    caller's)."""
    cancelled = tuple(tuple(take_cancelled(scheduler, c)) for c in seen.cancelled)
    decided = decide(scheduler, seen.keys, seen.change, seen.phase, seen.fleet,
                     seen.spot_held, seen.now, seen.stopping, seen.prefetch)
    stop = seen.change is not None and seen.change.phase is Phase.STOP
    if seen.stopping or seen.blind:
        return Acts(cancelled, decided, None, ())
    scaled = None if stop else scale_shapes(seen.loads(), seen.now, seen.fleet.setups,
                                            seen.fleet.healths, seen.money, seen.prices)
    stranded = strand(scheduler, seen.keys, seen.fleet, seen.alive, seen.stranded)
    return Acts(cancelled, decided, scaled, tuple(stranded))
