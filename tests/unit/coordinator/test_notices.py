"""The run's events reach the notifier through the real coordinator, round by round
(tests/coordinator_rig.py): the first failed job once, a pool stopped, a budget phase change,
a stall while workers live, and the run's end with its summary, flushed by ``stop``. The
notifier's target is an in-process recorder (the real webhook and command:
tests/e2e/test_notify_receiver_runs.py)."""

from __future__ import annotations

import json
from pathlib import Path

from expo_executor.coordinator.meter import Meter
from expo_executor.core.budget import BudgetConfig
from expo_executor.core.scheduler import Pool
from expo_executor.engines.base import CreateFailed
from expo_executor.notify.sender import Notifier, Pace

from tests.coordinator_rig import Rig


class Recorder:
    name = "recorder"

    def __init__(self) -> None:
        self.bodies: list[dict] = []

    def send(self, body: bytes, timeout: float) -> None:
        self.bodies.append(json.loads(body))


def _rig(tmp_path: Path, stall_after: float = 1e9) -> tuple[Rig, Recorder]:
    rig, target = Rig(tmp_path, slots=1, workers=2), Recorder()
    notices = rig.coordinator.notices
    notices.notifier = Notifier([target], rig.lines.append, Pace(backoff_s=0.0, flush_s=5.0))
    notices.stall_after = stall_after
    notices.clock = lambda: rig.now
    return rig, target


def _events(target: Recorder) -> list[str]:
    return [body["event"] for body in target.bodies]


def test_the_first_failure_once_then_the_run_end_with_its_summary(tmp_path: Path) -> None:
    rig, target = _rig(tmp_path)
    rig.submit("a", "b", "c")
    rig.round()
    rig.ready("w-1")
    rig.ready("w-2")
    rig.round()
    rig.result("a", "w-1", "failed", reason="exit status 3")
    rig.result("b", "w-2", "failed", reason="exit status 4")
    rig.round()
    rig.result("c", "w-1" if "c" in rig.assigned("w-1") else "w-2", "solved")
    rig.round()
    rig.coordinator.stop()
    rig.coordinator.stop()  # twice: one run end
    assert _events(target) == ["first_failure", "run_end"], target.bodies
    failure, end = target.bodies
    assert failure["job"] in ("a", "b") and failure["reason"].startswith("failed on worker")
    assert end["counts"] == {"solved": 1, "failed": 2} and end["cost_usd"] is None
    assert end["run_id"] == "run" and end["wall_s"] >= 0
    assert "ended with 2 failed jobs" in end["text"]


def test_a_pool_stopped_for_the_run_is_notified(tmp_path: Path) -> None:
    rig, target = _rig(tmp_path)
    refusal = CreateFailed(Pool.LOCAL, ["w-1"], "quota 'CPUS' exceeded in us-central1",
                           stop_growth=True)
    rig.engine.failures = lambda: [refusal] if refusal is not None else []  # type: ignore
    rig.submit("a")
    rig.round()
    refusal = None
    rig.round()
    rig.coordinator.stop()
    assert _events(target)[0] == "pool_stopped", target.bodies
    stopped = target.bodies[0]
    assert (stopped["pool"], stopped["why"]) == ("local", "quota 'CPUS' exceeded in us-central1")


def test_a_budget_phase_change_is_notified(tmp_path: Path) -> None:
    """$1 a second against a $100 budget: one VM alive would overrun it within the horizon,
    so the run drains at once."""
    rig, target = _rig(tmp_path)
    budget = BudgetConfig(100.0, "drain", horizon_s=300.0, margin_s=10.0)
    rig.coordinator.meter = Meter({Pool.LOCAL: 3600.0}, budget, [Pool.LOCAL], rig.lines.append)
    rig.submit("a", "b", "c", "d")
    rig.round()
    rig.ready("w-1")
    rig.round()
    rig.coordinator.stop()
    budget_bodies = [b for b in target.bodies if b["event"] == "budget"]
    assert [(b["phase"], b["limit_usd"], b["action"]) for b in budget_bodies] == [
        ("limit", 100.0, "drain")], target.bodies


def test_a_run_with_no_progress_while_workers_live_is_stalled_once(tmp_path: Path) -> None:
    rig, target = _rig(tmp_path, stall_after=60.0)
    rig.submit("a")
    rig.round()
    rig.ready("w-1")
    rig.round()
    for _ in range(3):  # a running job that says nothing for 100 s
        rig.round(50.0)
        rig.coordinator._progress(rig.now, force=True)
    rig.coordinator.stop()
    stalls = [b for b in target.bodies if b["event"] == "stalled"]
    assert len(stalls) == 1, target.bodies
    assert stalls[0]["running"] == 1 and stalls[0]["workers"] == 1
    assert stalls[0]["idle_s"] >= 60


def test_without_a_notifier_nothing_is_sent_and_nothing_changes(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    assert rig.coordinator.notices.notifier is None
    rig.submit("a")
    rig.round()
    rig.ready("w-1")
    rig.round()
    rig.result("a", "w-1", "failed")
    rig.round()
    rig.coordinator.stop()
    assert not any("notification" in line for line in rig.lines)
