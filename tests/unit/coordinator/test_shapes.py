"""A rule's resources read into its machine (coordinator.shapes.ShapeBook.shape_of): which
shape, the run's own when it asks for nothing of its own, and one line for what GCE refuses."""

from __future__ import annotations

import pytest

from expo_executor.coordinator.shapes import RunMachines, ShapeBook
from expo_executor.core.errors import ExpoError
from expo_executor.core.shapes import Shape

RUN = RunMachines("e2-standard-2", "e2-standard-2", 2, 8192, 20)


def _shape(resources: dict, threads: int = 1, mem_mb: int = 0,
           gpu_image: str | None = "projects/p/global/images/gpu-worker") -> Shape | None:
    return ShapeBook(RUN, gpu_image=gpu_image).shape_of("r", resources.get, threads, mem_mb)


def test_a_rule_that_asks_for_nothing_of_its_own_runs_on_the_runs_own_machines() -> None:
    assert _shape({}) is None
    assert _shape({"machine_type": "e2-standard-2"}) is None  # the run's own, named
    assert _shape({"disk_mb": 5000}) is None  # fits the run's 20 GB disk


def test_machine_gpus_and_disk_make_the_shape() -> None:
    assert _shape({"machine_type": "n2-standard-8"}) == Shape("n2-standard-8")
    assert _shape({"disk_mb": 200_000}) == Shape("e2-standard-2", disk_gb=196 + 10)
    gpu = _shape({"gpu_type": "nvidia-tesla-t4", "gpu": 2}, threads=4)
    assert gpu is not None and gpu.machine_type.startswith("n1-standard-")
    assert (gpu.gpu_type, gpu.gpu_count) == ("nvidia-tesla-t4", 2)


def test_gpu_model_as_snakemakes_slurm_plugin_names_it_is_the_gpu_type() -> None:
    assert _shape({"gpu_model": "nvidia-l4", "gpu": 1}) == _shape({"gpu_type": "nvidia-l4"})
    # gpu_type, where both are given, is the GCE name
    assert _shape({"gpu_type": "nvidia-l4", "gpu_model": "a100"}) == \
        _shape({"gpu_type": "nvidia-l4"})


@pytest.mark.parametrize("resources, words", [
    ({"gpu_model": "a100", "gpu": 1}, "unknown GPU type 'a100'"),
    ({"gpu": 1}, "1 GPUs of no type"),
    ({"machine_type": "c3-standard-8", "gpu_type": "nvidia-tesla-t4"}, "takes no GPUs"),
    ({"disk_mb": "big"}, "'big' is not a size"),
])
def test_what_gce_would_refuse_is_one_line_before_any_vm(resources: dict, words: str) -> None:
    with pytest.raises(ExpoError) as info:
        _shape(resources)
    assert words in str(info.value) and "fix:" in str(info.value)
    assert "\n" not in str(info.value)


def test_a_gpu_rule_needs_a_gpu_image_said_before_any_vm() -> None:
    with pytest.raises(ExpoError) as info:
        _shape({"machine_type": "g2-standard-8"}, gpu_image=None)  # comes with an L4
    assert "resource 'gpu_type' of rule 'r'" in str(info.value)
    assert "--expocloud-gce-gpu-image" in str(info.value)
    assert _shape({"machine_type": "n2-standard-8"}, gpu_image=None) == Shape("n2-standard-8")
