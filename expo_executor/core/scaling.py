"""One scaling round: which VMs to delete and how many to create in each pool. Pure.

:func:`scale` joins the decisions a round takes: the fleet policy (``fleet.decide``: grow to
cover the queue, delete idle VMs, the straggler rule), the pools that may not grow (stopped for
good, or held back after a stockout: ``pool_health``), and the budget (no new VM once its phase
is past ``OK``, and never more than it can pay for; past ``LIMIT``, a VM whose jobs ended is only
a cost). The coordinator and the simulator both call it, so a simulated run scales as a real one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from expo_executor.core.budget import BudgetConfig, Phase, Spend, affordable
from expo_executor.core.fleet import FleetConfig, WorkerView, decide
from expo_executor.core.pool_health import PoolHealth
from expo_executor.core.scheduler import Pool
from expo_executor.core.shapes import Shape, shape_order


@dataclass(frozen=True)
class FleetSetup:
    """A run's pools and policy, fixed for the run."""

    fleets: Mapping[Pool, FleetConfig]
    main_pool: Pool
    straggler_rule: bool


@dataclass(frozen=True)
class Load:
    """The work and the VMs now: queued CPUs per demand pool (``Scheduler.queued_demand``),
    each pool's workers (a pool with none may be left out), and the busy CPUs everywhere and on
    Spot."""

    queued: Mapping[Pool, int]
    views: Mapping[Pool, Sequence[WorkerView]]
    running: int
    running_on_spot: int


@dataclass(frozen=True)
class Money:
    """The budget's side of a round: its phase, the cap (None: no budget), what has been spent
    and what a VM of each pool costs an hour."""

    phase: Phase = Phase.OK
    budget: BudgetConfig | None = None
    spend: Spend = Spend()
    hourly: Mapping[Pool, float] = field(default_factory=dict)

    def affordable(self, pool: Pool, count: int, spend: Spend, now: float) -> int:
        """Of ``count`` VMs wanted in ``pool``, how many the budget pays for."""
        if self.budget is None:
            return count
        return min(count, affordable(spend.ended_usd, spend.ages(now),
                                     self.hourly.get(pool, 0.0), self.budget))


@dataclass(frozen=True)
class Growth:
    """One pool's part of a round, acted on in this order: delete ``delete``, then create
    ``create`` VMs. ``held_until``: VMs were wanted and affordable but a stockout holds the pool
    back until then (a simulator wakes up at that time; a coordinator polls anyway)."""

    pool: Pool
    delete: tuple[str, ...]
    create: int
    held_until: float | None = None
    shape: Shape | None = None  # whose pool: None, the run's own


@dataclass(frozen=True)
class ScalePlan:
    """A round's decision: whether the straggler rule is in force (nothing new goes on Spot),
    each pool's growth in order, and, after them, the VMs the budget drains (those with no work:
    delete them, in the caller's own order of VMs)."""

    stragglers: bool
    pools: tuple[Growth, ...]
    drain: frozenset[str] = frozenset()
    # the shapes whose straggler rule is in force (``scale_shapes``; ``scale``: None's)
    stragglers_in: frozenset[Shape | None] = frozenset()


def scale(load: Load, now: float, setup: FleetSetup, health: PoolHealth,
          money: Money) -> ScalePlan:
    """The deletes and creates of one round, for the coordinator and the simulator alike.

    The budget's view moves on as the round acts: a VM deleted in one pool pays for one created
    after it, and VMs created in one pool leave less for the next.
    """
    return _scale(load, now, setup, health, money)[0]


_IDLE = Load({Pool.SPOT: 0, Pool.ON_DEMAND: 0}, {}, 0, 0)  # a shape with no work and no VM


