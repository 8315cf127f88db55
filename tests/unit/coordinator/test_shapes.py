"""A rule's resources read into its machine (coordinator.shapes.ShapeBook.shape_of): which
shape, the run's own when it asks for nothing of its own and fits them, a machine chosen for a
job that does not (coordinator.rule_machines.MachineFit, over the bundled price snapshot), and
one line for what GCE refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from expo_executor.coordinator.rule_machines import shape_book
from expo_executor.coordinator.settings import ExecutorSettings
from expo_executor.coordinator.shapes import RunMachines, ShapeBook, named_shapes
from expo_executor.coordinator.state import StateDir
from expo_executor.core.errors import ExpoError
from expo_executor.core.scheduler import Pool
from expo_executor.core.shapes import Shape
from expo_executor.cost import machines
from expo_executor.settings.values import with_default_slots

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


def test_a_rules_own_labels_give_it_vms_of_its_own_labelled_with_its_name() -> None:
    own = _shape({"gce_labels": "team=ml,project=x"})
    assert own == Shape("e2-standard-2", labels=(("expocloud-rule", "r"), ("project", "x"),
                                                 ("team", "ml")))
    assert _shape({"gce_labels": ""}) is None  # no labels: the run's shared VMs
    big = _shape({"machine_type": "n2-standard-8", "gce_labels": "team=ml"})
    assert big is not None and big.machine_type == "n2-standard-8"
    assert dict(big.labels) == {"team": "ml", "expocloud-rule": "r"}
    grouped = ShapeBook(RUN).shape_of("group Align", {"gce_labels": "t=1"}.get, 1, 0)
    assert grouped is not None and dict(grouped.labels)["expocloud-rule"] == "group-align"


@pytest.mark.parametrize("labels, words", [
    ("Team=ml", "resource 'gce_labels' of rule 'r': not a valid label: label key 'Team' does "
                "not start with a lowercase letter"),
    ("team=M L", "holds 'M'"),
    ("expocloud-rule=x", "is reserved"),
    (",".join(f"k{i}=v" for i in range(58)), "more than 57 labels"),
])
def test_a_rules_bad_labels_are_one_line_before_any_vm(labels: str, words: str) -> None:
    with pytest.raises(ExpoError) as info:
        _shape({"gce_labels": labels})
    assert words in str(info.value) and "\n" not in str(info.value)


def test_a_gpu_rule_needs_a_gpu_image_said_before_any_vm() -> None:
    with pytest.raises(ExpoError) as info:
        _shape({"machine_type": "g2-standard-8"}, gpu_image=None)  # comes with an L4
    assert "resource 'gpu_type' of rule 'r'" in str(info.value)
    assert "--expocloud-gce-gpu-image" in str(info.value)
    assert _shape({"machine_type": "n2-standard-8"}, gpu_image=None) == Shape("n2-standard-8")


# -- a job the run's own workers cannot hold, and no machine named: one is chosen -------------
GCE = {"engine": "gce", "gce_project": "p", "gce_zones": "us-central1-a", "max_workers": 2}
UNPRICED = "southamerica-east1"  # a region the bundled price snapshot does not hold


def _book(tmp_path: Path, lines: list[str],
          planned: dict[str, int] | None = None, **given: object) -> ShapeBook:
    """The ShapeBook of a GCE run of these settings (GCE defaults: 1 slot of e2-standard-2),
    with the bundled price snapshot, no earlier runs, ``planned`` jobs per rule and its log
    lines into ``lines``."""
    settings = with_default_slots(ExecutorSettings(**{**GCE, **given}))
    book = shape_book(settings, {}, StateDir(tmp_path), lines.append, planned)
    assert book is not None
    return book


def test_a_job_beyond_the_runs_workers_gets_the_machine_auto_would_choose(tmp_path: Path) -> None:
    lines: list[str] = []
    book = _book(tmp_path, lines, planned={"a": 1000})  # a sweep: many jobs share its VMs
    shape = book.shape_of("a", {}.get, 3, 0)
    assert shape is not None and shape.gpu_type is None and not shape.disk_gb
    dims = machines.shape(shape.machine_type)
    assert dims is not None and dims.vcpus >= 3 and shape.machine_type != "e2-standard-2"
    assert book.size(shape).slots == dims.vcpus  # it runs on one worker of that shape
    # the same choice as a rule's machine_type: auto for the same threads (one chooser)
    auto = shape_book(with_default_slots(ExecutorSettings(**GCE)), {"b": (3, 0, None)},
                      StateDir(tmp_path), lambda line: None)
    assert auto is not None and auto.shape_of("b", {"machine_type": "auto"}.get, 3, 0) == shape
    assert len(lines) == 1 and lines[0].startswith(
        f"expocloud: rule 'a' needs 3 thread(s): its jobs run on {shape.machine_type} "
        "(cheapest that holds them: Spot ")
    assert "per job expected" in lines[0] and "prices: snapshot" in lines[0]


def test_a_rule_of_few_jobs_is_not_given_a_vm_for_many(tmp_path: Path) -> None:
    """Cost per job counts a VM's slots as shared by the rule's jobs: one job pays for the
    whole VM, so it gets the cheapest VM for one; a sweep of them may get a larger VM each of
    whose jobs costs less."""
    lines: list[str] = []
    book = _book(tmp_path, lines, planned={"one": 1, "sweep": 1000})
    one, sweep = book.shape_of("one", {}.get, 3, 0), book.shape_of("sweep", {}.get, 3, 0)
    assert one is not None and sweep is not None
    assert "(1 at once" in lines[0] and machines.shape(one.machine_type).vcpus < 6
    assert machines.shape(sweep.machine_type).vcpus >= machines.shape(one.machine_type).vcpus
    group = book.shape_of("group 0", {}.get, 3, 0)  # not planned as a rule: one at a time
    assert group == one


def test_each_need_is_chosen_and_said_once(tmp_path: Path) -> None:
    lines: list[str] = []
    book = _book(tmp_path, lines)
    first = book.shape_of("a", {}.get, 3, 0)
    assert [book.shape_of("a", {}.get, 3, 0) for _ in range(3)] == [first] * 3
    assert len(lines) == 1
    bigger = book.shape_of("a", {}.get, 20, 0)  # a resource function gave this job more
    assert bigger is not None and machines.shape(bigger.machine_type).vcpus >= 20
    memory = book.shape_of("a", {}.get, 1, 20_000)  # more than an e2-standard-2's 8 GB
    assert memory is not None and machines.shape(memory.machine_type).memory_mb >= 20_000
    assert len(lines) == 3 and "needs 1 thread(s) and 20000 MB" in lines[2]
    assert book.shape_of("a", {}.get, 1, 0) is None  # the run's own hold it: nothing said
    assert book.shape_of("c", {"disk_mb": 200_000}.get, 1, 0) == \
        Shape("e2-standard-2", disk_gb=196 + 10)  # a disk only: the run's type, a larger disk
    assert len(lines) == 3


def test_a_group_job_is_sized_for_the_whole_group(tmp_path: Path) -> None:
    """A group job's threads and memory are what its jobs need together (Snakemake's group
    resources; a pipe group's jobs at once): one machine holds them all."""
    lines: list[str] = []
    shape = _book(tmp_path, lines).shape_of("group 0", {"mem_mb": 9000}.get, 2, 9000)
    assert shape is not None
    dims = machines.shape(shape.machine_type)
    assert dims is not None and dims.vcpus >= 2 and dims.memory_mb >= 9000
    assert lines[0].startswith(f"expocloud: group 0 needs 2 thread(s) and 9000 MB: its jobs run "
                               f"on {shape.machine_type}")


