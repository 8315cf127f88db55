"""bench/snakemake_on_gce.py's bookkeeping (bench/suite_verdicts.py): the first problem line it
picks from a run's output, the table and its counts, and the JSON lines a later run is compared
with. The runs themselves are the benchmark's."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from suite_verdicts import (FAIL, NOT_RUN, PASS, TIMEOUT, CaseResult,  # noqa: E402
                            RunOutcome, cell, first_problem, read_jsonl, summary,
                            table)

SNAKEMAKE_FAILURE = """Building DAG of jobs...
Using shell: /usr/bin/bash
Error in rule a:
    message: None
    jobid: 1
MissingOutputException in rule a in file /tmp/case/Snakefile, line 3:
Job 1 completed successfully, but some output files are missing.
Shutting down, this might take some time.
Exiting because a job execution failed. Look for the error message above
"""


def outcome(verdict: str, problem: str = "", wall: float | None = 1.0) -> RunOutcome:
    return RunOutcome(verdict, wall, problem)


def test_a_named_exception_beats_snakemakes_error_header_and_its_heading_takes_the_next_line(
        ) -> None:
    assert first_problem(SNAKEMAKE_FAILURE) == (
        "MissingOutputException in rule a in file /tmp/case/Snakefile, line 3: "
        "Job 1 completed successfully, but some output files are missing.")


def test_expocloud_s_own_refusal_beats_everything_after_it() -> None:
    text = ("Building DAG of jobs...\nexpocloud: rule a needs 3 threads; no machine holds it on "
            "one slot (fix: --expocloud-slots-per-worker 4)\nWorkflowError:\nfailed\n")
    assert first_problem(text).startswith("expocloud: rule a needs 3 threads")


def test_the_closing_lines_are_never_the_problem_and_plain_text_falls_back_to_its_first_line(
        ) -> None:
    assert first_problem("Shutting down, this might take some time.\nError in rule b:\n") \
        == "Error in rule b:"
    assert first_problem("out.txt: not produced; b.txt: differs") == \
        "out.txt: not produced; b.txt: differs"
    assert first_problem("") == ""


def test_a_problem_is_one_table_cell() -> None:
    line = first_problem("ValueError: a|b " + "x" * 500)
    assert "\\|" in line and len(line) <= 320 and line.endswith("…")


def test_the_table_has_a_row_per_case_by_name_and_says_plain_s_problem_when_plain_fails(
        ) -> None:
    results = [
        CaseResult("test_b", outcome(PASS), outcome(FAIL, "WorkflowError: x")),
        CaseResult("test_a", outcome(FAIL, "exit code 1"), outcome(NOT_RUN, wall=None)),
        CaseResult("test_c", outcome(PASS), outcome(PASS, wall=12.4)),
    ]
    rows = table(results).splitlines()
    assert [row.split(" | ")[0] for row in rows[2:]] == ["| test_a", "| test_b", "| test_c"]
    assert rows[2] == "| test_a | fail | 1 | not run |  | plain: exit code 1 |"
    assert rows[3].endswith("| pass | 1 | fail | 1 | WorkflowError: x |")
    assert rows[4] == "| test_c | pass | 1 | pass | 12 |  |"
    assert summary(results) == ("3 cases; plain Snakemake passes 2 with the emulated bucket as "
                                "default storage; of those, through expocloud: 1 pass, 1 fail.")


def test_an_earlier_measurement_is_a_column_and_a_case_it_lacks_is_blank() -> None:
    now = [CaseResult("t1", outcome(PASS), outcome(PASS)),
           CaseResult("t2", outcome(PASS), outcome(TIMEOUT, "no end"))]
    before = {"t1": CaseResult("t1", outcome(PASS), outcome(FAIL, "x"))}
    rows = table(now, before).splitlines()
    assert "| before |" in rows[0]
    assert rows[2] == "| t1 | pass | 1 | pass | 1 | fail |  |"
    assert rows[3] == "| t2 | pass | 1 | timeout | 1 |  | no end |"


def test_json_lines_round_trip_and_a_later_line_for_a_case_wins() -> None:
    first = CaseResult("t1", outcome(PASS), outcome(FAIL, "a"))
    again = CaseResult("t1", outcome(PASS), outcome(PASS, wall=None))
    other = CaseResult("t2", outcome(FAIL, "b"), outcome(NOT_RUN, wall=None))
    text = "\n".join(r.to_json() for r in (first, other, again)) + "\n\n"
    assert read_jsonl(text) == {"t1": again, "t2": other}


def test_an_unknown_verdict_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown verdict 'ok'"):
        RunOutcome("ok")


def test_a_line_the_passing_run_printed_too_is_not_the_problem() -> None:
    plain = 'Building DAG of jobs...\nCyclicGraphException in rule r1 in file "S", line 4:\n'
    failed = plain + ("Uploading source archive to storage provider...\nWorkflowError:\n"
                      "threads of rule 'r1': it needs 3 threads but workers have 1 slots\n")
    assert first_problem(failed).startswith("CyclicGraphException")
    assert first_problem(failed, plain.splitlines()) == (
        "WorkflowError: threads of rule 'r1': it needs 3 threads but workers have 1 slots")


def test_a_cell_made_of_cells_escapes_each_pipe_once() -> None:
    assert cell(cell("a|b") + " — job log: c|d") == "a\\|b — job log: c\\|d"


def test_a_traceback_s_source_lines_are_not_the_problem() -> None:
    text = ('Traceback (most recent call last):\n  File "/x/io.py", line 12, in wait\n'
            '    raise IOError(\nOSError: Missing files after 5 seconds.\n')
    assert first_problem(text) == "OSError: Missing files after 5 seconds."
