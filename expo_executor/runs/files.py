"""The one owner of a run's files under ``.expocloud/runs/<run>/``.

- ``run.json``: what ran, where, with which settings (a notification URL's path blanked:
  :func:`recorded`), and when it ended (written by the front end through
  :meth:`RunFiles.start` and :meth:`RunFiles.end`);
- ``jobs.jsonl``: one line per job outcome; ``vms.jsonl``: one line per VM that ended;
- ``submitted.jsonl``: one line per job as the coordinator takes it in (its stable identity,
  frontier and label: what a rerun needs to use its result should the coordinator die,
  harvest.py); ``assigned.jsonl``: one line per job given to a worker (harvest.py takes a
  crashed run's result of a job only from a worker the job was given to);
- ``status.json``: the live status (``core.run_status``), replaced atomically every status
  interval, and ``run.html``, the page that shows it (run_page.py), with it;
- ``cost.json``, ``requests.json`` and ``request_budget.json``: the run's cost, its storage
  operations, and what they would cost at scale;
- ``logs/<job>/``: a failed or timed-out job's saved logs (``output.log``, its captured stdout
  and stderr, and its ``log:`` files under their own relative paths), fetched from the bucket
  before the VM that wrote them is gone; its ``jobs.jsonl`` line names the directory.

Lines are appended whole, so a killed run leaves at most a torn last line, which the reader
skips. This module is the one reader of these files: the coordinator, ``expocloud report``,
``status`` and ``logs``, the cost report and the preemption fit, the simulator and the tests all
read them through :func:`read_jsonl` and :class:`RunFiles` (``info``, ``jobs``,
``final_jobs``, ``vms``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import errno
import json
import os
import socket
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from expo_executor.runs.atomic import write_atomically

RUN = "run.json"
JOBS = "jobs.jsonl"
SUBMITTED = "submitted.jsonl"
ASSIGNED = "assigned.jsonl"
VMS = "vms.jsonl"
STATUS = "status.json"
PAGE = "run.html"
COST = "cost.json"
REQUESTS = "requests.json"
REQUEST_BUDGET = "request_budget.json"
LOGS = "logs"
RECORD_VERSION = 1


def read_jsonl(path: Path) -> list[dict]:
    """A run's records (``jobs.jsonl``, ``vms.jsonl``); a torn last line of a run that was
    killed mid-write is skipped, a missing file is no records."""
    records = []
    if path.exists():
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                record = json.loads(line)
            except (ValueError, RecursionError):  # torn, or garbage nested past the parser
                continue
            if isinstance(record, dict):
                records.append(record)
    return records


def final_records(records: Iterable[dict]) -> list[dict]:
    """The last record of each job key, in the order the keys first appear: a job's line is
    appended again when it runs again, so its last line is its final state. Records without a
    string or integer ``key`` are not a job's and are left out."""
    latest: dict[object, dict] = {}
    for record in records:
        if isinstance(record.get("key"), (str, int)):
            latest[record["key"]] = record  # a dict keeps the position of a key's first record
    return list(latest.values())


def recorded(settings: dict[str, Any]) -> dict[str, Any]:
    """The settings as ``run.json`` keeps them: a notification URL's path and query are
    blanked (a Slack webhook's path is its secret), its scheme and host kept."""
    url = settings.get("notify")
    if not url or str(url).startswith("env:"):  # env:NAME names where the URL is
        return settings
    scheme, sep, rest = str(url).partition("://")
    host = rest.split("/", 1)[0].split("?", 1)[0].rpartition("@")[2]
    return {**settings, "notify": f"{scheme}{sep}{host}/..." if sep else "..."}