def scale_shapes(loads: Mapping[Shape | None, Load], now: float,
                 setups: Mapping[Shape | None, FleetSetup],
                 healths: Mapping[Shape | None, PoolHealth], money: Money,
                 hourly: Mapping[Shape | None, Mapping[Pool, float]]) -> ScalePlan:
    """One round over every shape's pools (``setups``: the run's own, None, and one per
    per-rule machine): each shape's pools grow for its own queued work, shrink by their own idle
    VMs and keep their own straggler rule and health; ``hourly`` prices each shape's VMs. The
    budget's view moves on from shape to shape as it does from pool to pool, and so do the
    pools' caps: ``max_workers`` of a pool bounds its VMs of every shape together (a user's
    ``--expocloud-max-on-demand 5`` is five on-demand VMs, not five per shape). The run's own
    shape goes first, but a later shape with queued work and no VM keeps one place in the main
    pool: ten thousand small jobs do not hold a GPU rule back until they are done."""
    spend, growths, drain, stragglers = money.spend, [], set(), set()
    used = {pool: sum(len(load.views.get(pool, ())) for load in loads.values()) for pool in Pool}
    order = sorted(setups, key=shape_order)
    waiting = [i for i, shape in enumerate(order) if _waiting(loads.get(shape, _IDLE))]
    for i, shape in enumerate(order):
        load, kept = loads.get(shape, _IDLE), sum(1 for j in waiting if j > i)
        plan, spend = _scale(load, now, _within_caps(setups[shape], load, used, kept),
                             healths.get(shape, PoolHealth()),
                             replace(money, spend=spend, hourly=hourly.get(shape, {})))
        for growth in plan.pools:
            used[growth.pool] += growth.create - len(growth.delete)
        growths += [replace(growth, shape=shape) for growth in plan.pools]
        drain |= plan.drain
        if plan.stragglers:
            stragglers.add(shape)
    return ScalePlan(None in stragglers, tuple(growths), frozenset(drain),
                     frozenset(stragglers))


def room_to_grow(setups: Mapping[Shape | None, FleetSetup], alive: Mapping[Pool, int],
                 reliable: Mapping[Shape | None, int], healths: Mapping[Shape | None, PoolHealth],
                 now: float) -> dict[Shape | None, int]:
    """VMs each shape's pools may still create: up to each pool's cap (shared by every shape,
    as in :func:`scale_shapes`; ``alive``: VMs per pool), none in a pool that may not grow now;
    an on-demand pool beside the main one only for ``reliable`` (the shape's queued CPUs that
    must not run on Spot, one VM a CPU at most). What prefetch leaves queued for VMs to come
    (``Scheduler.assign``): an overestimate only delays holding, never a job."""
    room: dict[Shape | None, int] = {}
    for shape, setup in setups.items():
        health = healths.get(shape, PoolHealth())
        count = 0
        for pool, fleet in setup.fleets.items():
            if not health.may_grow(pool, now):
                continue
            free = max(0, fleet.max_workers - alive.get(pool, 0))
            count += free if pool is setup.main_pool else min(free, reliable.get(shape, 0))
        room[shape] = count
    return room


def _waiting(load: Load) -> bool:
    """A shape whose work waits for its first VM."""
    return sum(load.queued.values()) > 0 and not any(load.views.values())


def _within_caps(setup: FleetSetup, load: Load, used: Mapping[Pool, int],
                 kept: int) -> FleetSetup:
    """``setup`` with each pool's cap lowered by the VMs other shapes hold in that pool, and
    in the main pool by ``kept`` places for shapes still waiting (never below this shape's own
    VMs: a cap stops growth, it does not delete)."""
    fleets = {}
    for pool, fleet in setup.fleets.items():
        own = len(load.views.get(pool, ()))
        others = used[pool] - own + (kept if pool is setup.main_pool else 0)
        fleets[pool] = replace(fleet, max_workers=max(own, fleet.max_workers - others))
    return replace(setup, fleets=fleets)


def _scale(load: Load, now: float, setup: FleetSetup, health: PoolHealth,
           money: Money) -> tuple[ScalePlan, Spend]:
    """``scale``, and the budget's view after the round's deletes and creates."""
    views = {pool: list(load.views.get(pool, ())) for pool in setup.fleets}
    decision = decide(dict(load.queued), views, load.running, load.running_on_spot, now,
                      dict(setup.fleets), setup.main_pool, setup.straggler_rule, health.stopped)
    spend = money.spend
    growths = []
    for pool, plan in decision.plans.items():
        if money.budget is not None:
            for name in plan.delete:
                spend = spend.without(name, now)
        count = money.affordable(pool, plan.create, spend, now) \
            if money.phase is Phase.OK else 0
        create = count if count and health.may_grow(pool, now) else 0
        held = health.held_until(pool, now) if count else None
        if money.budget is not None:
            spend = spend.plus(create, money.hourly.get(pool, 0.0), now)
        growths.append(Growth(pool, plan.delete, create, held))
    stragglers = frozenset({None}) if decision.stragglers else frozenset()
    return ScalePlan(decision.stragglers, tuple(growths), _drain(load, money, growths),
                     stragglers), spend


def _drain(load: Load, money: Money, growths: Sequence[Growth]) -> frozenset[str]:
    """Past the budget's limit, the VMs with no work left (booting, or idle): draining, a VM
    whose jobs ended is only a cost."""
    if money.phase < Phase.LIMIT:
        return frozenset()
    deleted = {name for growth in growths for name in growth.delete}
    return frozenset(view.name for views in load.views.values() for view in views
                     if view.name not in deleted
                     and (view.booting or view.idle_since is not None))
