"""SIGKILL the coordinator (the snakemake process) mid-run, on the local engine and on emulated
GCE: every worker (and its VM) is gone within the heartbeat grace period, with every job it
ran, and nothing of the run is left; then a rerun completes and starts no job that had
finished in the first run.

What a user does after the coordinator died (both engines):

1. ``snakemake --unlock`` (with the same arguments): the killed run left Snakemake's lock on
   the working directory, and a rerun stops at "Directory cannot be locked" (checked).
2. Run again with ``--rerun-incomplete`` if Snakemake stops with IncompleteFilesException
   (it checks this before the lock, so it may be the first error; adding the flag always is
   harmless). Jobs that were running when the coordinator died are marked incomplete in
   ``.snakemake/``; if one of them wrote its output before its worker's dead man's switch
   killed it (on GCE the VM's job process cannot clear the coordinator host's marker),
   Snakemake refuses to start until told to re-run those. The tests record whether it was
   needed (so far: on GCE yes, locally no).

Finished jobs (complete outputs) are not run again. A job the coordinator reported in the
last moment before the kill, before Snakemake's next status check took it, is incomplete to
Snakemake and is run again: counted (``not_taken``), not forbidden. Hardness timeouts stored
by the first run (``.expocloud/frontiers``) keep skipping what they dominate; this sweep has
no hopeless job, so that the rerun can complete (exit 0).

No cleanup of VMs is needed: each worker's dead man's switch deletes its own VM after
``--expocloud-heartbeat-grace`` seconds of silence (``expocloud cleanup`` finds none left).

A rerun need not wait for that (``test_rerun_stops_the_killed_runs_workers_first_*``, with a
grace far longer than the rerun): it finds the killed run by the state its coordinator left in
the run directory (coordinator/run_state.py) and stops its workers before it starts anything
(coordinator/recover.py); the ledger shows no line of the killed run's jobs after that. Then it
harvests their results (coordinator/harvest.py): no job the killed run's workers solved after
the kill (a result in its bucket that verifies with its worker's key) starts again, and on GCE
(where each is incomplete to Snakemake and so submitted again) the rerun records each as
harvested from the killed run.
"""

from __future__ import annotations

import base64
import json
import re
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

from expo_executor.runs.files import read_jsonl
from expo_executor.core.records import AttemptEnd
from expo_executor.protocol.bucket import open_bucket
from expo_executor.protocol.keys import WORKERS_PREFIX, parse_result_key
from expo_executor.protocol.records import ResultBatch
from expo_executor.protocol.worker_keys import worker_key
from tests.emulated_gce import (PROJECT, ZONES, emulated_args, emulated_env,  # noqa: F401
                                fake_compute)
from tests.gcs_emulator import gcs_emulator  # noqa: F401
from tests.helpers import EXPOCLOUD, SNAKEMAKE, processes_under, run_dirs, wait_until

from .sweep import (Grid, bucket_outputs, grid, job_of, read_ledger, sweep_args, worker_pids,
                    write_workflow)

# Even a: half a second; odd a: eight seconds, so some are always running at the kill. No
# hopeless job: the rerun must complete (exit 0).
GRID: Grid = grid((10, 0, True), (20, 0, True))
# the adoption tests: a slow job started just before the kill must outlast the rerun's start
# (unlock, Snakemake's start, the harvest) on a loaded machine too
ADOPT_GRID: Grid = grid((10, 0, True, 20.0), (20, 0, True, 20.0))
DEADLINE_S = 60
SLACK_S = 5.0  # a poll or two, the SIGTERM grace of a job session, and load


def _local_args(grace: float) -> list[str]:
    return sweep_args(DEADLINE_S, "--expocloud-max-workers", "2",
                      "--expocloud-poll-interval", "0.1",
                      "--expocloud-heartbeat-grace", str(grace))


def _gce_args(compute, emulator: str, grace: float) -> list[str]:  # type: ignore[no-untyped-def]
    return emulated_args(compute, emulator, None,
                         *sweep_args(DEADLINE_S, "--expocloud-heartbeat-grace", str(grace),
                                     "--expocloud-poll-interval", "0.2",
                                     "--expocloud-slow-poll-interval", "1"))


