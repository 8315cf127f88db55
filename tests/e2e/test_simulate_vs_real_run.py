"""The simulator held to reality: a real run (coordinator, local engine, worker processes, an
injected Spot preemption) and the simulator, given the same workload, configuration and
preemption schedule, end with the same outcome for every job and makespans within 15%; and
the simulator reads a real run's records."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import pytest

from expo_executor.core.records import JobMeta
from expo_executor.frontends.base import job_request
from expo_executor.protocol.bucket import LocalBucket
from expo_executor.coordinator.loop import Coordinator, CoordinatorConfig
from expo_executor.engines.local import LocalEngine, LocalEngineConfig
from expo_executor.core.scheduler import Pool, Scheduler
from expo_executor.simulate.policies import POLICIES, SimConfig
from expo_executor.simulate.simulation import simulate
from expo_executor.simulate.workload import BootDelay, FixedPrices, Workload, boot_from_vms
from expo_executor.coordinator.state import StateDir
from expo_executor.runs.files import RunFiles

from tests.helpers import processes_under, wait_until
from tests.sim_reality import DEADLINE, PREEMPT, REALITY, _sim_jobs, _task

KEY = b"s" * 32
PRICES = FixedPrices(spot=1.0, on_demand=3.0)  # USD per VM-hour: easy sums


# -- simulator vs reality (the workload: tests/sim_reality.py) -------------------------------
def _argv(key: str, runtime: float | None) -> list[str]:
    if key == "fail":
        return ["sh", "-c", f"sleep {runtime}; exit 3"]
    return ["sleep", "60" if runtime is None else str(runtime)]


def _real_run(tmp_path: Path) -> tuple[float, dict[str, str], list[dict], list[dict]]:
    """The workload on the real coordinator and local engine; (makespan, outcomes, job
    records, VM records)."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    bucket = LocalBucket(run_dir / "bucket")
    engine = LocalEngine(LocalEngineConfig(bucket.root, run_dir / "vms", KEY, poll=0.05,
                                           grace=30, heartbeat=1, preempt=dict(PREEMPT)))
    config = CoordinatorConfig("run", 1, 2, idle_timeout=30, poll=0.05, heartbeat=1,
                               status_interval=60, pool=Pool.SPOT, max_on_demand=1)
    coordinator = Coordinator(config, engine, bucket, KEY, run_dir, StateDir(tmp_path),
                              lambda text: None, Scheduler(spot_attempts=1))
    requests = [job_request(_task(key, scope, level), _argv(key, runtime), str(tmp_path), {},
                            DEADLINE, meta=JobMeta("r", {"k": key}))
                for key, scope, level, runtime in REALITY]
    keys = {key for key, *_ in REALITY}
    reports: dict = {}
    started = time.time()
    coordinator.start()
    try:
        coordinator.submit(requests)

        def collect() -> bool:
            for report in coordinator.wait_reports(keys - reports.keys(), 1.0):
                reports[report.key] = report
            return reports.keys() == keys

        assert wait_until(collect, 90, interval=0), f"missing: {keys - reports.keys()}"
    finally:
        coordinator.stop()
    assert not processes_under(tmp_path)
    jobs, vms = RunFiles(run_dir).jobs(), RunFiles(run_dir).vms()
    makespan = max(record["ended"] for record in jobs) - started
    return makespan, {k: r.outcome.value for k, r in reports.items()}, jobs, vms


def _dispatch_latency(jobs: list[dict], poll: float) -> float:
    """From a job's end on a worker to the next job's start on it, as the real run shows it,
    less the coordinator's average wait for its next tick (which the simulator adds itself)."""
    gaps = []
    by_worker: dict[str, list[dict]] = {}
    for record in jobs:
        if record["started"] is not None and record["outcome"] != "skipped":
            by_worker.setdefault(record["worker"], []).append(record)
    for runs in by_worker.values():
        runs.sort(key=lambda r: r["started"])
        for before, after in zip(runs, runs[1:]):
            gaps.append(after["started"] - (before["started"] + before["runtime_s"]))
    return max(0.0, statistics.median(gaps) - poll / 2) if gaps else poll


