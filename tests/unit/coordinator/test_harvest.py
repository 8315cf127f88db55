"""A crashed run's results are harvested by the rerun that stops its workers (recover.py,
harvest.py): a timeout the dead coordinator never read joins its frontier; a solved job is
reported solved by the rerun without running; a result that does not verify with its
worker's key (forged) is ignored.

The crashed run is the real coordinator driven round by round (tests/coordinator_rig.py): it
records its jobs at submission, assigns them to a worker that exists as the objects the test
writes, and "dies" (its host-side state left, its lock free) before it reads their results.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from expo_executor.coordinator.harvest import submission
from expo_executor.coordinator.loop import JobRequest
from expo_executor.coordinator.recover import recover
from expo_executor.coordinator.requests import Harvested
from expo_executor.runs.files import RunFiles
from expo_executor.coordinator.run_state import KEY as KEY_FILE
from expo_executor.coordinator.run_state import RunState, record
from expo_executor.coordinator.state import FamilyRef, StateDir
from expo_executor.core.hardness import HardnessPoint
from expo_executor.core.records import JobMeta
from expo_executor.core.scheduler import Outcome, Task
from expo_executor.frontends.base import job_request
from expo_executor.frontends.snakemake.describe import identity
from expo_executor.frontends.snakemake.executor import Executor
from expo_executor.protocol.bucket import LocalBucket
from expo_executor.protocol.keys import result_key

from tests.coordinator_rig import Rig
from tests.helpers import KEY, attempt, write_result

FAMILY = FamilyRef("Snakefile", "solve", "n", 60.0)


def _request(n: int) -> JobRequest:
    """Job ``n`` of the sweep: its key is the run's (``j<n>a1``), its identity is stable."""
    return job_request(Task(f"j{n}a1", f"solve n={n}", family=FAMILY.key,
                            point=HardnessPoint(("solve",), (float(n),))),
                       ["true"], "/", {}, 60.0, family=FAMILY,
                       meta=JobMeta("solve", {"n": str(n)}),
                       identity=f"solve-{n}")


def _crashed_run(state_root: Path) -> Rig:
    """Run r1: jobs 1-4 on worker w-1; job 4 solved and read; then the coordinator died. After
    the crash w-1 wrote job 3's timeout, job 2's solution; someone else wrote a "solved" of job
    1 as w-1, signed with a key of their own, and worker w-2 (with its own, valid key) a
    "timeout" of job 1, which was never given to it (a timeout would poison the frontier)."""
    run_dir = state_root / "runs" / "r1"
    run_dir.mkdir(parents=True)
    rig = Rig(run_dir, slots=4)
    rig.coordinator.submit([_request(n) for n in (1, 2, 3, 4)])
    rig.round()
    rig.ready("w-1")
    rig.round()
    assert rig.assigned("w-1") == {"j1a1", "j2a1", "j3a1", "j4a1"}
    rig.result("j4a1", "w-1", "solved")
    rig.ready("w-1")
    rig.round()
    assert rig.reports["j4a1"].outcome is Outcome.SOLVED
    record(run_dir, RunState("r1", "local", str(rig.direct.root)), KEY).release()  # killed
    rig.result("j3a1", "w-1", "timeout")
    rig.result("j2a1", "w-1", "solved")
    # forged: signed with w-1's key under another run's key
    write_result(rig.direct, attempt("j1a1", "w-1", "solved", 0.0, 1.0), key=b"f" * 32)
    write_result(rig.direct, attempt("j1a1", "w-2", "timeout", 0.0, 1.0))
    return rig


def test_the_rerun_harvests_a_crashed_runs_results(tmp_path: Path) -> None:
    state = StateDir(tmp_path)
    old = _crashed_run(tmp_path)
    submitted = RunFiles(old.coordinator.run_dir).submitted()
    assert [r["identity"] for r in submitted] == ["solve-1", "solve-2", "solve-3", "solve-4"]
    assert submitted[0]["family"]["rule"] == "solve" and submitted[0]["point"]["vector"] == [1.0]
    said: list[str] = []
    found = recover(tmp_path, state.new_run("r2"), said.append, adopt=False).harvested

    assert "expocloud: harvested 2 results of run r1: 1 solved, 1 timeouts" in said, said
    assert any("j1a1 that does not verify" in line for line in said), said
    assert list(found) == ["solve-2"]  # not job 1 (forged), nor job 4 (read before the crash)
    assert (found["solve-2"].run_id, found["solve-2"].key) == ("r1", "j2a1")
    frontier = state.load_frontier(FAMILY)
    assert frontier.dominator(HardnessPoint(("solve",), (3.0,))) is not None
    assert frontier.dominator(HardnessPoint(("solve",), (2.0,))) is None  # not w-2's timeout
    timeouts = [r for r in RunFiles(old.coordinator.run_dir).jobs() if r["outcome"] == "timeout"]
    assert [(r["key"], r["harvested_by"], r["wildcards"]) for r in timeouts] == \
        [("j3a1", "r2", {"n": "3"})]
    assert not (old.coordinator.run_dir / KEY_FILE).exists()