def _reported(workdir: Path) -> dict[str, dict]:
    runs = run_dirs(workdir)
    path = runs[-1] / "jobs.jsonl" if runs else None
    if path is None or not path.exists():
        return {}
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {"/".join(r["wildcards"][k] for k in ("a", "b", "i")): r for r in records
            if r.get("rule") == "sweep"}


def _running(ledger: Path, since: float = 0.0) -> set[str]:
    """Jobs whose script started (at ``since`` or later) and has not ended (in the ledger)."""
    state: dict[str, tuple[str, float]] = {}
    for entry in read_ledger(ledger):
        if entry["event"] in ("start", "end"):
            state[entry["job"]] = (entry["event"], entry["t"])
    return {job for job, (event, t) in state.items() if event == "start" and t >= since}


def _kill_mid_run(workdir: Path, args: list[str], env: dict | None, ledger: Path,
                  fresh: bool = False) -> tuple[float, dict[str, dict]]:
    """Start the run in a session of its own; SIGKILL it once some jobs are reported and a slow
    one is running (``fresh``: one that started within the last second, so that it still runs
    a few seconds later). Returns when it was killed and what it had reported by then."""
    proc = subprocess.Popen([SNAKEMAKE, *args], cwd=workdir, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    def slow_running() -> bool:
        since = time.time() - 1.0 if fresh else 0.0
        return any(Grid.is_slow(j) for j in _running(ledger, since))

    try:
        assert wait_until(lambda: len(_reported(workdir)) >= 3 and slow_running(),
                          timeout=300, interval=0.2), \
            "the run never got going"
        proc.send_signal(signal.SIGKILL)
        killed = time.time()
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return killed, _reported(workdir)


def _rerun(workdir: Path, args: list[str], env: dict | None,
           said: list[str] | None = None) -> tuple[subprocess.CompletedProcess, bool]:
    """What the user does, step by step, each step only when Snakemake asks for it: the lock
    ("--unlock"), incomplete files (add --rerun-incomplete; Snakemake checks these first).
    The lock must have been there (SIGKILL leaves it). Returns the last run and whether
    --rerun-incomplete was needed; ``said`` collects every step's stderr."""
    def snakemake(*extra: str) -> subprocess.CompletedProcess:
        done = subprocess.run([SNAKEMAKE, *args, *extra], cwd=workdir, env=env,
                              capture_output=True, text=True, timeout=600)
        if said is not None:
            said.append(done.stderr)
        return done

    extra: list[str] = []
    unlocked = False
    for _ in range(3):
        result = snakemake(*extra)
        if "IncompleteFilesException" in result.stderr and not extra:
            extra = ["--rerun-incomplete"]
        elif "LockException" in result.stderr and not unlocked:
            unlock = snakemake("--unlock")
            assert unlock.returncode == 0, unlock.stderr[-3000:]
            unlocked = True
        else:
            break
    assert unlocked, "the killed run left no lock?"
    return result, bool(extra)


def _incomplete(workdir: Path) -> set[str]:
    """Jobs whose output Snakemake marks incomplete (``.snakemake/incomplete/``: one file per
    output, named by its path in base64): what --rerun-incomplete will run again."""
    jobs = set()
    for marker in (workdir / ".snakemake" / "incomplete").glob("*"):
        try:
            path = base64.urlsafe_b64decode(marker.name.encode()).decode()
        except ValueError:
            continue
        if (match := re.search(r"out/(\d+/\d+/\d+)\.txt$", path)):
            jobs.add(match.group(1))
    return jobs


def _check_rerun(ledger: Path, killed: float, first: dict[str, dict],
                 incomplete: set[str]) -> tuple[int, int, int]:
    """No job that had finished in the first run starts again. Finished: reported solved
    by the coordinator *and* taken by Snakemake (its output not marked incomplete). A job
    reported in the last moment before the kill, before Snakemake's next status check took
    it, is incomplete to Snakemake and rightly run again: counted, not forbidden. Returns
    (jobs started by the rerun, finished jobs, reported but not taken)."""
    entries = read_ledger(ledger)
    second = {e["job"] for e in entries if e["event"] == "start" and e["t"] > killed}
    solved = {j for j, r in first.items() if r["outcome"] == "solved"}
    finished = solved - incomplete
    again = finished & second
    assert not again, f"finished in the first run, started again: {sorted(again)}"
    return len(second), len(finished), len(solved & incomplete)


def _check_quiet(ledger: Path, killed: float, grace: float) -> int:
    """No job of the first run ran past the grace period (+ the session's SIGTERM grace and
    load): each worker killed its jobs as it stopped. Returns the jobs that were orphaned by
    the kill (still ticking after it) and so killed by their worker's dead man's switch."""
    entries = read_ledger(ledger)
    late = [e for e in entries if e["t"] > killed + grace + SLACK_S]
    assert not late, f"jobs ran on after the grace period: {late[:5]}"
    return len({e["job"] for e in entries if e["t"] > killed and e["event"] == "tick"})


def test_sigkilled_coordinator_local(tmp_path: Path, fault_figures) -> None:
    workdir = tmp_path / "wf"
    ledger = tmp_path / "ledger.jsonl"
    write_workflow(workdir, GRID, ledger)
    grace = 4.0
    args = _local_args(grace)
    killed, first = _kill_mid_run(workdir, args, None, ledger)
    workers = worker_pids(workdir / ".expocloud")
    assert wait_until(lambda: not worker_pids(workdir / ".expocloud"), timeout=grace + 20)
    stopped_after = time.time() - killed
    # gone by their dead man's switch: within the grace period and a poll or two (+ load)
    assert stopped_after < grace + 10, stopped_after
    assert wait_until(lambda: not processes_under(workdir), timeout=20), \
        processes_under(workdir)
    orphaned = _check_quiet(ledger, killed, grace)
    marked = _incomplete(workdir)
    result, incomplete = _rerun(workdir, args, None)
    assert result.returncode == 0, result.stderr[-4000:]
    restarted, finished, not_taken = _check_rerun(ledger, killed, first, marked)
    for job in GRID.jobs:
        assert (workdir / "out" / f"{job}.txt").read_text() == Grid.text(job)
    assert not processes_under(workdir)
    fault_figures("SIGKILL the coordinator (local engine)", injected=1, survived=1,
                  jobs=len(GRID.jobs), jobs_lost=0, orphan_vms=0,
                  detail=f"{len(workers)} workers stopped {stopped_after:.1f} s after the kill "
                  f"(grace {grace:g} s); rerun: {restarted} jobs started, none of the "
                  f"{finished} that had finished", workers=len(workers), not_taken=not_taken,
                  stopped_after_s=stopped_after, restarted=restarted, orphaned=orphaned,
                  rerun_incomplete_needed=incomplete)


def test_sigkilled_coordinator_gce(tmp_path: Path, fake_compute,  # noqa: F811
                                   gcs_emulator, fault_figures) -> None:  # noqa: F811
    """The same on emulated GCE (moved here from tests/e2e/test_gce.py, and extended with the
    rerun): each worker's dead man's switch deletes its own VM within the grace period, and
    ``expocloud cleanup`` finds nothing left. The rerun uses the same bucket prefix."""
    workdir = tmp_path / "wf"
    ledger = tmp_path / "ledger.jsonl"
    write_workflow(workdir, GRID, ledger)
    grace = 8.0
    args = _gce_args(fake_compute, gcs_emulator, grace)
    env = emulated_env(gcs_emulator)
    killed, first = _kill_mid_run(workdir, args, env, ledger)
    vms = len(fake_compute.instances())
    assert wait_until(lambda: not fake_compute.instances(), timeout=grace + 30), \
        fake_compute.instances()
    stopped_after = time.time() - killed
    # gone by the dead man's switch, not by a timeout of ours: within grace + a poll or two
    assert stopped_after < grace + 10, stopped_after
    assert wait_until(lambda: not worker_pids(fake_compute.scratch_root), timeout=20)
    assert wait_until(lambda: not processes_under(workdir), timeout=20)
    orphaned = _check_quiet(ledger, killed, grace)
    cleanup = subprocess.run([EXPOCLOUD, "cleanup", "--project", PROJECT, "--zones", ZONES,
                              "--endpoint", fake_compute.endpoint], cwd=workdir,
                             capture_output=True, text=True, timeout=60)
    assert cleanup.returncode == 0, cleanup.stderr
    assert "no expocloud VMs found" in cleanup.stdout

    marked = _incomplete(workdir)
    result, incomplete = _rerun(workdir, args, env)
    assert result.returncode == 0, result.stderr[-4000:]
    restarted, finished, not_taken = _check_rerun(ledger, killed, first, marked)
    outputs = bucket_outputs(gcs_emulator, args[args.index("--default-storage-prefix") + 1])
    assert {name: text for name, (text, _) in outputs.items()} == \
        {f"out/{job}.txt": Grid.text(job) for job in GRID.jobs}
    assert wait_until(lambda: not fake_compute.instances(), timeout=60)
    fault_figures("SIGKILL the coordinator (emulated GCE)", injected=1, survived=1,
                  jobs=len(GRID.jobs), jobs_lost=0, orphan_vms=len(fake_compute.instances()),
                  detail=f"{vms} VMs deleted themselves {stopped_after:.1f} s after the kill "
                  f"(grace {grace:g} s); rerun: {restarted} jobs started, none of the "
                  f"{finished} that had finished", vms=vms, not_taken=not_taken,
                  stopped_after_s=stopped_after, restarted=restarted, orphaned=orphaned,
                  rerun_incomplete_needed=incomplete)


# -- a rerun at once, while the killed run's workers still live -------------------------------
# The grace is far longer than the rerun takes: only the rerun can have stopped the workers.
LONG_GRACE = 120.0
STOPPED = re.compile(r"run (\S+)'s coordinator died before the run ended: stopped (\d+) of its "
                     r"workers before this run starts")
HARVESTED = re.compile(r"harvested (\d+) results of run (\S+): (\d+) solved, (\d+) timeouts")
ADOPTED = re.compile(r"run (\S+)'s coordinator died before the run ended: adopted (\d+) "
                     r"job\(s\) in flight on (\d+) of its workers")


def _rerun_at_once(workdir: Path, args: list[str], env: dict | None, ledger: Path,
                   line: re.Pattern, *rerun: str) -> tuple[float, Path, int, bytes, int]:
    """Kill the run mid-sweep, then at once what a user does: ``snakemake --unlock``, and the
    same command with ``--rerun-incomplete`` (and ``rerun``). Returns when it was killed, the
    killed run's directory, the count in the rerun's one ``line`` about the killed run (the
    workers it stopped, or the jobs in flight it adopted), the killed run's key (read from its
    host-side state before the rerun, which removes it), and the results the rerun says it
    harvested (its other line)."""
    killed, _ = _kill_mid_run(workdir, args, env, ledger, fresh=True)
    run = run_dirs(workdir)[-1]
    run_key = bytes.fromhex((run / "run.key").read_text())

    def snakemake(*extra: str) -> subprocess.CompletedProcess:
        done = subprocess.run([SNAKEMAKE, *args, *extra], cwd=workdir, env=env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-4000:]
        return done

    snakemake("--unlock")
    said = snakemake("--rerun-incomplete", *rerun).stderr
    lines = line.findall(said)
    assert [found[0] for found in lines] == [run.name], said[-3000:]
    harvested = HARVESTED.findall(said)
    assert [found[1] for found in harvested] == [run.name], said[-3000:]
    return killed, run, int(lines[0][1]), run_key, int(harvested[0][0])


def _solved_after_kill(run: Path, run_key: bytes) -> set[str]:
    """The jobs the killed run's workers solved after its coordinator died: a solved result in
    its bucket, verified with its worker's key, of a job its ``jobs.jsonl`` does not record
    (jobs named by their wildcards, from the run's ``submitted.jsonl``)."""
    state = json.loads((run / "coordinator.json").read_text())
    bucket = open_bucket(state["bucket_url"])
    recorded = {r["key"] for r in read_jsonl(run / "jobs.jsonl") if "harvested_by" not in r}
    names = {r["key"]: "/".join(r["meta"]["wildcards"][k] for k in ("a", "b", "i"))
             for r in read_jsonl(run / "submitted.jsonl")}
    solved = set()
    for name in bucket.list(WORKERS_PREFIX):
        if (pair := parse_result_key(name)) is None:
            continue
        _, worker = pair  # an object may hold several of the worker's results (ResultBatch)
        batch = ResultBatch.decode(bucket.read(name).data, worker_key(run_key, worker))
        solved |= {names[r.key] for r in batch.results
                   if r.end is AttemptEnd.SOLVED and r.key not in recorded}
    return solved


def _check_stopped_first(ledger: Path, killed: float, stopped_at: float,
                         solved: set[str]) -> tuple[int, int]:
    """Once the rerun stopped the killed run's workers (``stopped_at``, before it started
    anything), no job of theirs leaves a trace: every later ledger line is of a job the rerun
    started; and no job they ``solved`` after the kill runs again (its result is harvested).
    Returns (jobs of the killed run that ran past the kill, jobs whose script ended between
    the kill and the stop and ran again in the rerun: in flight still, their job's snakemake
    not done when its worker was stopped)."""
    entries = read_ledger(ledger)
    old = {e["pid"] for e in entries if e["event"] == "start" and e["t"] < stopped_at}
    late = [e for e in entries if e["pid"] in old and e["t"] > stopped_at]
    assert not late, f"the killed run's jobs ran on into the rerun: {late[:5]}"
    running = {e["job"] for e in entries if e["pid"] in old and e["t"] > killed}
    ended = {e["job"] for e in entries if e["event"] == "end" and killed < e["t"] < stopped_at}
    again = {e["job"] for e in entries if e["event"] == "start" and e["t"] > stopped_at}
    assert not solved & again, f"solved after the kill, run again: {sorted(solved & again)}"
    return len(running), len(ended & again)


def _check_prefix_refused(workdir: Path, args: list[str], env: dict | None, run_id: str,
                          state_dir: Path) -> None:
    """A new run given the killed run's id (from another state directory, so that only the
    bucket prefix is shared) stops at once with the one-line error: the prefix holds that
    run's objects, whose results it would take for its own."""
    refused = subprocess.run([SNAKEMAKE, *args, "--forceall", "--expocloud-run-id", run_id,
                              "--expocloud-state-dir", str(state_dir)], cwd=workdir, env=env,
                             capture_output=True, text=True, timeout=300)
    assert refused.returncode != 0
    assert re.search(r"--expocloud-run-id: .* holds \d+ objects of another run", refused.stderr), \
        refused.stderr[-3000:]


def test_rerun_stops_the_killed_runs_workers_first_local(tmp_path: Path, fault_figures) -> None:
    """Rerun at once after a SIGKILL (local engine) with ``--expocloud-no-adopt``: the rerun
    finds the killed run by its host-side state, powers off its worker processes, harvests
    their results, and only then starts; no job solved after the kill runs again, every output is written, no worker of
    either run is left."""
    workdir = tmp_path / "wf"
    ledger = tmp_path / "ledger.jsonl"
    write_workflow(workdir, GRID, ledger)
    args = _local_args(LONG_GRACE)
    killed, old, stopped, run_key, harvested = _rerun_at_once(workdir, args, None, ledger,
                                                              STOPPED, "--expocloud-no-adopt")
    assert stopped == 2  # both workers lived: their grace is far longer than the rerun
    stopped_at = json.loads((old / "run.json").read_text())["stopped_by"]["at"]
    solved = _solved_after_kill(old, run_key)
    running, redone = _check_stopped_first(ledger, killed, stopped_at, solved)
    for job in GRID.jobs:
        assert (workdir / "out" / f"{job}.txt").read_text() == Grid.text(job)
    assert not worker_pids(workdir / ".expocloud")
    assert not processes_under(workdir)
    assert not (old / "run.key").exists()  # a later run leaves it alone
    fault_figures("SIGKILL the coordinator, rerun at once (local engine)", injected=1,
                  survived=1, jobs=len(GRID.jobs), jobs_lost=0, orphan_vms=0,
                  detail=f"rerun stopped {stopped} workers ({running} jobs running) before "
                  f"starting; {len(solved)} jobs solved after the kill, none run again "
                  f"({harvested} results harvested); {redone} still in flight ran again",
                  workers=stopped, running=running, redone=redone, solved_after=len(solved),
                  harvested=harvested)


def test_rerun_stops_the_killed_runs_workers_first_gce(tmp_path: Path, fake_compute,  # noqa: F811
                                                       gcs_emulator, fault_figures,  # noqa: F811
                                                       monkeypatch) -> None:
    """The same on emulated GCE (``--expocloud-no-adopt``): the rerun deletes the killed
    run's VMs by its label and
    waits until none is listed, harvests their results before it starts (each job solved
    after the kill is reported solved from its result, not run); no VM is left after the
    rerun."""
    workdir = tmp_path / "wf"
    ledger = tmp_path / "ledger.jsonl"
    write_workflow(workdir, GRID, ledger)
    args = _gce_args(fake_compute, gcs_emulator, LONG_GRACE)
    env = emulated_env(gcs_emulator)
    killed, old, stopped, run_key, harvested = _rerun_at_once(workdir, args, env, ledger,
                                                              STOPPED, "--expocloud-no-adopt")
    assert stopped >= 1
    stopped_at = json.loads((old / "run.json").read_text())["stopped_by"]["at"]
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_emulator)  # to read the killed run's bucket
    solved = _solved_after_kill(old, run_key)
    running, redone = _check_stopped_first(ledger, killed, stopped_at, solved)
    # each is incomplete to Snakemake (its worker cannot clear this host's marker), so the
    # rerun submitted it again: reported solved from the killed run's result
    rerun = read_jsonl(run_dirs(workdir)[-1] / "jobs.jsonl")
    assert {job_of(r) for r in rerun if r.get("harvested_from") == old.name} == solved
    outputs = bucket_outputs(gcs_emulator, args[args.index("--default-storage-prefix") + 1])
    assert {name: text for name, (text, _) in outputs.items()} == \
        {f"out/{job}.txt": Grid.text(job) for job in GRID.jobs}
    assert wait_until(lambda: not fake_compute.instances(), timeout=60)
    assert wait_until(lambda: not worker_pids(fake_compute.scratch_root), timeout=20)
    _check_prefix_refused(workdir, args, env, old.name, tmp_path / "elsewhere")
    assert not fake_compute.instances()
    fault_figures("SIGKILL the coordinator, rerun at once (emulated GCE)", injected=1,
                  survived=1, jobs=len(GRID.jobs), jobs_lost=0, orphan_vms=0,
                  detail=f"rerun deleted {stopped} VMs ({running} jobs running) before "
                  f"starting; {len(solved)} jobs solved after the kill, none run again "
                  f"({harvested} results harvested); {redone} still in flight ran again",
                  vms=stopped, running=running, redone=redone, solved_after=len(solved),
                  harvested=harvested)


