"""A failed job's log as it leaves the worker (its report's tail, its saved logs, the reason's
clipped line): secrets blanked before any cut, the cut on a line start outside every blank."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from expo_executor.core.records import AttemptEnd
from expo_executor.protocol.local_bucket import LocalBucket
from expo_executor.protocol.records import JobSpec, ResultBatch
from expo_executor.worker.agent import Worker
from expo_executor.worker.failure_reason import LOG_TAIL_BYTES
from expo_executor.worker.log_end import blanked_end
from expo_executor.worker.running_jobs import RunningJob

KEY = b"w" * 32
TOKEN = "TOKEN0123456789ABCDEFGHIJKLMNOPQRSTUV"  # upper case: the logs around it are lower
PEM = "-----BEGIN PRIVATE KEY-----\n" + "\n".join(
    f"MIIE{i:02d}QWERTYUIOPASDFGHJKLZXCVBNM" for i in range(20)) + "\n-----END PRIVATE KEY-----"
JSON_KEY = json.dumps({"type": "service_account", "private_key_id": "ABCDEF0123456789",
                       "private_key": "KEYBODY" * 30, "client_email": "ROBOT@EXAMPLE"},
                      indent=2)


def _pieces(secret: str, size: int = 6) -> set[str]:
    """Every part of ``secret`` of ``size`` characters that is no common text."""
    parts = {secret[i:i + size] for i in range(len(secret) - size + 1)}
    return {p for p in parts if p.strip() and p.strip("-\n ") and not p.isspace()
            and not set(p) <= set('{}":, \n')}


def _shows(text: str, secret: str) -> set[str]:
    return {piece for piece in _pieces(secret) if piece in text}


def _worker(tmp_path: Path) -> Worker:
    return Worker(LocalBucket(tmp_path / "bucket"), "w-1", 1, KEY, tmp_path / "vm",
                  poll=0.1, zygote=False)


def _report(worker: Worker, key: str, log: Path, secret: str,
            explained: bool = False) -> tuple[str, str | None]:
    """The tail and the reason of the report of a job that wrote ``log`` and exited 1, as
    the coordinator reads them (``explained``: the reason says why, from the log)."""
    spec = worker.specs[key] = JobSpec(["false"], None, {}, None, 1, redact=(secret,))
    job = worker.running[key] = RunningJob(key, spec, None, 1.0, 0.0, 1, log)
    reason = worker._explain("exit code 1", job) if explained else "exit code 1"
    worker._finish(job, AttemptEnd.FAILED, 1, reason)
    name, = worker.bucket.list("workers/w-1/results/")
    result, = ResultBatch.decode(worker.bucket.read(name).data, KEY).results
    return result.log_tail, result.reason


@pytest.mark.parametrize("secret", [TOKEN, PEM, JSON_KEY], ids=["token", "pem", "json-key"])
@pytest.mark.parametrize("into", [1, 5, 30, -3])
def test_a_secret_the_report_tails_cut_runs_through_leaves_no_piece(
        tmp_path: Path, secret: str, into: int) -> None:
    """The tail's cut falls ``into`` characters into the secret (or 3 before its end)."""
    into = into % len(secret)
    lines = "".join(f"line {i}\n" for i in range(700))
    after = lines[-(LOG_TAIL_BYTES - 1 - (len(secret) - into)):]
    log = tmp_path / "job.log"
    log.write_text("lots of output\n" * 500 + secret + "\n" + after)
    assert log.read_text()[-LOG_TAIL_BYTES:] == secret[into:] + "\n" + after  # the cut
    tail, _ = _report(_worker(tmp_path), "j1a1", log, secret)
    assert not _shows(tail, secret), tail[:300]
    assert tail.endswith(after) and len(tail.encode()) <= LOG_TAIL_BYTES


def test_a_multi_line_key_inside_the_tail_is_blanked_whole(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text("start\n" + PEM + "\nend\n")
    tail, _ = _report(_worker(tmp_path), "j1a1", log, PEM)
    assert tail == "start\n********\nend\n"


def test_a_reasons_line_is_blanked_before_it_is_clipped(tmp_path: Path) -> None:
    """A reason is one clipped line: a secret across the clip kept its head."""
    log = tmp_path / "job.log"
    log.write_text("cp: error writing '" + "d/" * 185 + TOKEN + "': No space left on device\n")
    _, reason = _report(_worker(tmp_path), "j1a1", log, TOKEN, explained=True)
    assert reason is not None and reason.startswith("exit code 1: cp: error writing")
    assert not _shows(reason, TOKEN), reason


def test_every_cut_through_a_secret_leaves_no_piece_of_it() -> None:
    for secret in (TOKEN, PEM, JSON_KEY):
        data = ("before\n" + secret + " trailing words\nafter one\nafter two\n").encode()
        for start in range(1, data.index(b"after two")):
            kept = blanked_end(data[start:], len(data), [secret, "zz"], cap=len(data))
            assert kept.cut
            assert not _shows(kept.data.decode(), secret), (start, kept.data)
            assert kept.data.endswith(b"after two\n")


def test_lines_whole_after_the_secrets_piece_are_kept() -> None:
    data = b"head\nTOKEN0123456789ABCDEFGHIJKLMNOPQRSTUV y\nmore\n"
    start = data.index(b"6789")
    kept = blanked_end(data[start:], len(data), [TOKEN], cap=1000)
    assert kept.data == b"more\n" and kept.cut


def test_a_cut_that_blanking_made_necessary_starts_at_a_line() -> None:
    data = b"".join(b"ab ab ab\n" for _ in range(20))  # each 2-character secret grows to 8
    kept = blanked_end(data, len(data), ["ab"], cap=len(data))
    assert kept.cut and len(kept.data) <= len(data)
    assert kept.data.startswith(b"******** ") and kept.data.endswith(b"********\n")


def test_nothing_fits_keeps_nothing() -> None:
    data = b"one very long line without an end"
    assert blanked_end(data[5:], len(data), [], cap=4).data == b""
