"""The test tree's layout (docs/development.md, Tests), checked from the file names:

- the unit tier mirrors the package: every folder under ``tests/unit`` is a package
  (``__init__.py``) named after a package of ``expo_executor`` at the same path, and every test
  file in it is ``test_<module>[_<scenario>].py`` after a module of that package, or
  ``test_<package>.py`` for the package as a whole;
- only the tests of the whole package or of what lies outside it sit at ``tests/unit`` itself
  (``TOP_LEVEL``): a new unit test goes into the folder of the module it tests;
- no test file's name is in two tiers (unit, e2e, faults): an end-to-end file that tests what a
  unit file tests in process says how in its name.

Each check is a plain function over a tree, also run on a small made-up tree that breaks it.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
PACKAGE = TESTS.parent / "expo_executor"
TIERS = ("unit", "e2e", "faults")
# tests/unit/test_*.py: the package as a whole, its command line (cli.py), or what lies outside
# the package (the docs, bench/, the example workflow, the test harness itself)
TOP_LEVEL = frozenset({
    "test_agent_assignment.py",  # workflows/agent-assignment's scripts
    "test_architecture.py",
    "test_bad_input.py",  # the bad-input table, tests/bad_input_cases.py
    "test_bench_dispatch.py",  # bench/
    "test_bench_suite_verdicts.py",  # bench/
    "test_bench_sweep.py",  # bench/
    "test_cli.py",  # expo_executor/cli.py
    "test_docs.py",
    "test_layout.py",
    "test_network_guard.py",  # tests/conftest.py
    "test_security.py",  # docs/security.md, across the package
})


def _modules(package: Path) -> set[str]:
    return {path.stem for path in package.glob("*.py") if path.stem != "__init__"}


def _names_a_module(stem: str, modules: set[str], package: str) -> bool:
    """``test_<module>`` or ``test_<module>_<scenario>``, or ``test_<package>``."""
    name = stem.removeprefix("test_")
    return name == package or any(name == module or name.startswith(module + "_")
                                  for module in modules)


def misplaced(unit: Path, package: Path, top_level: Iterable[str]) -> list[str]:
    """What breaks the unit tier's mirror of ``package``, one line each."""
    problems = [f"{path.name}: a unit test at the top; its module's folder, or TOP_LEVEL"
                for path in sorted(unit.glob("test_*.py")) if path.name not in set(top_level)]
    for folder in sorted(p for p in unit.rglob("*") if p.is_dir() and p.name != "__pycache__"):
        relative = folder.relative_to(unit)
        mirror = package / relative
        if not (mirror / "__init__.py").is_file():
            problems.append(f"{relative}/: no package {package.name}/{relative}")
            continue
        if not (folder / "__init__.py").is_file():
            problems.append(f"{relative}/: no __init__.py (same-named files would clash)")
        modules = _modules(mirror)
        problems += [f"{relative}/{path.name}: names no module of {package.name}/{relative}"
                     for path in sorted(folder.glob("test_*.py"))
                     if not _names_a_module(path.stem, modules, folder.name)]
    return problems


def shared_names(tests: Path, tiers: Iterable[str] = TIERS) -> list[str]:
    """Test file names found in more than one tier."""
    seen: dict[str, list[str]] = {}
    for tier in tiers:
        for name in sorted({path.name for path in (tests / tier).rglob("test_*.py")}):
            seen.setdefault(name, []).append(tier)
    return [f"{name}: in {', '.join(found)}" for name, found in sorted(seen.items())
            if len(found) > 1]


def test_the_unit_tier_mirrors_the_package() -> None:
    assert misplaced(TESTS / "unit", PACKAGE, TOP_LEVEL) == []


def test_no_test_file_name_is_in_two_tiers() -> None:
    assert shared_names(TESTS) == []


def _touch(root: Path, *paths: str) -> None:
    for relative in paths:
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()


def test_the_checks_catch_what_they_are_for(tmp_path: Path) -> None:
    package, tests = tmp_path / "pkg", tmp_path / "tests"
    _touch(package, "__init__.py", "core/__init__.py", "core/scheduler.py",
           "engines/__init__.py", "engines/gce/__init__.py", "engines/gce/doctor.py")
    _touch(tests / "unit", "test_docs.py", "test_places.py", "core/__init__.py",
           "core/test_scheduler.py", "core/test_scheduler_domino.py", "core/test_core.py",
           "core/test_places.py", "engines/__init__.py", "engines/gce/test_doctor.py",
           "worker/__init__.py", "worker/test_agent.py")
    _touch(tests, "e2e/test_doctor.py", "e2e/test_cwl.py", "faults/test_cwl.py")
    assert misplaced(tests / "unit", package, {"test_docs.py"}) == [
        "test_places.py: a unit test at the top; its module's folder, or TOP_LEVEL",
        "core/test_places.py: names no module of pkg/core",
        "engines/gce/: no __init__.py (same-named files would clash)",
        "worker/: no package pkg/worker",
    ]
    assert shared_names(tests) == ["test_cwl.py: in e2e, faults",
                                   "test_doctor.py: in unit, e2e"]