def test_a_batch_of_results_is_harvested_even_when_its_first_job_was_read(
        tmp_path: Path) -> None:
    """A worker holding prefetched jobs reports several in one object, named for its first
    job: the dead coordinator had handled that job (it is in jobs.jsonl), not the others."""
    state = StateDir(tmp_path)
    run_dir = tmp_path / "runs" / "r1"
    run_dir.mkdir(parents=True)
    rig = Rig(run_dir, slots=4)
    rig.coordinator.submit([_request(n) for n in (1, 2, 3, 4)])
    rig.round()
    rig.ready("w-1")
    rig.round()
    rig.result("j4a1", "w-1", "solved")
    rig.round()
    assert rig.reports["j4a1"].outcome is Outcome.SOLVED
    record(run_dir, RunState("r1", "local", str(rig.direct.root)), KEY).release()  # killed
    rig.direct.delete(result_key("j4a1", "w-1"))  # read and deleted: its record is on disk
    # j4's result again (the worker's write of it seemed to fail), with two results after it
    rig.batch("w-1", ("j4a1", "timeout"), ("j2a1", "solved"), ("j3a1", "timeout"))
    said: list[str] = []
    found = recover(tmp_path, state.new_run("r2"), said.append, adopt=False).harvested
    assert "expocloud: harvested 2 results of run r1: 1 solved, 1 timeouts" in said, said
    assert sorted(found) == ["solve-2"]  # job 4's handled result is not taken again
    frontier = state.load_frontier(FAMILY)
    assert frontier.dominator(HardnessPoint(("solve",), (3.0,))) is not None
    assert frontier.dominator(HardnessPoint(("solve",), (2.0,))) is None


def test_a_harvested_job_is_reported_solved_without_running(tmp_path: Path) -> None:
    """The rerun's coordinator: the harvested job is solved at once and never scheduled; the
    job with a harvested timeout is skipped by its frontier, once; the forged one runs."""
    state = StateDir(tmp_path)
    _crashed_run(tmp_path)
    found = recover(tmp_path, state.new_run("r2"), lambda line: None, adopt=False).harvested
    new = Rig(tmp_path / "runs" / "r2", slots=4)
    new.coordinator.state = new.coordinator.reporter.state = state  # the workflow's frontiers
    requests = [_request(n) for n in (1, 2, 3)]
    requests[1].harvested = found[requests[1].identity]
    new.coordinator.submit(requests)
    new.round()
    new.round()  # (the rig fails a second report of a job)

    solved = new.coordinator.take_report("j2a1")
    assert solved is not None and solved.outcome is Outcome.SOLVED
    assert "r1" in solved.message and "harvested" in solved.message
    assert new.reports["j3a1"].outcome is Outcome.SKIPPED  # its own timeout, from r1
    assert new.coordinator.scheduler.state("j1a1") == "queued"
    assert new.coordinator.take_report("j2a1") is None  # reported once
    records = {r["key"]: r for r in RunFiles(tmp_path / "runs" / "r2").jobs()}
    assert records["j2a1"]["outcome"] == "solved"
    assert records["j2a1"]["harvested_from"] == "r1"
    assert "j2a1" not in {json.loads(line)["key"] for line in
                          (tmp_path / "runs" / "r2" / "submitted.jsonl").read_text().splitlines()}


# -- the Snakemake front end's side: which job is "the same", and whether its outputs are there --
class _Output(str):
    """A Snakemake output file as the executor reads it: its path, and for a storage file (no
    shared file system) the storage object it queries."""

    def __new__(cls, path: str, stored: bool | None = None) -> "_Output":
        output = super().__new__(cls, path)
        output.is_storage = stored is not None

        async def managed_exists() -> bool:
            return bool(stored)
        output.storage_object = SimpleNamespace(managed_exists=managed_exists)
        return output


@dataclass
class _Job:
    name: str
    output: list
    jobid: int = 1
    jobs: list = field(default_factory=list)  # a group job's members

    def is_group(self) -> bool:
        return bool(self.jobs)


