"""The agent-assignment example workflow (workflows/agent-assignment), for the tests that use
it: its scripts loaded as modules, an independent reference solver, and its hardness order."""

from __future__ import annotations

import functools
import importlib.util
import itertools
import sys
from pathlib import Path
from types import ModuleType

from tests.helpers import REPO

WORKFLOW = REPO / "workflows" / "agent-assignment"
SCRIPTS = WORKFLOW / "scripts"
VARIANTS = ("brute", "bnb", "heuristic")
RANK = {"heuristic": 0, "bnb": 1, "brute": 2}  # the profile's order: heuristic < bnb < brute


@functools.cache
def script(name: str) -> ModuleType:
    """``scripts/<name>.py`` as a module (its sibling atomic.py importable, as when run)."""
    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))
    spec = importlib.util.spec_from_file_location(f"agent_assignment_{name}", SCRIPTS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def reference_cost(times: list[list[int]]) -> int:
    """Independent brute force: times[a][t], one distinct agent per task."""
    n_agents, n_tasks = len(times), len(times[0])
    return min(sum(times[a][t] for t, a in enumerate(perm))
               for perm in itertools.permutations(range(n_agents), n_tasks))


def hardness_vector(wildcards: dict) -> tuple[int, int, int]:
    """A solve job's point in the profile's hardness order (variant, n_tasks, n_agents)."""
    return (RANK[wildcards["variant"]], int(wildcards["n_tasks"]), int(wildcards["n_agents"]))


def write_file(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path
