"""A worker's software description (startup.WorkerSoftware) with test values, for both tiers of
the startup-script tests."""

from __future__ import annotations

import sys

from expo_executor.engines.gce import startup

PY_MINOR = f"{sys.version_info[0]}.{sys.version_info[1]}"  # this host's Python, as a VM needs it


def software(**changes: object) -> startup.WorkerSoftware:
    """Valid pip-mode software, with ``changes`` applied."""
    base: dict[str, object] = {
        "mode": "pip", "pins": ("snakemake==9.0.0", "pyyaml==6.0"),
        "wheel_object": "runs/r1/software/0123/pkg-0.1.0-py3-none-any.whl",
        "wheel_sha256": "a" * 64, "wheel_bucket": "bkt", "package_version": "0.1.0",
        "python_version": PY_MINOR}
    base.update(changes)
    return startup.WorkerSoftware(**base)  # type: ignore[arg-type]