def test_a_jobs_identity_is_its_rule_and_outputs_not_its_run_numbering() -> None:
    first = identity(_Job("solve", ["out/1.txt", "out/1.log"], jobid=7))
    assert identity(_Job("solve", ["out/1.log", "out/1.txt"], jobid=3)) == first
    assert identity(_Job("solve", ["out/2.txt", "out/1.log"])) != first
    assert identity(_Job("other", ["out/1.txt", "out/1.log"])) != first
    a, b = _Job("a", ["x"]), _Job("b", ["y"])
    assert identity(_Job("group", [], jobs=[a, b])) == identity(_Job("group", [], jobs=[b, a]))
    assert identity(_Job("group", [], jobs=[a, b])) != identity(_Job("group", [], jobs=[a]))


def test_a_harvested_job_runs_again_when_an_output_is_missing(tmp_path: Path) -> None:
    """Reported from the crashed run's result only when every output is there: a local file,
    or a storage object; else it runs as usual, said in one line."""
    there = tmp_path / "there.txt"
    there.write_text("done")
    found = Harvested("r1", "j2a1", "w-1", 1.0)
    lines: list[str] = []
    executor = SimpleNamespace(coordinator=SimpleNamespace(harvested={"id": found}),
                               logger=SimpleNamespace(info=lines.append),
                               describer=SimpleNamespace(label=lambda job: job.name))
    complete = _Job("solve", [_Output(str(there)), _Output("gs-copy/a.txt", stored=True)])
    assert Executor._harvested(executor, complete, "id") is found
    assert Executor._harvested(executor, complete, "another") is None
    assert not lines
    for missing in (_Output(str(tmp_path / "gone.txt")), _Output("gs-copy/b.txt", stored=False)):
        job = _Job("solve", [_Output(str(there)), missing])
        assert Executor._harvested(executor, job, "id") is None
        assert lines.pop() == f"expocloud: solve was solved by run r1, but {missing} is " \
            "missing: it runs again"


def test_with_confirmation_a_timeout_counts_only_when_two_workers_saw_it(tmp_path: Path) -> None:
    """--expocloud-confirm-timeouts: a first timeout prunes nothing until it is confirmed on
    another worker; a crashed run's lone timeout is not harvested (the job runs again), one
    seen on two workers joins the frontier."""
    run_dir = tmp_path / "runs" / "r1"
    run_dir.mkdir(parents=True)
    files = RunFiles(run_dir)
    (run_dir / "run.json").write_text(json.dumps({"settings": {"confirm_timeouts": True}}))
    bucket = LocalBucket(run_dir / "bucket")
    record(run_dir, RunState("r1", "local", str(bucket.root)), KEY).release()
    for n, workers in ((2, ["w-1"]), (3, ["w-1", "w-2"])):
        files.append_submitted(submission(_request(n)))
        for worker in workers:
            files.append_assigned({"key": f"j{n}a1", "worker": worker})
            write_result(bucket, attempt(f"j{n}a1", worker, "timeout", 0.0, 60.0))
    said: list[str] = []
    recover(tmp_path, StateDir(tmp_path).new_run("r2"), said.append, adopt=False)
    assert said[-1] == "expocloud: harvested 1 results of run r1: 0 solved, 1 timeouts"
    frontier = StateDir(tmp_path).load_frontier(FAMILY)
    assert frontier.dominator(HardnessPoint(("solve",), (3.0,))) is not None
    assert frontier.dominator(HardnessPoint(("solve",), (2.0,))) is None


def test_planted_objects_in_a_crashed_runs_prefix_lose_none_of_its_results(
        tmp_path: Path) -> None:
    """A deeply nested object and one too large to read, planted among a crashed run's results
    (issue 30: they made harvest throw every result away): each is said in one line and
    ignored; the run's real results are harvested as before."""
    state = StateDir(tmp_path)
    old = _crashed_run(tmp_path)
    old.direct.write(result_key("j1a1", "w-1"),
                     b'{"v":2,"kind":"result","body":' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    old.direct.write(result_key("j4a1", "w-1"), b"0" * (4 * 1024 * 1024 + 1))
    said: list[str] = []
    found = recover(tmp_path, state.new_run("r2"), said.append, adopt=False).harvested

    assert "expocloud: harvested 2 results of run r1: 1 solved, 1 timeouts" in said, said
    assert list(found) == ["solve-2"]
    refused = [line for line in said if "does not verify" in line]
    assert len(refused) == 2 and any("nested deeper" in line for line in refused) \
        and any("exceeds the" in line for line in refused), said