class RunFiles:
    """Reads and writes one run directory's files; both front ends and the coordinator use it."""

    def __init__(self, run_dir: Path) -> None:
        self.dir = run_dir

    @property
    def run_id(self) -> str:
        return self.dir.name

    # -- run.json ------------------------------------------------------------------------------
    def start(self, engine: str, settings: Any, **source: str) -> None:
        """Record the run as it starts: ``source`` names what runs (``snakefile=...`` or
        ``cwl=...``); ``settings`` is the validated settings dataclass."""
        record = {"v": RECORD_VERSION, "run_id": self.run_id,
                  "created": dt.datetime.now().isoformat(), "workdir": os.getcwd(),
                  "engine": str(getattr(engine, "value", engine)), "pid": os.getpid(),
                  "host": socket.gethostname(), **source,
                  "settings": recorded(dataclasses.asdict(settings)), "ended": None}
        self._write_json(RUN, record)

    def end(self) -> None:
        """Mark the run ended (a run.json with ``ended: null`` is a run still going, or one
        whose process was killed)."""
        record = self.read_json(RUN) or {"v": RECORD_VERSION, "run_id": self.run_id}
        self._write_json(RUN, {**record, "ended": dt.datetime.now().isoformat()})

    def stopped_by(self, run_id: str, workers: int) -> None:
        """Mark a crashed run's workers stopped by the rerun ``run_id`` (see recover.py), with
        the time (s since the epoch) from which none of them runs."""
        record = self.read_json(RUN) or {"v": RECORD_VERSION, "run_id": self.run_id}
        self._write_json(RUN, {**record, "stopped_by": {"run": run_id, "workers": workers,
                                                        "at": time.time()}})

    # -- records ---------------------------------------------------------------------------------
    def append_job(self, record: dict[str, Any]) -> None:
        self._append(JOBS, record)

    def append_vm(self, record: dict[str, Any]) -> None:
        self._append(VMS, record)

    def append_submitted(self, record: dict[str, Any]) -> None:
        self._append(SUBMITTED, record)

    def submitted(self) -> list[dict]:
        return read_jsonl(self.dir / SUBMITTED)

    def append_assigned(self, record: dict[str, Any]) -> None:
        self._append(ASSIGNED, record)

    def assigned(self) -> list[dict]:
        return read_jsonl(self.dir / ASSIGNED)

    def jobs(self) -> list[dict]:
        return read_jsonl(self.dir / JOBS)

    def final_jobs(self) -> list[dict]:
        """Each job's final record (see :func:`final_records`)."""
        return final_records(self.jobs())

    def vms(self) -> list[dict]:
        return read_jsonl(self.dir / VMS)

    # -- saved logs ------------------------------------------------------------------------------
    def new_logs_dir(self, name: str, fallback: str) -> Path:
        """A new directory for one job's saved logs: ``logs/<name>``, or ``logs/<name>.<fallback>``
        when another job of the run has that name already (``name`` and ``fallback`` are safe
        single path components)."""
        root = self.dir / LOGS
        root.mkdir(exist_ok=True)
        try:
            (root / name).mkdir()
            return root / name
        except FileExistsError:
            directory = root / f"{name}.{fallback}"
            directory.mkdir(exist_ok=True)
            return directory

    def write_log(self, directory: Path, relative: str, data: bytes) -> Path:
        """One saved log under ``directory``; ``relative`` is a safe relative path (parents
        made as needed)."""
        path = directory / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return path

    # -- whole-file JSON ------------------------------------------------------------------------
    def write_status(self, status: dict[str, Any]) -> None:
        self._write_json(STATUS, status)

    def write_page(self, html: str) -> None:
        write_atomically(self.dir / PAGE, html)

    def write_cost(self, cost: dict[str, Any]) -> None:
        self._write_json(COST, cost)

    def has_cost(self) -> bool:
        return (self.dir / COST).exists()

    def write_requests(self, requests: dict[str, Any]) -> None:
        self._write_json(REQUESTS, requests)

    def write_request_budget(self, figures: dict[str, Any]) -> None:
        self._write_json(REQUEST_BUDGET, figures)

    def info(self) -> dict[str, Any]:
        """``run.json``; {} when it is missing or unreadable (the jobs can still be read)."""
        info = self.read_json(RUN)
        return info if isinstance(info, dict) else {}

    def workflow_name(self) -> str:
        """What the run ran, in a word (its VMs' workflow label, the bill by workflow): a
        Snakefile's directory (the one above ``workflow/``, Snakemake's standard layout), or a
        CWL document's name without its extension; '' when ``run.json`` names neither."""
        info = self.info()
        if info.get("cwl"):
            return Path(str(info["cwl"])).stem
        if not info.get("snakefile"):
            return ""
        folder = Path(str(info["snakefile"])).parent
        return folder.parent.name if folder.name == "workflow" else folder.name

    def read_json(self, name: str) -> Any:
        """One of the run's JSON files, or None when it is missing or unreadable."""
        try:
            return json.loads((self.dir / name).read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            return None

    def _write_json(self, name: str, data: Any) -> None:
        """Replaced atomically, through a temporary file of a unique name."""
        write_atomically(self.dir / name, json.dumps(data, indent=1))

    def _append(self, name: str, record: dict[str, Any]) -> None:
        """One line, whole or not at all: a write that fails (a full disk) is cut back off,
        so that writing it again leaves no torn line in the middle of the file."""
        data = (json.dumps(record) + "\n").encode()
        fd = os.open(self.dir / name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            try:
                if os.write(fd, data) != len(data):
                    raise OSError(errno.ENOSPC, "short write", str(self.dir / name))
            except OSError:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, size)
                raise
        finally:
            os.close(fd)
