"""What the coordinator keeps of a job once it has ended (coordinator/reports.py): its task and
its meta (the status's counts and outcome map, the records), never the command its worker ran.
A sweep of 50,000 jobs held each one's whole Snakemake command and environment after the job
was done (1.4 KB a job of a 1,048-character command; bench/RESULTS.md, "Issue 31: sweeps"); a
job still to run keeps all of it."""

from __future__ import annotations

from pathlib import Path

from expo_executor.core.records import JobMeta
from expo_executor.core.scheduler import Outcome, Task
from expo_executor.frontends.base import job_request

from tests.coordinator_rig import Rig

COMMAND = ["/bin/sh", "-c", "python -m snakemake --target-jobs 'point:a=1,n=2,s=3' " + "x" * 2000]


def test_an_ended_job_keeps_its_meta_and_drops_its_command(tmp_path: Path) -> None:
    rig = Rig(tmp_path, slots=1, workers=1)
    rig.coordinator.submit([
        job_request(Task(k, f"point {k}"), COMMAND, "/", {"SECRET": "s" * 40}, 30.0,
                    meta=JobMeta("point", {"a": "1", "n": k}), logs={"logs/a.log": "a.log"})
        for k in ("j", "k")])
    rig.round()
    rig.ready("w-1")
    rig.round()
    assert rig.assigned("w-1") == {"j"}
    rig.result("j", "w-1", "solved")
    rig.ready("w-1")
    rig.round()
    assert rig.reports["j"].outcome is Outcome.SOLVED, rig.lines

    ended, waiting = rig.coordinator._requests["j"], rig.coordinator._requests["k"]
    assert (ended.spec.argv, ended.spec.env, ended.spec.logs, ended.log_names) == \
        ([], {}, (), {}), "the ended job still holds what its worker ran"
    assert ended.meta == JobMeta("point", {"a": "1", "n": "j"})
    assert (ended.task.label, ended.spec.deadline_s, ended.spec.cpus) == ("point j", 30.0, 1)
    assert waiting.spec.argv == COMMAND and waiting.spec.env == {"SECRET": "s" * 40}

    status = rig.coordinator.status(rig.now)
    assert (status.counts["solved"], status.counts["queued"] + status.counts["running"]) == (1, 1)
    rig.round()  # the next inbox sends the waiting job whole
    assert rig.assigned("w-1") == {"k"}
    assert rig.coordinator.vms.get("w-1").places.jobs()["k"].argv == COMMAND