def test_simulator_and_a_real_run_agree_on_outcomes_and_makespan(tmp_path: Path) -> None:
    real_makespan, real_outcomes, jobs, vms = _real_run(tmp_path)
    records = {r["key"]: r for r in jobs}
    assert records["a1"]["preemptions"] + records["b0"]["preemptions"] == 1, \
        "the injected preemption hit a wave-1 job"
    assert any(vm["end"] == "preempted" and vm["name"] == "w-1" for vm in vms)
    assert any(vm["pool"] == "on_demand" for vm in vms), "the preempted job moved on-demand"

    # The same workload, configuration and preemption schedule in the simulator, with the boot
    # delay and the dispatch latency the real run showed (this machine's, not the cloud's).
    boot = boot_from_vms(vms) or BootDelay(0.5)
    config = SimConfig(max_workers=2, slots=1, max_on_demand=1, spot_attempts=1, poll=0.05,
                       idle_timeout=30, dispatch_s=_dispatch_latency(jobs, 0.05),
                       boot=BootDelay(statistics.median(boot.samples) if boot.samples
                                      else boot.mean))
    sim = simulate(Workload("reality", _sim_jobs()), config, PRICES, preempt_at=PREEMPT,
                   name="hybrid")

    assert sim.outcomes == real_outcomes
    assert sim.counts() == {"solved": 9, "failed": 1, "timeout": 1, "skipped": 3,
                            "model-skipped": 0}  # every outcome is counted, none learned here
    assert sim.preemptions == 1 and sim.requeues == 1
    assert abs(sim.makespan_s - real_makespan) <= 0.15 * real_makespan, \
        f"simulated {sim.makespan_s:.2f} s, real {real_makespan:.2f} s"


# -- hand-checked workloads -------------------------------------------------------------------


# -- a past run as the workload ---------------------------------------------------------------
def _record(key: str, n: int, outcome: str, runtime: float | None) -> dict:
    return {"v": 1, "key": key, "rule": "solve", "wildcards": {"n": str(n)},
            "hardness": {"spec": "n", "dims": ["n"], "vector": [float(n)], "scope": []},
            "outcome": outcome, "runtime_s": runtime, "deadline_s": 10.0, "worker": "w-1",
            "started": 0.0, "ended": 0.0, "preemptions": 0}


# -- the local engine's injected preemptions --------------------------------------------------
def test_the_local_engine_preempts_a_vm_once_when_its_time_comes(tmp_path: Path) -> None:
    bucket = LocalBucket(tmp_path / "bucket")
    engine = LocalEngine(LocalEngineConfig(bucket.root, tmp_path / "vms", KEY,
                                           preempt={"w-1": 0.3}))
    try:
        engine.create(["w-1", "w-2"], Pool.SPOT, 1)
        seen: set[str] = set()

        def preempted() -> bool:
            seen.update(engine.preempted())
            return bool(seen)

        assert wait_until(preempted, 30)
        assert seen == {"w-1"}
        assert engine.preempted() == set(), "reported once"
        assert [i.name for i in engine.list()] == ["w-2"]
        assert not any("w-1" in cmd for _, cmd in processes_under(tmp_path))
        engine.delete("w-1")  # the coordinator deletes what it lost: a no-op now
    finally:
        engine.close()
    assert not processes_under(tmp_path)


# -- the command line -------------------------------------------------------------------------
def test_the_command_compares_policies_on_a_past_run_and_draws_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from expo_executor.simulate import command

    state = tmp_path / ".expocloud"
    run = state / "runs" / "20260101-000000-abcd"
    run.mkdir(parents=True)
    (run / "jobs.jsonl").write_text("".join(
        json.dumps(_record(f"s{n}", n, "solved" if n < 4 else "timeout", 2.0 * n)) + "\n"
        for n in range(1, 7)))
    parser = argparse.ArgumentParser()
    command.add_parser(parser.add_subparsers(dest="command"))
    png, md = tmp_path / "out.png", tmp_path / "out.md"
    args = parser.parse_args(["simulate", "--run", "20260101", "--state-dir", str(state),
                              "--scale", "60", "--vms", "2", "--machine-type", "e2-standard-4",
                              "--boot-s", "60,10", "--png", str(png), "--md", str(md)])
    assert command.run(args) == 0
    out = capsys.readouterr().out
    assert "6 jobs from run 20260101-000000-abcd" in out
    assert "e2-standard-4" in out and "prices: snapshot" in out and "default prior" in out
    for name in POLICIES:
        assert f"| {name} |" in out and f"| {name} |" in md.read_text()
    assert png.stat().st_size > 0
    with pytest.raises(SystemExit):  # a workload is required: a run or a synthetic sweep
        parser.parse_args(["simulate"])
