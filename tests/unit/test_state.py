"""Frontier persistence: per rule, spec and deadline; a longer deadline invalidates it."""

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
