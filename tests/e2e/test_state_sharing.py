"""Two runs sharing one state directory (C4): timeouts they add to one frontier at the same
time are all kept (a read-modify-write under the frontier's lock, temporary files of unique
names), in two real processes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from expo_executor.coordinator.state import FamilyRef, StateDir

ADDS = 150
ADDER = """
import sys, time
from pathlib import Path
from expo_executor.coordinator.state import FamilyRef, StateDir
from expo_executor.core.hardness import HardnessPoint

root, run, go = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
while not go.exists():  # both start together
    time.sleep(0.01)
state = StateDir(root)
ref = FamilyRef("wf", "rule", "n", 60.0)
for i in range({adds}):
    state.add_timeout(ref, HardnessPoint((), (run, i)), f"{{run}}-{{i}}", run)
"""


def test_two_processes_adding_timeouts_at_once_keep_all_of_them(tmp_path: Path) -> None:
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", ADDER.format(adds=ADDS),
                               str(tmp_path / "state"), run, str(go)],
                              stderr=subprocess.PIPE, text=True)
             for run in ("a", "b")]
    go.touch()
    errors = [proc.communicate(timeout=120)[1] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], errors
    path = StateDir(tmp_path / "state")._frontier_path(FamilyRef("wf", "rule", "n", 60.0))
    timeouts = json.loads(path.read_text())["timeouts"]
    assert sorted(t["label"] for t in timeouts) == sorted(
        f"{run}-{i}" for run in ("a", "b") for i in range(ADDS))
    assert not list((tmp_path / "state" / "frontiers").glob("*.tmp")), "no temporary file left"
