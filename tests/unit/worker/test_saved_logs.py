"""Saved logs: cutting to the cap, blanking secrets, naming, the wire records, the copy into the
run directory, and which jobs ``expocloud logs JOB`` names."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from expo_executor.runs.files import RunFiles
from expo_executor.coordinator.saved_logs import LogFetcher, local_name, logs_dir_name
from expo_executor.core.records import AttemptEnd, JobMeta
from expo_executor.protocol import messages
from expo_executor.protocol.bucket import LocalBucket
from expo_executor.protocol.keys import saved_log_key
from expo_executor.protocol.records import Inbox, JobSpec, SavedLog, WorkerResult
from expo_executor.report import saved_logs as report_logs
from expo_executor.report.run_reader import ReportError
from expo_executor.worker.saved_logs import capped, read_log, save_logs

KEY = b"k" * 32


# -- cutting and blanking --------------------------------------------------------------------
def test_a_log_under_the_cap_is_kept_whole_with_its_secrets_blanked() -> None:
    data = b"start\ntoken=hunter2 and again hunter2\nend\n"
    body, cut = capped(data, len(data), ["hunter2"], cap=1000)
    assert not cut
    assert body == b"start\ntoken=******** and again ********\nend\n"


def test_a_log_over_the_cap_keeps_its_end_from_a_line_start_under_a_marker() -> None:
    lines = [f"line {i:04d}\n".encode() for i in range(1000)]
    data = b"".join(lines)
    cap = 100
    body, cut = capped(data[-cap:], len(data), [], cap=cap)
    marker, _, rest = body.partition(b"\n")
    assert cut and b"cut" in marker and str(len(data)).encode() in marker
    assert rest.endswith(b"line 0999\n") and rest.startswith(b"line ")  # whole lines only
    assert len(rest) <= cap and data.endswith(rest)


def test_a_secret_the_cut_runs_through_is_not_left_half_shown() -> None:
    secret = "s3cr3t-value-0123456789"
    data = f"head\nx {secret} y\nmore\n".encode()
    start = data.index(secret.encode()) + 5  # the window starts inside the secret
    body, cut = capped(data[start:], len(data), [secret], cap=len(data) - start)
    assert cut
    assert secret[5:].encode() not in body and b"0123456789" not in body
    assert body.endswith(b"more\n")


def test_the_rest_of_a_secret_of_several_lines_after_the_cut_is_blanked() -> None:
    secret = "-----BEGIN KEY-----\nAAAABBBBCCCC\nDDDDEEEE\n-----END KEY-----"
    data = f"log\n{secret}\nafter\n".encode()
    start = data.index(b"AAAA") + 2  # inside the secret's second line
    body, _ = capped(data[start:], len(data), [secret], cap=len(data) - start)
    assert b"DDDDEEEE" not in body and b"END KEY" not in body
    assert body.rstrip().endswith(b"after")


def test_blanking_that_makes_a_log_longer_still_keeps_it_under_the_cap() -> None:
    data = b"".join(b"ab ab ab\n" for _ in range(20))  # each 2-char secret becomes 8 chars
    body, cut = capped(data, len(data), ["ab"], cap=len(data))
    assert cut
    assert len(body.partition(b"\n")[2]) <= len(data)
    assert b"ab" not in body.partition(b"\n")[2]


def test_bytes_that_are_not_utf8_are_kept_as_they_were(tmp_path: Path) -> None:
    path = tmp_path / "binary.log"
    path.write_bytes(b"\xff\xfe ok hunter2 \x80\n")
    assert read_log(path, ["hunter2"]) == (b"\xff\xfe ok ******** \x80\n", False)


def test_a_missing_log_or_a_directory_is_not_read(tmp_path: Path) -> None:
    assert read_log(tmp_path / "absent.log", []) is None
    assert read_log(tmp_path, []) is None


def test_read_log_reads_only_the_end_of_a_long_file(tmp_path: Path) -> None:
    path = tmp_path / "long.log"
    path.write_bytes(b"".join(f"{i}\n".encode() for i in range(100_000)))
    body, cut = read_log(path, [], cap=1000)
    assert cut and body.endswith(b"99999\n") and b"\n5\n" not in body


# -- the worker's side -----------------------------------------------------------------------
def test_save_logs_saves_the_output_and_the_log_files_that_exist(tmp_path: Path) -> None:
    bucket = LocalBucket(tmp_path / "bucket")
    work = tmp_path / "work"
    (work / "logs").mkdir(parents=True)
    (work / "logs" / "a.log").write_text("rule log: hunter2\n")
    output = tmp_path / "job.log"
    output.write_text("stdout and stderr\n")
    written: list[str] = []

    def write(key: str, data: bytes) -> bool:
        written.append(key)
        bucket.write(key, data)
        return True

    saved = save_logs("j1a1", "w-1", output, str(work), ["logs/a.log", "logs/missing.log"],
                      ["hunter2"], write)
    assert [s.path for s in saved] == [None, "logs/a.log"]
    assert [s.key for s in saved] == [saved_log_key("j1a1", "w-1", 0),
                                      saved_log_key("j1a1", "w-1", 1)] == written
    assert bucket.read(saved[1].key).data == b"rule log: ********\n"
    assert saved[1].sha256 == hashlib.sha256(b"rule log: ********\n").hexdigest()
    assert saved[1].size == len(b"rule log: ********\n") and not saved[1].truncated


def test_a_log_the_bucket_refused_is_left_out(tmp_path: Path) -> None:
    output = tmp_path / "job.log"
    output.write_text("x\n")
    (tmp_path / "b.log").write_text("y\n")
    calls = iter([False, True])
    saved = save_logs("j1a1", "w-1", output, str(tmp_path), ["b.log"], [],
                      lambda key, data: next(calls))
    assert [(s.path, s.key) for s in saved] == [("b.log", saved_log_key("j1a1", "w-1", 0))]


# -- the wire --------------------------------------------------------------------------------
def test_the_saved_logs_and_the_log_paths_cross_the_bucket_signed() -> None:
    log = SavedLog("logs/a.log", "logs/j1a1/w-1/1", 12, "ab" * 32, True)
    result = WorkerResult("j1a1", "w-1", AttemptEnd.FAILED, 1, 1.0, 2.0, "exit code 1", "t",
                          (SavedLog(None, "logs/j1a1/w-1/0", 3, "cd" * 32), log))
    assert WorkerResult.decode(result.encode(KEY), KEY) == result
    inbox = Inbox(1, "w-1", {"j1a1": JobSpec(["true"], None, {}, None, 1, None,
                                             ("logs/a.log",))})
    assert Inbox.decode(inbox.encode(KEY), KEY).jobs["j1a1"].opened(KEY, "j1a1") \
        == inbox.jobs["j1a1"]
    plain = WorkerResult("j2a1", "w-1", AttemptEnd.SOLVED, 0, 1.0, 2.0)
    assert b'"logs"' not in plain.encode(KEY)  # nothing saved: nothing said
    assert WorkerResult.decode(plain.encode(KEY), KEY).logs == ()


@pytest.mark.parametrize("logs", [
    "not a list", [{"path": None, "key": "k"}], [{"path": 3, "key": "k", "size": 1,
                                                  "sha256": "x", "truncated": False}],
    ["a string"]])
def test_a_result_with_malformed_saved_logs_is_refused(logs: object) -> None:
    body = {"key": "j", "worker": "w", "outcome": "failed", "returncode": 1, "started": 1.0,
            "ended": 2.0, "reason": None, "log_tail": "", "logs": logs}
    with pytest.raises(messages.MessageError):
        messages.check("result", body)


def test_an_inbox_job_with_malformed_log_paths_is_refused() -> None:
    job = {"argv": ["true"], "cwd": None, "env": {}, "deadline_s": None, "cpus": 1,
           "logs": ["ok", 3]}
    with pytest.raises(messages.MessageError):
        messages.check("inbox", {"seq": 1, "jobs": {"j": job}, "cancel": []})


# -- naming ----------------------------------------------------------------------------------
def test_a_jobs_logs_directory_is_named_by_its_rule_and_wildcards() -> None:
    assert logs_dir_name(JobMeta("solve", {"n": "6", "variant": "a"}), "j3a1") == \
        "solve.n=6,variant=a"
    assert logs_dir_name(JobMeta("solve", {"n": "6"}, attempt=2), "j3a2") == \
        "solve.n=6.attempt2"
    assert logs_dir_name(JobMeta("all"), "j0a1") == "all"
    assert logs_dir_name(JobMeta(""), "j5a1") == "j5a1"


def test_a_logs_directory_name_is_one_safe_path_component() -> None:
    name = logs_dir_name(JobMeta("solve", {"path": "../../etc/x y"}), "j1a1")
    assert "/" not in name and " " not in name and name.startswith("solve.")
    assert logs_dir_name(JobMeta(".hidden"), "j1a1") == "_.hidden"
    long = logs_dir_name(JobMeta("solve", {"x": "v" * 500}), "j9a1")
    assert len(long) < 140 and long.endswith(".j9a1")


def test_a_saved_log_keeps_its_relative_path_and_never_leaves_its_directory() -> None:
    assert local_name(None) == "output.log"
    assert local_name("logs/solve/a.log") == "logs/solve/a.log"
    assert local_name("/abs/path/x.log") == "abs/path/x.log"
    assert local_name("../../../etc/passwd") == "etc/passwd"
    assert local_name("..") == "log"


# -- the coordinator's copy ------------------------------------------------------------------
def _saved(bucket: LocalBucket, index: int, path: str | None, data: bytes) -> SavedLog:
    key = saved_log_key("j1a1", "w-1", index)
    bucket.write(key, data)
    return SavedLog(path, key, len(data), hashlib.sha256(data).hexdigest())


def test_the_coordinator_copies_a_jobs_saved_logs_into_the_run_directory(tmp_path: Path) -> None:
    bucket, lines = LocalBucket(tmp_path / "bucket"), []
    run = tmp_path / "run"
    run.mkdir()
    logs = (_saved(bucket, 0, None, b"out\n"), _saved(bucket, 1, "logs/a.log", b"a\n"),
            _saved(bucket, 2, "output.log", b"the rule's own output.log\n"))
    result = WorkerResult("j1a1", "w-1", AttemptEnd.FAILED, 1, 1.0, 2.0, logs=logs)
    directory = LogFetcher(bucket, RunFiles(run), lines.append).fetch(
        result, JobMeta("work", {"x": "b"}))
    assert directory == run / "logs" / "work.x=b"
    assert (directory / "output.log").read_bytes() == b"out\n"
    assert (directory / "logs" / "a.log").read_bytes() == b"a\n"
    assert (directory / "output.log.again").read_bytes() == b"the rule's own output.log\n"
    assert lines == []
    again = LogFetcher(bucket, RunFiles(run), lines.append).fetch(
        WorkerResult("j1a2", "w-1", AttemptEnd.FAILED, 1, 1.0, 2.0, logs=logs[:1]),
        JobMeta("work", {"x": "b"}))
    assert again == run / "logs" / "work.x=b.j1a2"  # the name is taken: the key tells them apart


def test_a_saved_log_changed_or_gone_from_the_bucket_is_left_out_and_said(tmp_path: Path) -> None:
    bucket, lines = LocalBucket(tmp_path / "bucket"), []
    (tmp_path / "run").mkdir()
    swapped = _saved(bucket, 0, None, b"genuine\n")
    bucket.write(swapped.key, b"forged!\n")  # same size, other content
    gone = SavedLog("logs/a.log", "logs/j1a1/w-1/9", 3, "00" * 32)
    result = WorkerResult("j1a1", "w-1", AttemptEnd.TIMEOUT, None, 1.0, 2.0,
                          logs=(swapped, gone))
    directory = LogFetcher(bucket, RunFiles(tmp_path / "run"), lines.append).fetch(
        result, JobMeta("work"))
    assert directory is not None and not any(directory.iterdir())
    assert len(lines) == 2 and "changed in the bucket" in lines[0] and "not in the bucket" in \
        lines[1]


def test_no_saved_logs_make_no_directory(tmp_path: Path) -> None:
    result = WorkerResult("j1a1", "w-1", AttemptEnd.FAILED, 1, 1.0, 2.0)
    fetcher = LogFetcher(LocalBucket(tmp_path / "b"), RunFiles(tmp_path), print)
    assert fetcher.fetch(result, JobMeta("work")) is None
    assert not (tmp_path / "logs").exists()


# -- which jobs ``expocloud logs JOB`` names ---------------------------------------------------
def _run_with_logs(tmp_path: Path) -> Path:
    run = tmp_path / "runs" / "r1"
    records = [
        {"key": "j2a1", "rule": "work", "wildcards": {"x": "b", "y": "1"}, "logs_dir": "logs/w1"},
        {"key": "j2a2", "rule": "work", "wildcards": {"x": "b", "y": "1"}, "logs_dir": "logs/w2"},
        {"key": "j3a1", "rule": "work", "wildcards": {"x": "c", "y": "1"}, "logs_dir": "logs/w3"},
        {"key": "j4a1", "rule": "other", "wildcards": {"x": "b"}, "logs_dir": "logs/o"},
        {"key": "j5a1", "rule": "work", "wildcards": {"x": "d"}, "logs_dir": None},
    ]
    for record in records:
        if record["logs_dir"]:
            (run / record["logs_dir"] / "logs").mkdir(parents=True)
            (run / record["logs_dir"] / "output.log").write_text(record["key"])
            (run / record["logs_dir"] / "logs" / "a.log").write_text("a")
    (run / "jobs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return run


@pytest.mark.parametrize("job, found", [
    ("2", ["w1", "w2"]), ("j2a2", ["w2"]), ("work", ["w1", "w2", "w3"]),
    ("work:x=b", ["w1", "w2"]), ("work:x=b,y=1", ["w1", "w2"]), ("work:y=1", ["w1", "w2", "w3"]),
    ("rule:x=b", ["w1", "w2", "o"]), ("other", ["o"])])
def test_expocloud_logs_finds_jobs_by_id_key_rule_and_wildcards(
        tmp_path: Path, job: str, found: list[str]) -> None:
    run = _run_with_logs(tmp_path)
    assert [d.name for d in report_logs.find(run, job)] == found


@pytest.mark.parametrize("job", ["5", "work:x=d", "nosuchrule", "j9a1", "work:x=z"])
def test_expocloud_logs_says_in_one_line_when_nothing_matches(tmp_path: Path, job: str) -> None:
    run = _run_with_logs(tmp_path)
    with pytest.raises(ReportError) as caught:
        report_logs.find(run, job)
    message = str(caught.value)
    assert "\n" not in message and f"no saved logs for {job!r}" in message and "fix:" in message


def test_expocloud_logs_shows_the_output_first(tmp_path: Path) -> None:
    run = _run_with_logs(tmp_path)
    names = [p.name for p in report_logs.files(run / "logs" / "w1")]
    assert names == ["output.log", "a.log"]


def test_a_log_file_is_copied_under_the_name_the_workflow_knows_it_by(tmp_path: Path) -> None:
    """Without a shared file system a job writes its log: file as the storage plugin's local
    copy; the front end says which name the Snakefile gives it."""
    bucket = LocalBucket(tmp_path / "bucket")
    (tmp_path / "run").mkdir()
    copy = ".snakemake/storage/gcs/bucket/prefix/logs/b.log"
    result = WorkerResult("j1a1", "w-1", AttemptEnd.FAILED, 1, 1.0, 2.0,
                          logs=(_saved(bucket, 0, copy, b"boom\n"),))
    directory = LogFetcher(bucket, RunFiles(tmp_path / "run"), print).fetch(
        result, JobMeta("work", {"x": "b"}), {copy: "logs/b.log"})
    assert [p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file()] \
        == ["logs/b.log"]