# -- a rerun at once adopts the killed run's jobs in flight ------------------------------------
def _check_adopted(ledger: Path, killed: float, rerun: list[dict], old: str) -> tuple[int, int]:
    """No job in flight at the kill starts again: each runs to its end on its old worker
    (adopted), and every job starts at most once after the kill (one adopted just as it
    started is started once, by its old worker). The rerun records the adopted jobs it took
    the results of (``adopted_from``). Returns (jobs in flight at the kill, adopted)."""
    entries = read_ledger(ledger)
    state: dict[str, str] = {}
    for entry in entries:
        if entry["t"] <= killed and entry["event"] in ("start", "end"):
            state[entry["job"]] = entry["event"]
    in_flight = {job for job, event in state.items() if event == "start"}
    assert in_flight, "nothing was in flight at the kill"
    starts = Counter(e["job"] for e in entries if e["event"] == "start" and e["t"] > killed)
    assert not in_flight & set(starts), \
        f"in flight at the kill, started again: {sorted(in_flight & set(starts))}"
    assert all(count == 1 for count in starts.values()), starts
    ended = {e["job"] for e in entries if e["event"] == "end" and e["t"] > killed}
    assert in_flight <= ended, f"in flight at the kill, never ended: {in_flight - ended}"
    adopted = {job_of(r) for r in rerun if r.get("adopted_from") == old}
    # adopted: in flight at the kill, started after it by an old worker, or ended before it
    # with its report still on the worker (a worker holding several jobs reports them
    # together: ResultBatch), never a job that no worker ran
    assert adopted and adopted <= set(state) | set(starts), adopted
    assert all(r["outcome"] == "solved" for r in rerun if r.get("adopted_from") == old)
    return len(in_flight), len(adopted)


