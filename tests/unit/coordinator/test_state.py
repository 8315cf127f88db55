"""Frontier persistence: per rule, spec, deadline, engine and machine; a longer deadline
invalidates it."""

import json
import os
from pathlib import Path

from expo_executor.core.hardness import HardnessPoint
from expo_executor.coordinator.state import FamilyRef, StateDir


def _ref(deadline: float, rule: str = "solve") -> FamilyRef:
    return FamilyRef("/wf/Snakefile", rule, "variant:a<b, n", deadline)


def test_timeouts_hold_for_equal_or_shorter_deadlines_only(tmp_path: Path) -> None:
    state = StateDir(tmp_path)
    state.add_timeout(_ref(60), HardnessPoint((), (1.0, 9.0)), "solve {variant=b, n=9}", "r1")
    assert [p.label for p in state.load_frontier(_ref(60)).points] == ["solve {variant=b, n=9}"]
    assert len(state.load_frontier(_ref(30)).points) == 1  # would time out again
    assert state.load_frontier(_ref(120)).points == []  # raising the deadline explores again
    assert state.load_frontier(_ref(60, rule="other")).points == []


def test_forget_drops_frontiers_and_only_unchanged_placeholders(tmp_path: Path) -> None:
    state = StateDir(tmp_path / ".expocloud")
    state.add_timeout(_ref(60), HardnessPoint((), (1.0, 9.0)), "x", "r1")
    kept, replaced = tmp_path / "out" / "a.json", tmp_path / "out" / "b.json"
    kept.parent.mkdir()
    kept.write_text("PLACEHOLDER")
    replaced.write_text("PLACEHOLDER")
    state.add_placeholders({"out/a.json": b"PLACEHOLDER", "out/b.json": b"PLACEHOLDER"},
                           "solve", "skipped", "r1")
    replaced.write_text('{"cost": 3}')  # a real result written since: must survive
    assert state.forget() == (1, 1)
    assert not kept.exists() and replaced.exists()
    assert state.load_frontier(_ref(60)).points == []


def _on(engine: str, machine: str, deadline: float = 60) -> FamilyRef:
    return FamilyRef("/wf/Snakefile", "solve", "variant:a<b, n", deadline, engine, machine)


def test_a_timeout_prunes_only_runs_on_the_same_engine_and_machine(tmp_path: Path) -> None:
    state = StateDir(tmp_path)
    laptop, vm = _on("local", "Apple M2 x 8"), _on("gce", "e2-standard-2")
    state.add_timeout(laptop, HardnessPoint((), (1.0, 9.0)), "on the laptop", "r1")
    state.add_timeout(vm, HardnessPoint((), (0.0, 3.0)), "on GCE", "r2")
    assert [p.label for p in state.load_frontier(laptop).points] == ["on the laptop"]
    assert [p.label for p in state.load_frontier(vm).points] == ["on GCE"]
    assert state.load_frontier(_on("gce", "c2-standard-8")).points == []
    assert state.load_frontier(_on("local", "Intel Xeon x 2")).points == []
    assert laptop.key != vm.key  # the scheduler's in-memory frontiers are apart too


def test_a_frontier_file_older_than_the_engine_key_applies_to_the_local_engine_only(
        tmp_path: Path) -> None:
    old = tmp_path / "frontiers" / f"{_on('local', 'any host').legacy_digest}.json"
    old.parent.mkdir(parents=True)
    old.write_text(json.dumps({"v": 1, "workflow": "/wf/Snakefile", "rule": "solve",
                               "spec": "variant:a<b, n", "timeouts": [
                                   {"deadline_s": 60, "scope": [], "vector": [1.0, 9.0],
                                    "label": "old timeout", "run": "r0"}]}))
    state = StateDir(tmp_path)
    assert [p.label for p in state.load_frontier(_on("local", "Apple M2 x 8")).points] == \
        ["old timeout"]
    assert state.load_frontier(_on("gce", "e2-standard-2")).points == []


def test_local_runs_are_timed_on_this_host_and_gce_runs_on_the_jobs_machine() -> None:
    from expo_executor.coordinator.measured_on import local_host, measured_on
    from expo_executor.coordinator.settings import ExecutorSettings
    from expo_executor.core.shapes import Shape

    engine, host = measured_on(ExecutorSettings(engine="local"))
    assert engine == "local" and host == local_host() and host.endswith(f" x {os.cpu_count()}")
    gce = ExecutorSettings(engine="gce", gce_machine_type="e2-standard-2")
    assert measured_on(gce) == ("gce", "e2-standard-2")
    assert measured_on(gce, Shape("n1-standard-4", "nvidia-tesla-t4", 1, 100)) == \
        ("gce", "n1-standard-4 + 1 x nvidia-tesla-t4")  # the disk does not time anything
    mixed = ExecutorSettings(engine="gce", gce_machine_type="e2-standard-2",
                             gce_on_demand_machine_type="n2-standard-2")
    assert measured_on(mixed) == ("gce", "e2-standard-2 or n2-standard-2")


def test_a_runtime_model_is_kept_beside_its_frontier_and_forgotten_with_it(
        tmp_path: Path) -> None:
    state = StateDir(tmp_path / ".expocloud")
    assert state.load_model(_ref(60)) is None
    state.add_timeout(_ref(60), HardnessPoint((), (1.0, 9.0)), "x", "r1")
    state.save_model(_ref(60), {"observed": 7})
    assert state.load_model(_ref(60)) == {"observed": 7}
    assert state.load_model(_ref(30)) == {"observed": 7}  # learned with a longer deadline
    assert state.load_model(_ref(120)) is None  # its censored runs might finish now
    assert state.load_model(_ref(60, rule="other")) is None
    assert state.forget(rule="solve") == (1, 0)  # one frontier (its model goes uncounted)
    assert state.load_model(_ref(60)) is None


def test_only_a_recorded_timeout_counts_as_a_known_frontier(tmp_path: Path) -> None:
    """The head start leaves out rules with hardness once a timeout is known here
    (frontends/snakemake/head_start.py); a saved runtime model alone is no timeout."""
    state = StateDir(tmp_path / ".expocloud")
    assert not state.has_frontiers()
    state.save_model(_ref(60), {"observed": 7})
    assert not state.has_frontiers()
    state.add_timeout(_ref(60), HardnessPoint((), (1.0, 9.0)), "x", "r1")
    assert state.has_frontiers()
