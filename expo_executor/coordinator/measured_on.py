"""Where a timeout was measured: the engine and the machine, part of a frontier's key.

A timeout says "this combination does not finish within the deadline *on this machine*": a
laptop's timeout says nothing of a GCE run's c2-standard-8, nor an e2-small's of an n2's. So a
family's frontier (coordinator/state.py ``FamilyRef``) is kept per engine and machine: on the
local engine the host (its CPU model and core count: the workers are this machine), on GCE the
job's machine type with its GPUs (a rule's own shape, else the run's own machine types).
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from expo_executor.coordinator.settings import ExecutorSettings
from expo_executor.core.records import EngineName
from expo_executor.core.shapes import Shape
from expo_executor.engines.gce.settings import pool_machine_types


@lru_cache(maxsize=1)
def local_host() -> str:
    """This machine as a timeout's context: ``Intel(R) Xeon(R) CPU @ 2.20GHz x 8``."""
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            name, _, value = line.partition(":")
            if name.strip() in ("model name", "Model", "cpu model") and value.strip():
                model = " ".join(value.split())
                break
    except OSError:
        pass
    return f"{model} x {os.cpu_count() or 1}"


def measured_on(settings: ExecutorSettings, shape: Shape | None = None) -> tuple[str, str]:
    """(engine, machine) a job of ``shape`` (None: the run's own workers) is timed on."""
    if settings.engine != EngineName.GCE:
        return EngineName.LOCAL.value, local_host()
    if shape is not None:
        gpus = f" + {shape.gpu_count} x {shape.gpu_type}" if shape.gpus else ""
        return EngineName.GCE.value, shape.machine_type + gpus
    spot, on_demand = pool_machine_types(settings)
    return EngineName.GCE.value, spot if spot == on_demand else f"{spot} or {on_demand}"