def test_a_named_machine_and_auto_still_win(tmp_path: Path) -> None:
    lines: list[str] = []
    book = _book(tmp_path, lines, gce_gpu_image="projects/p/global/images/gpu-worker")
    assert book.shape_of("a", {"machine_type": "n2-standard-8"}.get, 3, 0) == \
        Shape("n2-standard-8")
    gpu = book.shape_of("g", {"gpu_type": "nvidia-tesla-t4"}.get, 3, 0)
    assert gpu is not None and gpu.machine_type.startswith("n1-standard-")
    assert lines == []  # nothing chosen for them


def test_slots_the_user_set_size_the_runs_own_and_a_job_beyond_gets_a_machine(
        tmp_path: Path) -> None:
    lines: list[str] = []
    book = _book(tmp_path, lines, slots_per_worker=2)
    assert book.shape_of("a", {}.get, 2, 0) is None  # the run's own 2-slot workers hold it
    beyond = book.shape_of("b", {}.get, 3, 0)
    assert beyond is not None and machines.shape(beyond.machine_type).vcpus >= 3


@pytest.mark.parametrize("threads, mem_mb, words", [
    (500, 0, "threads of rule 'r': it needs 500 threads, more than any machine type has"),
    (1, 10_000_000_000, "resource 'mem_mb' of rule 'r': it needs 10000000000 MB, more than any"),
])
def test_what_no_machine_holds_is_refused_in_one_line(tmp_path: Path, threads: int, mem_mb: int,
                                                      words: str) -> None:
    with pytest.raises(ExpoError) as info:
        _book(tmp_path, []).shape_of("r", {}.get, threads, mem_mb)
    assert str(info.value).startswith(words) and "fix: lower the rule's" in str(info.value)
    assert "\n" not in str(info.value)


def test_without_prices_the_smallest_standard_type_that_holds_it(tmp_path: Path) -> None:
    lines: list[str] = []
    book = _book(tmp_path, lines, gce_zones=f"{UNPRICED}-a")
    assert book.shape_of("a", {}.get, 3, 0) == Shape("e2-standard-4")
    assert book.shape_of("a", {}.get, 40, 0) == Shape("c3-standard-44")  # fewest vCPUs
    assert "smallest standard type that holds them; no prices to choose by" in lines[0]
    with pytest.raises(ExpoError, match="it needs 500 threads"):
        book.shape_of("a", {}.get, 500, 0)


def test_with_a_budget_every_chosen_machine_is_priced(tmp_path: Path) -> None:
    book = _book(tmp_path, [], budget=5.0)
    shape = book.shape_of("a", {}.get, 40, 0)  # beyond the usual 32 vCPUs: still priced
    assert shape is not None and book.priced
    assert book.hourly(shape, Pool.SPOT) > 0 and book.hourly(shape, Pool.ON_DEMAND) > 0


def test_the_doctor_checks_the_machines_a_profiles_threads_need(tmp_path: Path) -> None:
    book = _book(tmp_path, [])
    shapes = named_shapes(book, {"a": {"_cores": 3}, "b": {"mem_mb": 1000}})
    assert len(shapes) == 1 and machines.shape(shapes[0].machine_type).vcpus >= 3
