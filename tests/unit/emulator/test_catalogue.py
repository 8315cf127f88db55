"""The machine families that come with GPUs are listed once for the executor
(``core.shapes.GPU_MACHINE_FAMILIES``: the GCE engine and the cost module read it) and once for
the emulator (``emulator/catalogue.py``, Google's side, which may not import the core). The two
must agree, or the emulator would accept a VM the engine builds wrongly, or refuse a right one.
Google's regions and zones likewise (``gcp.zones`` and the emulator's copy).
"""

from __future__ import annotations

import pytest

from expo_executor.core.shapes import GPU_MACHINE_FAMILIES, comes_with_gpus
from expo_executor.cost.machines import gpu_problem
from expo_executor.emulator import catalogue
from expo_executor.emulator.api_error import ApiError
from expo_executor.emulator.compute_validation import validate_instance
from expo_executor.gcp import zones

pytestmark = pytest.mark.unit

ZONE = "us-central1-a"


def test_the_emulators_copy_agrees_with_the_one_list() -> None:
    assert catalogue.GPU_MACHINE_FAMILIES == GPU_MACHINE_FAMILIES


def test_the_emulators_regions_and_zones_agree_with_the_executors() -> None:
    assert dict(catalogue.ZONE_LETTERS) == dict(zones.ZONE_LETTERS)
    assert catalogue.zones_of("europe-west1") == zones.zones_of("europe-west1") == \
        ["europe-west1-b", "europe-west1-c", "europe-west1-d"]
    assert not catalogue.zone_exists("us-central1-z") and not zones.known_zone("mars-north1-a")


@pytest.mark.parametrize("family", GPU_MACHINE_FAMILIES)
def test_each_family_comes_with_gpus_that_cannot_live_migrate(family: str) -> None:
    machine = f"{family}-highgpu-1g"
    assert comes_with_gpus(machine)
    body = {"name": "vm-1", "machineType": f"zones/{ZONE}/machineTypes/{machine}",
            "disks": [{"boot": True, "initializeParams": {"sourceImage": "img"}}],
            "networkInterfaces": [{"network": "global/networks/default"}],
            "scheduling": {"onHostMaintenance": "MIGRATE"}}
    with pytest.raises(ApiError, match="do not support live migration"):
        validate_instance(body, ZONE)


def test_a_family_with_gpus_of_its_own_takes_no_other() -> None:
    assert not comes_with_gpus("n1-standard-8")
    assert "comes with GPUs of its own" in gpu_problem("a3-highgpu-8g", "nvidia-tesla-t4", 1)
    assert "takes no GPUs" in gpu_problem("c3-standard-8", "nvidia-tesla-t4", 1)