def test_rerun_adopts_the_killed_runs_jobs_in_flight_local(tmp_path: Path, fault_figures) -> None:
    """Rerun at once after a SIGKILL (local engine): the rerun adopts the killed run, whose
    workers live on (their grace is far longer than the rerun); the jobs they were running
    end there and the rerun takes their results instead of running them again. Every output
    is written once and right, no worker of either run is left, the killed run's key is gone."""
    workdir = tmp_path / "wf"
    ledger = tmp_path / "ledger.jsonl"
    write_workflow(workdir, ADOPT_GRID, ledger)
    args = _local_args(LONG_GRACE)
    killed, old, adopted_jobs, _key, harvested = _rerun_at_once(workdir, args, None, ledger,
                                                                ADOPTED)
    rerun = read_jsonl(run_dirs(workdir)[-1] / "jobs.jsonl")
    in_flight, adopted = _check_adopted(ledger, killed, rerun, old.name)
    for job in ADOPT_GRID.jobs:
        assert (workdir / "out" / f"{job}.txt").read_text() == Grid.text(job)
    assert not worker_pids(workdir / ".expocloud")
    assert not processes_under(workdir)
    assert not (old / "run.key").exists()
    fault_figures("SIGKILL the coordinator, rerun at once: adopted (local engine)", injected=1,
                  survived=1, jobs=len(ADOPT_GRID.jobs), jobs_lost=0, orphan_vms=0,
                  detail=f"{in_flight} jobs in flight at the kill, none run again: {adopted} "
                  f"adopted by the rerun ({adopted_jobs} in flight when it started), "
                  f"{harvested} results harvested", in_flight=in_flight, adopted=adopted,
                  harvested=harvested)


