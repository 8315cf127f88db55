"""A report survives an I/O error while it is persisted (C4): it reaches the front end (what
Snakemake's and cwltool's executors take) at once, and ``jobs.jsonl`` once the disk takes it
again. The fault is a real file-system error: ``jobs.jsonl`` is, for a while, a directory."""

from __future__ import annotations

import json
from pathlib import Path

from expo_executor.core.scheduler import Outcome

from tests.coordinator_rig import Rig


def _solved_while_jobs_jsonl_fails(tmp_path: Path) -> Rig:
    rig = Rig(tmp_path)
    rig.submit("j")
    rig.round()
    rig.ready("w-1")
    rig.round()
    (tmp_path / "jobs.jsonl").mkdir()  # every open of it for writing fails: IsADirectoryError
    rig.result("j", "w-1", "solved")
    rig.ready("w-1")
    rig.round()
    return rig


def test_a_report_reaches_the_front_end_and_jobs_jsonl_after_an_io_error(tmp_path: Path) -> None:
    rig = _solved_while_jobs_jsonl_fails(tmp_path)
    assert rig.reports["j"].outcome is Outcome.SOLVED, rig.lines
    assert any("ERROR: cannot write the record of j in jobs.jsonl" in line
               for line in rig.lines), rig.lines
    (tmp_path / "jobs.jsonl").rmdir()  # the disk takes writes again
    rig.round(0.5)
    assert not (tmp_path / "jobs.jsonl").exists(), "tried again only after its backoff"
    rig.round(1.0)
    records = [json.loads(line) for line in (tmp_path / "jobs.jsonl").read_text().splitlines()]
    assert [(r["key"], r["outcome"]) for r in records] == [("j", "solved")]
    assert any("wrote the record of j in jobs.jsonl after 1 failed" in line
               for line in rig.lines), rig.lines


def test_a_record_never_written_is_logged_whole_at_the_end(tmp_path: Path) -> None:
    rig = _solved_while_jobs_jsonl_fails(tmp_path)
    rig.coordinator.stop()
    line = next(line for line in rig.lines if "could not write the record of j" in line)
    record = json.loads(line.split("it was: ", 1)[1])
    assert record["key"] == "j" and record["outcome"] == "solved"


def test_a_timeout_reaches_its_frontier_after_an_io_error(tmp_path: Path) -> None:
    """The frontier file cannot be replaced for a while (it is a directory): the timeout is
    reported at once, and joins the persisted frontier on a later round."""
    from expo_executor.frontends.base import job_request
    from expo_executor.coordinator.state import FamilyRef
    from expo_executor.core.hardness import HardnessPoint
    from expo_executor.core.records import JobMeta
    from expo_executor.core.scheduler import Task

    rig = Rig(tmp_path)
    ref = FamilyRef("wf", "r", "n", 60.0)
    point = HardnessPoint((), (3,))
    rig.coordinator.submit([job_request(Task("j", "j", family=ref.key, point=point), ["true"],
                                        "/", {}, 60.0, family=ref, meta=JobMeta("r"))])
    rig.round()
    rig.ready("w-1")
    rig.round()
    frontier = rig.state._frontier_path(ref)
    frontier.mkdir(parents=True)
    rig.result("j", "w-1", "timeout")
    rig.ready("w-1")
    rig.round()
    assert rig.reports["j"].outcome is Outcome.TIMEOUT
    assert any("cannot write the timeout of j to its frontier" in line for line in rig.lines)
    frontier.rmdir()
    rig.round(1.0)
    assert rig.state.load_frontier(ref).dominator(HardnessPoint((), (4,))) is not None


def test_a_vm_record_reaches_vms_jsonl_after_an_io_error(tmp_path: Path) -> None:
    """A VM that ends while ``vms.jsonl`` cannot be written: it is no longer tracked, so its
    record (what the cost report bills) is kept and written on a later round."""
    rig = Rig(tmp_path)
    rig.submit("j")
    rig.round()
    rig.ready("w-1")
    rig.round()
    (tmp_path / "vms.jsonl").mkdir()
    rig.engine.status["w-1"] = "TERMINATED"  # gone under us
    rig.round()
    assert "w-1" not in rig.coordinator.vms
    assert any("cannot write the record of VM w-1 in vms.jsonl" in line for line in rig.lines), \
        rig.lines
    (tmp_path / "vms.jsonl").rmdir()
    rig.round(1.0)
    records = [json.loads(line) for line in (tmp_path / "vms.jsonl").read_text().splitlines()]
    assert [(r["name"], r["end"]) for r in records] == [("w-1", "lost")]
