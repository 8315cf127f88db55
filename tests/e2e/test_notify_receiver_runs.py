"""Notifications end to end: the signed POST against a local receiver, the command with the
document on its stdin (uninterpreted), the Slack recipe as the docs print it, and whole runs on
the local engine (Snakemake, and expocloud-cwl): the receiver sees the first failure and the run
end with valid signatures, and a receiver that hangs or a closed port changes nothing in the
run. The budget's payloads on the emulated GCE path: tests/e2e/test_budget.py."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from expo_executor.core import notices
from expo_executor.core.notices import SECRET_ENV, RunEnd
from expo_executor.notify.sender import Notifier, Pace, body_of
from expo_executor.notify.targets import Command, SendFailed, Webhook

from tests.helpers import REPO, SNAKEMAKE, job_records, run_dirs
from tests.notify_receiver import SECRET, closed_port_url, receiver

EXPOCLOUD_CWL = str(Path(sys.executable).parent / "expocloud-cwl")
# records each document it gets on stdin, and whether the signing secret was in its environment
RECORDER = f"""import json, os, sys
body = json.load(sys.stdin)
body["secret_in_env"] = {SECRET_ENV!r} in os.environ
with open(sys.argv[1], "a") as out:
    out.write(json.dumps(body) + "\\n")
"""
SWEEP = """
rule all:
    input: expand("out/{i}.txt", i=range(4))

rule work:
    output: "out/{i}.txt"
    shell: "if [ {wildcards.i} = 1 ]; then echo boom >&2; exit 3; fi; echo ok > {output}"
