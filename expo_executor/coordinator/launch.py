"""One run's coordinator on the configured engine: shared by the Snakemake and CWL front ends.

Both hand over validated settings and get back a started coordinator whose scheduler, fleet,
engine and bucket are configured identically, so a CWL job and a Snakemake job with the same
settings are provisioned, polled and billed the same way.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Callable

from expo_executor.coordinator.loop import Coordinator, CoordinatorConfig
from expo_executor.coordinator.recover import recover
from expo_executor.coordinator.region_prices import bucket_location, price_regions, region_weights
from expo_executor.coordinator.run_state import RunState, record
from expo_executor.coordinator.rule_machines import auto_inputs, dims_of
from expo_executor.coordinator.runtime_models import factory_of
from expo_executor.coordinator.shapes import AUTO, ShapeBook
from expo_executor.coordinator.settings import ExecutorSettings, worker_memory_mb
from expo_executor.coordinator.state import StateDir
from expo_executor.core.budget import BudgetConfig
from expo_executor.core.errors import ExpoError
from expo_executor.core.hardness import parse_duration
from expo_executor.core.records import EngineName
from expo_executor.core.requirements import SETTING as REQUIREMENTS_SETTING
from expo_executor.core.requirements import UserPin
from expo_executor.core.scheduler import Pool, Scheduler
from expo_executor.core.shapes import Shape
from expo_executor.cost import prices
from expo_executor.cost.machine_choice import candidates, choose, measured_runtimes, workload_of
from expo_executor.engines.base import Engine
from expo_executor.engines.gce.settings import (needs_credentials, pool_machine_types, regions,
                                                zones)
from expo_executor.engines.gce.settings_checks import check_credentials
from expo_executor.engines.local import LocalEngine, LocalEngineConfig
from expo_executor.engines.local_settings import local_max_workers
from expo_executor.notify.sender import Notifier
from expo_executor.notify.targets import Command, Target, Webhook, public_name
from expo_executor.protocol.bucket import Bucket, LocalBucket, open_bucket
from expo_executor.runs.files import RunFiles
from expo_executor.settings.notify import notify_argv, notify_secret, notify_url, stall_after
from expo_executor.settings.values import (boot_timeout, capacity_timeout, hardness_model,
                                           heartbeat_grace, heartbeat_interval, max_on_demand,
                                           poll_interval, prefetch, prefetch_hold_s,
                                           worker_requirements)


def max_workers(settings: ExecutorSettings) -> int:
    return local_max_workers(settings) if settings.engine == EngineName.LOCAL else settings.max_workers


def start_coordinator(settings: ExecutorSettings, run_dir: Path, state: StateDir,
                      log: Callable[[str], None],
                      default_storage_prefix: str | None = None,
                      shapes: ShapeBook | None = None,
                      expected: Mapping[tuple[Shape | None, Pool], int] | None = None,
                      skip_hinted: bool = False) -> Coordinator:
    """Build the engine and bucket for ``settings`` and start the coordinator's loop
    (``shapes``: the run's per-rule machines, from :func:`shape_book`; ``expected``: the CPUs
    the front end's planned jobs will want, for the first VMs' head start, ``Scheduler.expect``;
    ``skip_hinted``: a CWL tool's hint gives skipAbove, so the model is on as with
    --expocloud-skip-above).

    Raises ExpoError (before anything is provisioned) on a setting the engine cannot use.
    """
    run_id = run_dir.name
    # refused here, before anything starts
    model_factory = factory_of(hardness_model(settings, skip_hinted))
    run_key = secrets.token_bytes(32)
    poll, grace = poll_interval(settings), heartbeat_grace(settings)
    workers = max_workers(settings)
    config = CoordinatorConfig(
        run_id=run_id, slots_per_worker=settings.slots_per_worker, max_workers=workers,
        worker_mem_mb=worker_memory_mb(settings, workers),
        idle_timeout=settings.idle_timeout, poll=poll, heartbeat=heartbeat_interval(settings),
        status_interval=settings.status_interval, boot_timeout=boot_timeout(settings),
        capacity_timeout=capacity_timeout(settings), shapes=shapes,
        prefetch_hold_s=prefetch_hold_s(settings), keep_bucket=settings.keep_bucket,
        stall_after=stall_after(settings), skip_above=settings.skip_above)
    if settings.engine == EngineName.GCE:
        bucket, engine = _gce(settings, config, run_key, run_dir, default_storage_prefix, log,
                              shapes.known() if shapes else [], state.root)
    else:
        if settings.worker_requirements:
            log(local_requirements_note(worker_requirements(settings)))
        bucket = LocalBucket(run_dir / "bucket")
        engine = LocalEngine(LocalEngineConfig(
            bucket_root=bucket.root, scratch_root=run_dir / "vms", run_key=run_key,
            poll=poll, grace=grace, heartbeat=heartbeat_interval(settings),
            boot_delay=settings.boot_delay))
    # before this run can touch their outputs: crashed runs' jobs in flight are adopted (or
    # their workers stopped), what they solved after the crash is not rerun
    recovery = recover(state.root, run_dir, log, adopt=not settings.no_adopt,
                       heartbeat=heartbeat_interval(settings))
    held = record(run_dir, _run_state(settings, config.run_id, bucket, default_storage_prefix),
                  run_key)
    scheduler = Scheduler(spot_attempts=settings.spot_attempts,
                          confirm_timeouts=settings.confirm_timeouts, prefetch=prefetch(settings),
                          skip_above=settings.skip_above,
                          trust_after=settings.model_trust_after)
    scheduler.expect(expected or {})
    coordinator = Coordinator(config, engine, bucket, run_key, run_dir, state, log, scheduler,
                              notifier_for(settings, log), model_factory)
    coordinator.held_run = held
    coordinator.harvested = recovery.harvested
    coordinator.adopted = recovery.adopted
    coordinator.start()
    return coordinator


def notifier_for(settings: ExecutorSettings, log: Callable[[str], None]) -> Notifier | None:
    """The run's notifier (``--expocloud-notify``, ``--expocloud-notify-command``), or None;
    the log names where notices go, never the URL's path, the command's arguments or the
    secret."""
    targets: list[Target] = []
    url, argv = notify_url(settings), notify_argv(settings)
    if url is not None:
        secret = notify_secret(settings)
        assert secret is not None  # validate refused a URL without one
        targets.append(Webhook(url, secret))
    if argv is not None:
        targets.append(Command(argv))
    if not targets:
        return None
    log("expocloud: notifications go to " + " and ".join(
        f"{public_name(url)} (signed)" if isinstance(t, Webhook) else f"the command {t.name}"
        for t in targets))
    return Notifier(targets, log)


def _run_state(settings: ExecutorSettings, run_id: str, bucket: Bucket,
               default_storage_prefix: str | None) -> RunState:
    """What a rerun needs to find this run's workers should its coordinator die."""
    engine = EngineName(settings.engine).value
    version = _version()
    if settings.engine != EngineName.GCE:
        return RunState(run_id, engine, str(getattr(bucket, "root", "")), version=version)
    from expo_executor.engines.gce.launch import coordination_url, run_label

    return RunState(run_id, engine, coordination_url(settings, default_storage_prefix, run_id),
                    label=run_label(run_id), project=settings.gce_project or "",
                    zones=tuple(zones(settings)), endpoint=settings.gce_endpoint,
                    version=version)


