"""The run records' one reader (runs/files.py): what report, cost, simulate and the tests read."""

from __future__ import annotations

import json
from pathlib import Path

from expo_executor.runs.files import JOBS, RUN, RunFiles, read_jsonl


def test_final_jobs_keep_each_keys_last_record_in_first_seen_order(tmp_path: Path) -> None:
    files = RunFiles(tmp_path)
    for record in ({"key": "a", "outcome": "failed"}, {"key": 7, "outcome": "solved"},
                   {"key": "a", "outcome": "solved"}, {"outcome": "no key"},
                   {"key": ["not", "a", "key"]}):
        files.append_job(record)
    with (tmp_path / JOBS).open("a") as handle:
        handle.write('{"key": "torn"')  # a run killed mid-write
    assert files.final_jobs() == [{"key": "a", "outcome": "solved"},
                                  {"key": 7, "outcome": "solved"}]
    assert len(files.jobs()) == 5, "every whole line, keyed or not; the torn one skipped"


def test_garbage_nested_past_the_parser_is_skipped_like_a_torn_line(tmp_path: Path) -> None:
    (tmp_path / JOBS).write_text("[" * 100_000 + "\n" + json.dumps({"key": "k"}) + "\n")
    assert read_jsonl(tmp_path / JOBS) == [{"key": "k"}]


def test_info_is_run_json_or_nothing(tmp_path: Path) -> None:
    files = RunFiles(tmp_path)
    assert files.info() == {}, "missing"
    (tmp_path / RUN).write_text("[1, 2]")
    assert files.info() == {}, "not an object"
    (tmp_path / RUN).write_text(json.dumps({"run_id": tmp_path.name, "ended": None}))
    assert files.info() == {"run_id": tmp_path.name, "ended": None}
    assert RunFiles(tmp_path / "missing").final_jobs() == []


def test_run_json_keeps_only_the_scheme_and_host_of_a_notification_url(tmp_path: Path) -> None:
    """A Slack webhook's path is its secret: run.json must not hold it."""
    from expo_executor.coordinator.settings import ExecutorSettings
    from expo_executor.runs.files import recorded

    files = RunFiles(tmp_path)
    hook = "https://user:pw@hooks.example.com:8443/services/T0/B0/SECRETPATH?token=SECRETQUERY"
    files.start("local", ExecutorSettings(notify=hook, notify_command="notify-me --x"))
    text = (tmp_path / "run.json").read_text()
    assert "SECRET" not in text and "pw@" not in text
    assert json.loads(text)["settings"]["notify"] == "https://hooks.example.com:8443/..."
    assert recorded({"notify": None, "engine": "gce"}) == {"notify": None, "engine": "gce"}


def test_the_workflow_name_is_the_snakefiles_project_or_the_cwl_documents(tmp_path: Path) -> None:
    files = RunFiles(tmp_path)
    assert files.workflow_name() == ""  # no run.json
    for source, name in ([{"snakefile": "/home/u/rnaseq/workflow/Snakefile"}, "rnaseq"],
                         [{"snakefile": "/home/u/sweep/Snakefile"}, "sweep"],
                         [{"cwl": "/home/u/tools/align.cwl"}, "align"]):
        (tmp_path / RUN).write_text(json.dumps(source))
        assert files.workflow_name() == name
