"""SIGKILL random workers during a hardness sweep, on the local engine and on the emulated GCE
path: every job ends with the outcome class of an undisturbed run, no output is lost, none is
written after its job's final report, and no killed, cancelled or lost attempt runs on after
its job was reported.

The sweep (tests/faults/sweep.py) makes outcome classes timing-independent: the solved set is
fixed, and so is the set of jobs that time out *or* are skipped; which of those two a hopeless
job gets depends on timing (and on kills: a hopeless job whose worker dies restarts its
deadline), so the two are compared as one set. A killed worker's job sessions outlive it (they
are sessions of their own); the engine must power them off as a crashed VM's would be, and the
coordinator must re-queue its jobs ("re-queued ... from lost worker").

An output may be written by more than one attempt: a worker killed after its job's script
wrote the output but before the job reported (Snakemake's own job process still closing)
re-runs that job elsewhere, the at-least-once delivery any VM loss forces. What must never
happen is a write, or any sign of life, after the job's final report; the tests count the
extra writes (``rewrites``) and check they all came before it.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from expo_executor.runs.files import RunFiles
from tests.emulated_gce import emulated_args, emulated_env, fake_compute  # noqa: F401
from tests.gcs_emulator import gcs_emulator  # noqa: F401
from tests.helpers import SNAKEMAKE, processes_under, run_dirs, wait_until
from .conftest import size
from .sweep import (Grid, Killer, bucket_outputs, classes, final_records, grid,
                    overlapping_attempts, read_ledger, requeued_lines, sweep_args, worker_pids,
                    write_workflow)

# Quick: 20 jobs, 14 solvable; full: 200 jobs, 150 solvable.
GRID: Grid = grid((14, 6), (150, 50))
# Far above an easy job's runtime even on a loaded machine (a Snakemake job process takes
# 4-12 s on two cores at a load of 7, and up to 30 s at 11 on the GCE path), far below a
# hopeless job's hour.
DEADLINE_S = 60
KILLS = size(3, 12)
KILL_EVERY_S = size(6.0, 8.0)
LATE_SLACK_S = 3.0  # a cancel's inbox read + the session's SIGTERM grace, under load
LOCAL = ["--expocloud-max-workers", "2", "--expocloud-poll-interval", "0.1",
         "--expocloud-status-interval", "5"]


def _status(workdir: Path) -> dict:
    runs = run_dirs(workdir)
    try:
        return json.loads((runs[-1] / "status.json").read_text()) if runs else {}
    except (OSError, ValueError):
        return {}


def _busy(workdir: Path) -> bool:
    """A job is running and there is work left: a kill now lands on a live sweep."""
    return _status(workdir).get("running", 0) > 0


def _run(workdir: Path, args: list[str], env: dict | None, scratch_root: Path | None,
         timeout: float) -> tuple[subprocess.CompletedProcess, list[tuple[float, int]]]:
    """One snakemake run; with ``scratch_root``, a killer SIGKILLs its workers meanwhile."""
    proc = subprocess.Popen([SNAKEMAKE, *args], cwd=workdir, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    killer = None
    if scratch_root is not None:
        killer = Killer(scratch_root, KILLS, KILL_EVERY_S, lambda: _busy(workdir)).start()
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if killer is not None:
            killer.stop()
        if proc.poll() is None:
            proc.kill()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), \
        (killer.kills if killer else [])


def _check_ledger(ledger: list[dict], records: dict[str, dict]) -> int:
    """Nothing ran after its job's final report; returns the outputs written more than once."""
    late = [f"{e['job']} {e['event']} +{e['t'] - records[e['job']]['ended']:.2f} s "
            f"({records[e['job']]['outcome']}, pid {e['pid']})"
            for e in ledger if e["t"] > records[e["job"]]["ended"] + LATE_SLACK_S]
    assert not late, f"code of a reported job ran on: {late[:10]}"
    ends: dict[str, int] = {}
    for entry in ledger:
        if entry["event"] == "end":
            assert entry["t"] <= records[entry["job"]]["ended"], entry
            ends[entry["job"]] = ends.get(entry["job"], 0) + 1
    assert set(ends) == {j for j, r in records.items() if r["outcome"] == "solved"}
    return sum(n - 1 for n in ends.values())


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The undisturbed run's outcome per job (local engine), shared by both engines' tests:
    by design the classes are the same on either."""
    root = tmp_path_factory.mktemp("baseline")
    workdir = root / "wf"
    write_workflow(workdir, GRID, root / "ledger.jsonl")
    result, _ = _run(workdir, sweep_args(DEADLINE_S, *LOCAL), None, None, size(300, 1800))
    assert result.returncode != 0, "skipped jobs are errors by default"
    records = final_records(run_dirs(workdir)[-1])
    solved, pruned, other = classes(records)
    assert (solved, pruned, other) == (GRID.solvable, GRID.hard, set()), result.stderr[-3000:]
    return {job: r["outcome"] for job, r in records.items()}


def _compare(records: dict[str, dict], baseline: dict[str, str]) -> None:
    assert set(records) == set(baseline), "a job was lost"
    solved, pruned, other = classes(records)
    assert not other, {j: records[j]["reason"] for j in other}
    assert solved == {j for j, o in baseline.items() if o == "solved"}
    # timed out and skipped, as one set: which one a hopeless job gets depends on timing
    assert pruned == {j for j, o in baseline.items() if o in ("timeout", "skipped")}


def test_sigkilled_local_workers(tmp_path: Path, baseline: dict[str, str],
                                 fault_figures) -> None:
    workdir = tmp_path / "wf"
    ledger_path = tmp_path / "ledger.jsonl"
    write_workflow(workdir, GRID, ledger_path)
    started = time.monotonic()
    result, kills = _run(workdir, sweep_args(DEADLINE_S, *LOCAL), None,
                         workdir / ".expocloud" / "runs", size(400, 2400))
    log = result.stdout + result.stderr
    assert kills, "no worker was killed: the sweep ended too soon for the killer"
    run_dir = run_dirs(workdir)[-1]
    records = final_records(run_dir)
    _compare(records, baseline)

    for job, record in records.items():
        out = workdir / "out" / f"{job}.txt"
        if record["outcome"] == "solved":
            # (not its mtime: Snakemake touches every output of a successful job itself)
            assert out.read_text() == Grid.text(job)
        else:
            assert not out.exists(), f"hopeless {job} has an output"
    ledger = read_ledger(ledger_path)
    rewrites = _check_ledger(ledger, records)
    # a lost worker's job sessions die with its "VM" before the job is assigned again
    assert not overlapping_attempts(ledger), overlapping_attempts(ledger)
    requeued = requeued_lines(log)
    lost_vms = RunFiles(run_dir).vms()
    assert len([vm for vm in lost_vms if vm["end"] == "lost"]) >= len(kills) - 1, log[-3000:]
    # nothing of the run is left: no worker, no job session
    assert wait_until(lambda: not processes_under(workdir), timeout=30), processes_under(workdir)
    assert not worker_pids(workdir / ".expocloud")
    fault_figures("SIGKILL random workers (local engine)", injected=len(kills),
                  survived=len(kills), jobs=len(records), jobs_lost=0, orphan_vms=0,
                  detail=f"{len(requeued)} jobs re-queued from lost workers, {rewrites} outputs "
                  "rewritten by a lost attempt before the final report, none after; "
                  f"{time.monotonic() - started:.0f} s",
                  requeued=len(requeued), rewrites=rewrites, overlaps=0)


def test_sigkilled_gce_workers(tmp_path: Path, baseline: dict[str, str], fake_compute,  # noqa: F811
                               gcs_emulator, fault_figures) -> None:  # noqa: F811
    """The same on emulated GCE: a killed worker ends its VM (the fake marks it TERMINATED, as
    the startup script's poweroff would), its job sessions die with it, the coordinator sees
    the VM gone and re-queues. No shared file system: outputs are checked in the bucket."""
    workdir = tmp_path / "wf"
    ledger_path = tmp_path / "ledger.jsonl"
    write_workflow(workdir, GRID, ledger_path)
    args = emulated_args(fake_compute, gcs_emulator, None,
                         *sweep_args(DEADLINE_S, "--expocloud-slow-poll-interval", "1",
                                     "--expocloud-poll-interval", "0.5",
                                     "--expocloud-status-interval", "5"))
    prefix = args[args.index("--default-storage-prefix") + 1]
    started = time.monotonic()
    result, kills = _run(workdir, args, emulated_env(gcs_emulator), fake_compute.scratch_root,
                         size(500, 3000))
    log = result.stdout + result.stderr
    assert kills, "no worker was killed: the sweep ended too soon for the killer"
    run_dir = run_dirs(workdir)[-1]
    records = final_records(run_dir)
    _compare(records, baseline)

    outputs = bucket_outputs(gcs_emulator, prefix)
    solved = {j for j, r in records.items() if r["outcome"] == "solved"}
    assert set(outputs) == {f"out/{j}.txt" for j in solved}, "an output is lost or stray"
    for job in solved:
        text, updated = outputs[f"out/{job}.txt"]
        assert text == Grid.text(job)
        assert updated <= records[job]["ended"], f"{job} uploaded after its report"
    ledger = read_ledger(ledger_path)
    rewrites = _check_ledger(ledger, records)
    # Counted, not forbidden: the coordinator re-queues the jobs of a VM it sees STOPPING,
    # and a VM's processes may outlive that by the power-off (fake: half a second).
    overlaps = overlapping_attempts(ledger)
    requeued = requeued_lines(log)
    # no VM and no process of the run left
    assert wait_until(lambda: not fake_compute.instances(), timeout=60), \
        fake_compute.instances()
    orphans = len(fake_compute.instances())
    assert wait_until(lambda: not worker_pids(fake_compute.scratch_root), timeout=30)
    assert wait_until(lambda: not processes_under(workdir), timeout=30)
    fault_figures("SIGKILL random workers (emulated GCE)", injected=len(kills),
                  survived=len(kills), jobs=len(records), jobs_lost=0, orphan_vms=orphans,
                  detail=f"{len(requeued)} jobs re-queued from lost VMs, {rewrites} outputs "
                  "rewritten by a lost attempt before the final report, none after; "
                  f"{time.monotonic() - started:.0f} s",
                  requeued=len(requeued), rewrites=rewrites, overlaps=len(overlaps))