def _version() -> str:
    try:
        return importlib.metadata.version("snakemake-executor-plugin-expocloud")
    except importlib.metadata.PackageNotFoundError:
        return ""


def local_requirements_note(pins: Sequence[UserPin]) -> str:
    """The one line a local run logs about ``--expocloud-worker-requirements``: local workers
    are this machine's processes, so nothing is installed; the line names the pins this
    machine's Python environment does not match, where a GCE run would differ."""
    differ = []
    for pin in pins:
        try:
            have = importlib.metadata.version(pin.name)
        except importlib.metadata.PackageNotFoundError:
            have = "missing"
        if have != pin.version:
            differ.append(f"{pin.name} (pinned {pin.version}, here {have})")
    note = (f"expocloud: the local engine installs nothing from {REQUIREMENTS_SETTING} "
            f"({len(pins)} pins): jobs use this machine's environment")
    if differ:
        note += f"; {len(differ)} differ here: " + ", ".join(differ[:5]) + \
            (", ..." if len(differ) > 5 else "")
    return note


def _gce(settings: ExecutorSettings, config: CoordinatorConfig, run_key: bytes, run_dir: Path,
         default_storage_prefix: str | None, log: Callable[[str], None],
         shapes: Sequence[Shape] = (), state_root: Path | None = None) -> tuple[Bucket, Engine]:
    """The coordination prefix, the worker software and the pools of a GCE run, once the
    project passed ``expocloud doctor``'s checks for it (``shapes``: the per-rule machines
    known before the run); across regions, each region priced and weighed
    (``region_prices``, with the preemption models of ``state_root``)."""
    from expo_executor.engines.gce.compute_lib import warm_up
    from expo_executor.engines.gce.launch import (build_engine, check_new_prefix, check_ready,
                                                  coordination_url, vm_prefix)

    warm_up()  # the Compute client's import overlaps the checks' calls, on the first VM's way
    url = coordination_url(settings, default_storage_prefix, config.run_id)
    if needs_credentials(settings):
        check_credentials()  # the real GCS or Compute API: credentials first, in one line
    check_ready(settings, shapes, url, log)  # before anything is staged or a VM asked for
    bucket = open_bucket(url)
    check_new_prefix(bucket, url)
    on_demand = max_on_demand(settings, config.max_workers)
    if settings.on_demand_only:  # one pool: the on-demand one
        config.pool, config.max_workers, config.max_on_demand = Pool.ON_DEMAND, on_demand, 0
    else:
        config.pool, config.max_on_demand = Pool.SPOT, on_demand
    config.on_demand_min = settings.on_demand_min
    config.straggler_rule = not settings.no_straggler_rule
    config.vm_prefix = vm_prefix(config.run_id)
    _price(settings, config, log)
    tables = price_regions(settings, config, log)
    log(f"expocloud: coordinating through {url}")
    engine = build_engine(settings, config.run_id, run_key, bucket, url, run_dir,
                          RunFiles(run_dir).workflow_name())
    if tables:  # across regions: where VMs go first, and what their staged files cost there
        config.bucket_location = bucket_location(bucket, log)
        config.staged_bytes_per_vm = engine.staged_bytes
        engine.weigh_regions(region_weights(settings, config, tables,
                                            state_root or run_dir.parent.parent))
    return bucket, engine


