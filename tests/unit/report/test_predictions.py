"""The report's runtime model against the truth (report/predictions.py)."""

from __future__ import annotations

from expo_executor.report.predictions import RulePredictions, compare, to_markdown


def _job(outcome: str, predicted: float, actual: float | None, rule: str = "solve") -> dict:
    return {"rule": rule, "outcome": outcome, "predicted_s": predicted,
            "predicted_low_s": predicted / 2, "predicted_high_s": predicted * 2,
            "command_s": actual, "runtime_s": actual, "deadline_s": 100.0}


def test_solved_timeouts_and_skips_are_each_counted_their_own_way() -> None:
    jobs = [_job("solved", 10.0, 12.0), _job("solved", 10.0, 30.0),  # in, out of interval
            _job("timeout", 60.0, 100.0),  # its interval reached the deadline: hit
            _job("timeout", 10.0, 100.0),  # it did not: miss
            _job("model-skipped", 500.0, None),
            {"rule": "other", "outcome": "solved", "runtime_s": 3.0}]  # no prediction
    assert compare(jobs) == [RulePredictions("solve", 4, 2.1, 0.5, 1)]


def test_the_table_reads_per_rule() -> None:
    table = to_markdown([RulePredictions("solve", 4, 2.1, 0.5, 1),
                         RulePredictions("fit", 0, None, 0.0, 2)])
    assert table.splitlines()[2:] == ["| solve | 4 | 2.1 | 50% | 1 |", "| fit | 0 | - | 0% | 2 |"]
