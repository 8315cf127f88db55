"""One run's coordinator on the configured engine: shared by the Snakemake and CWL front ends.

Both hand over validated settings and get back a started coordinator whose scheduler, fleet,
engine and bucket are configured identically, so a CWL job and a Snakemake job with the same
settings are provisioned, polled and billed the same way.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Callable

from .bucket import Bucket, LocalBucket, open_bucket
from .coordinator import RESULTS_BACKSTOP, Coordinator, CoordinatorConfig
from .engines.base import Engine
from .engines.local import LocalEngine, LocalEngineConfig
from .scheduler import Pool, Scheduler
from .settings import (ExecutorSettings, heartbeat_grace, local_max_workers, max_on_demand,
                       poll_interval, worker_memory_mb)
from .state import StateDir


def max_workers(settings: ExecutorSettings) -> int:
    return local_max_workers(settings) if settings.engine == "local" else settings.max_workers


def start_coordinator(settings: ExecutorSettings, run_dir: Path, state: StateDir,
                      log: Callable[[str], None],
                      default_storage_prefix: str | None = None) -> Coordinator:
    """Build the engine and bucket for ``settings`` and start the coordinator's loop.

    Raises ExpoError (before anything is provisioned) on a setting the engine cannot use.
    """
    run_id = run_dir.name
    run_key = secrets.token_bytes(32)
    poll, grace = poll_interval(settings), heartbeat_grace(settings)
    workers = max_workers(settings)
    config = CoordinatorConfig(
        run_id=run_id, slots_per_worker=settings.slots_per_worker, max_workers=workers,
        worker_mem_mb=worker_memory_mb(settings, workers),
        idle_timeout=settings.idle_timeout, poll=poll, heartbeat=heartbeat(poll, grace),
        status_interval=settings.status_interval)
    if settings.engine == "gce":
        bucket, engine = _gce(settings, config, run_key, run_dir, default_storage_prefix, log)
    else:
        bucket = LocalBucket(run_dir / "bucket")
        engine = LocalEngine(LocalEngineConfig(
            bucket_root=bucket.root, scratch_root=run_dir / "vms", run_key=run_key,
            poll=poll, grace=grace, heartbeat=heartbeat(poll, grace),
            boot_delay=settings.boot_delay))
    coordinator = Coordinator(config, engine, bucket, run_key, run_dir, state, log,
                              Scheduler(spot_attempts=settings.spot_attempts))
    coordinator.start()
    return coordinator


def _gce(settings: ExecutorSettings, config: CoordinatorConfig, run_key: bytes, run_dir: Path,
         default_storage_prefix: str | None,
         log: Callable[[str], None]) -> tuple[Bucket, Engine]:
    """The coordination prefix, the worker software and the pools of a GCE run."""
    from .gce_launch import build_engine, coordination_url, vm_prefix

    url = coordination_url(settings, default_storage_prefix, config.run_id)
    bucket = open_bucket(url)
    on_demand = max_on_demand(settings, config.max_workers)
    if settings.on_demand_only:  # one pool: the on-demand one
        config.pool, config.max_workers, config.max_on_demand = Pool.ON_DEMAND, on_demand, 0
    else:
        config.pool, config.max_on_demand = Pool.SPOT, on_demand
    config.on_demand_min = settings.on_demand_min
    config.straggler_rule = not settings.no_straggler_rule
    config.vm_prefix = vm_prefix(config.run_id)
    config.results_backstop = max(RESULTS_BACKSTOP, 30 * config.poll)
    log(f"expocloud: coordinating through {url}")
    return bucket, build_engine(settings, config.run_id, run_key, bucket, url, run_dir)


def heartbeat(poll: float, grace: float) -> float:
    """Refresh inboxes often enough that a healthy worker never trips its dead man's switch
    (each refresh is a billed write on GCE, hence not more often than needed)."""
    return max(poll, grace / 4 if grace > 60 else min(10.0, grace / 4))