def _price(settings: ExecutorSettings, config: CoordinatorConfig,
           log: Callable[[str], None]) -> None:
    """Price both pools from the price snapshot, for the meter, the budget and the report.

    An unpriced machine type leaves the run unmetered (said once) unless a budget needs the
    meter: then it is an error, before any VM exists.
    """
    spot_type, on_demand_type = pool_machine_types(settings)
    config.machine_types = {Pool.SPOT: spot_type, Pool.ON_DEMAND: on_demand_type}
    config.max_run_s = parse_duration(settings.gce_max_run_duration,
                                      "--expocloud-gce-max-run-duration")
    try:
        table = prices.load(regions(settings)[0])
        config.hourly = {Pool.SPOT: table.hourly(spot_type, spot=True),
                         Pool.ON_DEMAND: table.hourly(on_demand_type, spot=False)}
        config.on_demand_hourly = {Pool.SPOT: table.hourly(spot_type, spot=False),
                                   Pool.ON_DEMAND: config.hourly[Pool.ON_DEMAND]}
    except ExpoError as exc:
        if settings.budget is not None:
            raise
        log(f"expocloud: this run is not metered: {exc}")
        return
    config.prices_label = table.label()
    if settings.budget is not None:
        # Deleting a real VM takes up to a minute; the emulator's take a few polls.
        margin = 60.0 if settings.gce_endpoint is None else max(2.0, 3 * config.poll)
        config.budget = BudgetConfig(settings.budget, settings.budget_action,
                                     horizon_s=5 * margin, margin_s=margin)
    log(f"expocloud: Spot {spot_type} ${config.hourly[Pool.SPOT]:.4f}/h, on-demand "
        f"{on_demand_type} ${config.hourly[Pool.ON_DEMAND]:.4f}/h ({config.prices_label})"
        + (f"; budget ${settings.budget:g}, then {settings.budget_action}"
           if settings.budget is not None else ""))


def resolve_machine_types(settings: ExecutorSettings,
                          shapes: Sequence[tuple[int, int, float | None]], state: StateDir,
                          rules: set[str] | None, log: Callable[[str], None]) -> ExecutorSettings:
    """Settings with every 'auto' machine type replaced by the cheapest per job (see
    machine_choice.py), from the planned jobs' ``shapes`` (threads, mem_mb, runtime resource in
    s), earlier runs' measured runtimes, the price snapshot and the preemption models. Both
    pools get the same vCPU count (one slot count per run); slots become that count."""
    spot, on_demand = pool_machine_types(settings)
    if settings.engine != EngineName.GCE or AUTO not in (spot, on_demand):
        return settings
    table, models, history = auto_inputs(settings, state)
    workload = workload_of(shapes, measured_runtimes(history, rules))
    types = table.candidates(min_vcpus=2)  # a 1-vCPU worker shares its only core with its job
    shape = dims_of

    def vcpus_of(machine_type: str) -> int | None:
        dims = shape(machine_type)
        return dims[0] if dims else None

    lines = []
    if spot == AUTO and not settings.on_demand_only:
        pick = choose(workload, candidates(
            types, shape, lambda t: table.hourly(t, spot=True), models.for_type,
            vcpus=None if on_demand == AUTO else vcpus_of(on_demand)),
            "--expocloud-machine-type")
        spot = pick.machine_type
        lines.append(pick.line("Spot") + f" [{models.source(spot)}]")
    if on_demand == AUTO:
        same = None if settings.on_demand_only or spot == AUTO else vcpus_of(spot)
        pick = choose(workload, candidates(types, shape, lambda t: table.hourly(t, spot=False),
                                           None, vcpus=same), "--expocloud-machine-type")
        on_demand = pick.machine_type
        lines.append(pick.line("on-demand"))
    if spot == AUTO:  # on-demand only: the Spot type is never used
        spot = on_demand
    slots = vcpus_of(on_demand if settings.on_demand_only else spot) or settings.slots_per_worker
    log(f"expocloud: machine type auto, for jobs of {workload.cpus} thread(s), "
        f"{workload.mem_mb} MB, {workload.runtime_s:.0f} s ({workload.runtime_source}); "
        f"{table.label()}: " + "; ".join(lines) + f"; {slots} slots per worker")
    return dataclasses.replace(settings, gce_machine_type=spot,
                               gce_on_demand_machine_type=on_demand, slots_per_worker=slots)