def test_rerun_adopts_the_killed_runs_jobs_in_flight_gce(tmp_path: Path, fake_compute,  # noqa: F811
                                                         gcs_emulator,  # noqa: F811
                                                         fault_figures) -> None:
    """The same on emulated GCE: the killed run's VMs live on under the rerun, which keeps
    their inboxes fresh, takes their results, and deletes each VM once it holds nothing."""
    workdir = tmp_path / "wf"
    ledger = tmp_path / "ledger.jsonl"
    write_workflow(workdir, ADOPT_GRID, ledger)
    args = _gce_args(fake_compute, gcs_emulator, LONG_GRACE)
    env = emulated_env(gcs_emulator)
    killed, old, adopted_jobs, _key, harvested = _rerun_at_once(workdir, args, env, ledger,
                                                                ADOPTED)
    rerun = read_jsonl(run_dirs(workdir)[-1] / "jobs.jsonl")
    in_flight, adopted = _check_adopted(ledger, killed, rerun, old.name)
    outputs = bucket_outputs(gcs_emulator, args[args.index("--default-storage-prefix") + 1])
    assert {name: text for name, (text, _) in outputs.items()} == \
        {f"out/{job}.txt": Grid.text(job) for job in ADOPT_GRID.jobs}
    assert not fake_compute.instances()  # the rerun ended with every VM of both runs gone
    assert wait_until(lambda: not worker_pids(fake_compute.scratch_root), timeout=20)
    assert not (old / "run.key").exists()
    fault_figures("SIGKILL the coordinator, rerun at once: adopted (emulated GCE)", injected=1,
                  survived=1, jobs=len(ADOPT_GRID.jobs), jobs_lost=0, orphan_vms=0,
                  detail=f"{in_flight} jobs in flight at the kill, none run again: {adopted} "
                  f"adopted by the rerun ({adopted_jobs} in flight when it started), "
                  f"{harvested} results harvested", in_flight=in_flight, adopted=adopted,
                  harvested=harvested)