"""


def _end_notice() -> notices.Notice:
    return notices.run_end("r", 1.0, RunEnd({"solved": 1}, None, None, 2.0))


def _recorded(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_webhook_post_is_signed_and_a_failure_says_whether_to_retry() -> None:
    body = body_of(_end_notice())
    with receiver() as got:
        Webhook(got.url, SECRET).send(body, 5.0)
        assert got.bodies == [json.loads(body)] and got.signed == [True]
        for status, retry in ((503, True), (429, True), (404, False)):
            got.status = status
            with pytest.raises(SendFailed) as failed:
                Webhook(got.url, SECRET).send(body, 5.0)
            assert (str(failed.value), failed.value.retry) == (f"HTTP {status}", retry)
    with pytest.raises(SendFailed) as refused:
        Webhook(closed_port_url(), SECRET).send(body, 5.0)
    assert refused.value.retry and "SECRET" not in str(refused.value)
    with receiver(hang=True) as hanging:
        with pytest.raises(SendFailed) as timed_out:
            Webhook(hanging.url, SECRET).send(body, 0.5)
        assert timed_out.value.retry and hanging.arrived.is_set()
    assert repr(Webhook("https://h/x", SECRET)).count("test-notify-secret") == 0


def test_a_command_gets_the_document_on_stdin_uninterpreted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SECRET_ENV, "hunter2")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "record.py").write_text(RECORDER)
    hostile = "$(touch pwned) `touch pwned2`; touch pwned3 'x"
    lines: list[str] = []
    notifier = Notifier([Command((sys.executable, "record.py", str(tmp_path / "got.jsonl"))),
                         Command(("false",))], lines.append, Pace(backoff_s=0.0))
    notifier.post(notices.first_failure("r", 1.0, "work {i=1}", hostile))
    notifier.close()
    got = _recorded(tmp_path / "got.jsonl")
    assert [g["reason"] for g in got] == [hostile]
    assert got[0]["secret_in_env"] is False
    assert not list(tmp_path.glob("pwned*"))
    assert lines == ["expocloud: notification first_failure to false not sent after 4 attempts: "
                     "exit status 1"]


def test_the_slack_recipe_forwards_the_text(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/recipes.md's forwarder, as printed, against a receiver standing in for Slack."""
    page = (REPO / "docs" / "recipes.md").read_text()
    section = page.split("## A Slack webhook", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None, "the recipe lost its forwarder"
    (tmp_path / "notify-slack.py").write_text(
        "\n".join(line[3:] for line in code.group(1).splitlines()))
    monkeypatch.chdir(tmp_path)
    lines: list[str] = []
    with receiver() as slack:
        monkeypatch.setenv("SLACK_WEBHOOK_URL", slack.url)
        notifier = Notifier([Command((sys.executable, "notify-slack.py"))], lines.append)
        notifier.post(_end_notice())
        notifier.close()
    assert slack.bodies == [{"text": _end_notice().text}], lines


def _snakemake(workdir: Path, url: str, command: str,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    (workdir / "Snakefile").write_text(SWEEP)
    env = {**os.environ, SECRET_ENV: SECRET.decode(), **(env or {})}
    return subprocess.run([SNAKEMAKE, "--executor", "expocloud", "-j", "2", "--keep-going",
                           "--expocloud-notify", url, "--expocloud-notify-command", command],
                          cwd=workdir, capture_output=True, text=True, timeout=300, env=env)


def _outcomes(workdir: Path) -> dict[str, str]:
    return {key: record["outcome"] for key, record in job_records(run_dirs(workdir)[-1]).items()}


EXPECTED = {"0": "solved", "1": "failed", "2": "solved", "3": "solved"}


def test_a_run_notifies_its_first_failure_and_its_end_signed(tmp_path: Path) -> None:
    (tmp_path / "record.py").write_text(RECORDER)
    command = f"{shlex.quote(sys.executable)} record.py got.jsonl"
    with receiver() as got:  # the URL from the environment: Snakemake logs its command line
        result = _snakemake(tmp_path, "env:EXPO_TEST_HOOK", command, {"EXPO_TEST_HOOK": got.url})
    assert result.returncode != 0, "the failed job fails the run"
    assert _outcomes(tmp_path) == EXPECTED
    assert got.events() == ["first_failure", "run_end"], (got.bodies, result.stderr[-3000:])
    assert got.signed == [True, True]
    failure, end = got.bodies
    assert failure["job"] == "work {i=1}" and "exit" in failure["reason"]
    assert end["counts"] == {"solved": 3, "failed": 1} and end["cost_usd"] is None
    assert end["run_id"] == run_dirs(tmp_path)[-1].name
    assert [g["event"] for g in _recorded(tmp_path / "got.jsonl")] == ["first_failure", "run_end"]
    # the URL's path is a secret: neither the logs nor run.json hold it, nor the signing secret
    run_json = (run_dirs(tmp_path)[-1] / "run.json").read_text()
    snakemake_log = "".join(p.read_text() for p in tmp_path.glob(".snakemake/log/*.log"))
    for text in (result.stderr, result.stdout, run_json, snakemake_log):
        assert "SECRETPATH" not in text and SECRET.decode() not in text
    assert "notifications go to http://127.0.0.1" in result.stderr


def test_a_receiver_that_hangs_changes_nothing_in_the_run(tmp_path: Path) -> None:
    """The first failure is sent mid-run to a receiver that never answers, and the run end at
    its end: the run's outcomes are those of any run, and its end waits only the bounded flush."""
    with receiver(hang=True) as got:
        result = _snakemake(tmp_path, got.url, "false")
        assert got.arrived.is_set(), "the receiver never got a POST"
    assert result.returncode != 0
    assert _outcomes(tmp_path) == EXPECTED
    assert "Exiting because a job execution failed" in result.stderr
    assert "notifications not sent within 10 s of the run's end are dropped" in result.stderr


def test_a_cwl_run_with_a_closed_port_still_ends_well_and_runs_the_command(
        tmp_path: Path) -> None:
    (tmp_path / "record.py").write_text(RECORDER)
    (tmp_path / "tool.cwl").write_text("cwlVersion: v1.2\nclass: CommandLineTool\ninputs: []\n"
                                       "baseCommand: [touch, ran]\noutputs: []\n")
    env = {**os.environ, SECRET_ENV: SECRET.decode()}
    result = subprocess.run(
        [EXPOCLOUD_CWL, "--outdir", str(tmp_path / "out"), "--expocloud-state-dir",
         str(tmp_path / "state"), "--expocloud-notify", closed_port_url(),
         "--expocloud-notify-command", f"{shlex.quote(sys.executable)} record.py got.jsonl",
         "tool.cwl"], cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    got = _recorded(tmp_path / "got.jsonl")
    assert [(g["event"], g["counts"]) for g in got] == [("run_end", {"solved": 1})]
    assert re.search(r"notification run_end to http://127\.0\.0\.1:\d+ not sent after "
                     r"4 attempts", result.stderr), result.stderr[-3000:]
