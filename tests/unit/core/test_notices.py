"""Which notices are due, and what they carry: the stall rule, the first failure once, and the
documents (small, one-line text, only their typed fields)."""

from __future__ import annotations

import json

from expo_executor.core import notices
from expo_executor.core.notices import (MAX_TEXT, BudgetChange, Kind, RunEnd, Stalled, Watch,
                                        failure_due, stall_step)


def _steps(watch: Watch, steps: list[tuple[float, tuple[int, int], int]],
           after: float = 60.0) -> list[bool]:
    said = []
    for now, marker, workers in steps:
        watch, due = stall_step(watch, marker, workers, now, after)
        said.append(due)
    return said


def test_a_stall_is_said_once_after_the_time_without_progress_while_workers_live() -> None:
    said = _steps(Watch(), [(0, (1, 0), 2), (30, (1, 0), 2), (59, (1, 0), 2), (60, (1, 0), 2),
                            (200, (1, 0), 2)])
    assert said == [False, False, False, True, False]


def test_progress_or_no_worker_starts_the_clock_again() -> None:
    # a job ends at 50: the clock starts again; then it may stall again, once
    assert _steps(Watch(), [(0, (1, 0), 1), (50, (1, 1), 1), (100, (1, 1), 1),
                            (110, (1, 1), 1)]) == [False, False, False, True]
    # nothing billed between 30 and 90: no stall however long the marker stands still
    assert _steps(Watch(), [(0, (1, 0), 1), (30, (1, 0), 0), (90, (1, 0), 0), (100, (1, 0), 1),
                            (159, (1, 0), 1), (160, (1, 0), 1)]) == [False] * 5 + [True]
    # a stall said is said again only after progress
    assert _steps(Watch(), [(0, (0, 0), 1), (60, (0, 0), 1), (61, (1, 0), 1), (121, (1, 0), 1),
                            (500, (1, 0), 1)]) == [False, True, False, True, False]


def test_never_turns_the_stall_off() -> None:
    assert not any(_steps(Watch(), [(t, (0, 0), 3) for t in (0, 1e6, 1e9)], after=float("inf")))


def test_the_first_failure_is_due_once() -> None:
    watch, first = failure_due(Watch())
    watch, second = failure_due(watch)
    assert (first, second) == (True, False)


def test_a_payload_is_small_and_carries_only_its_fields() -> None:
    reason = "exit status 1: " + "x" * 5000 + "\nsecond line"
    notice = notices.first_failure("r1", 12.5, "align {i=3}", reason)
    payload = notice.to_dict()
    assert set(payload) == {"v", "event", "run_id", "time", "text", "job", "reason"}
    assert payload["event"] == "first_failure" and payload["run_id"] == "r1"
    assert len(payload["reason"]) == MAX_TEXT and "\n" not in payload["text"]
    assert len(json.dumps(payload)) < 1000


def test_the_run_end_says_counts_cost_and_wall() -> None:
    notice = notices.run_end("r1", 100.0, RunEnd({"solved": 7, "failed": 2}, 0.0123, 1.0, 90.0))
    assert notice.kind is Kind.RUN_END
    assert notice.text == "expocloud run r1 ended with 2 failed jobs: 7 solved, 2 failed, " \
                          "$0.0123, 1.5 min"
    payload = notice.to_dict()
    assert payload["counts"] == {"solved": 7, "failed": 2} and payload["cost_usd"] == 0.0123
    assert payload["wall_s"] == 90.0 and payload["budget_usd"] == 1.0
    clean = notices.run_end("r1", 100.0, RunEnd({"solved": 1}, None, None, 6.0))
    assert clean.text == "expocloud run r1 ended: 1 solved, 0.1 min"


def test_budget_stall_and_pool_texts() -> None:
    budget = notices.budget("r", 1.0, BudgetChange("limit", 0.5, 0.6, "drain"))
    assert budget.text == "expocloud run r: budget $0.5000 of $0.6: at the limit (drain)"
    assert budget.to_dict()["phase"] == "limit"
    stalled = notices.stalled("r", 1.0, Stalled(1800.0, 1, 4, 0))
    assert stalled.text == ("expocloud run r: no job started or ended for 30.0 min while 1 "
                            "worker is alive (4 queued, 0 running)")
    pool = notices.pool_stopped("r", 1.0, "spot", "e2-standard-2", "no capacity")
    assert pool.to_dict()["pool"] == "spot" and "e2-standard-2" in pool.text
