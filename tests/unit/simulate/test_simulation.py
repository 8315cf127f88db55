"""The simulator on its own, under simulated time: the reality workload's margins in the
simulator's schedule (the real run it is compared with is
tests/e2e/test_simulate_vs_real_run.py), small workloads whose results can be worked out by
hand, policies, stockouts, boot and capacity timeouts, stopped pools and budgets."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from expo_executor.core.pool_health import CAPACITY_RETRY
from expo_executor.core.budget import BudgetConfig
from expo_executor.core.hardness import HardnessPoint
from expo_executor.core.scheduler import Pool
from expo_executor.simulate.policies import POLICIES, SimConfig, policy
from expo_executor.simulate.simulation import compare, percentile, simulate
from expo_executor.simulate.table import ratios, table
from expo_executor.simulate.workload import BootDelay, FixedPrices, SimJob, Workload, load_run, synthetic
from tests.sim_reality import PREEMPT, _sim_jobs


PRICES = FixedPrices(spot=1.0, on_demand=3.0)  # USD per VM-hour: easy sums


# -- simulator vs reality (the workload: tests/sim_reality.py) -------------------------------
def test_the_reality_workload_keeps_its_margins_whatever_the_latencies() -> None:
    """Why the comparison above cannot flake: across boot delays and latencies well beyond
    this machine's (0.1 s and 0.03 s), the simulated outcomes never change, no job harder than
    a3 starts within 1.5 s of it, and the preemption always hits a running job."""
    outcomes = set()
    for boot in (0.1, 0.3, 0.6, 1.0):
        for dispatch in (0.0, 0.05, 0.15, 0.3):
            config = SimConfig(max_workers=2, slots=1, max_on_demand=1, spot_attempts=1,
                               poll=0.05, idle_timeout=30, dispatch_s=dispatch,
                               boot=BootDelay(boot))
            result = simulate(Workload("reality", _sim_jobs()), config, PRICES,
                              preempt_at=PREEMPT)
            outcomes.add(tuple(sorted(result.outcomes.items())))
            assert result.requeues == 1
            harder = [result.started_s[k] for k in ("a4", "a5", "a6") if k in result.started_s]
            assert all(start >= result.started_s["a3"] + 1.5 for start in harder)
    assert len(outcomes) == 1


# -- hand-checked workloads -------------------------------------------------------------------
def _jobs(*runtimes: float, deadline: float | None = None) -> Workload:
    return Workload("w", tuple(SimJob(f"j{i}", f"j{i}", r, deadline)
                               for i, r in enumerate(runtimes)))


def _ladder(*runtimes: float, deadline: float) -> Workload:
    """Jobs of one family and scope, each harder than the one before."""
    return Workload("ladder", tuple(
        SimJob(f"l{i}", f"l{i}", r, deadline, "f", HardnessPoint((), (float(i),)))
        for i, r in enumerate(runtimes)))


def test_one_vm_runs_jobs_back_to_back_and_bills_from_creation() -> None:
    config = SimConfig(max_workers=1, slots=1, main_pool=Pool.ON_DEMAND, max_on_demand=0,
                       poll=1.0, dispatch_s=2.0, boot=BootDelay(60.0), idle_timeout=600)
    result = simulate(_jobs(100, 200, 300), config, PRICES)
    # created at 0, ready at 60; each job starts 2 s after the tick that saw its slot free
    assert result.started_s == {"j0": 62, "j1": 164, "j2": 366}
    assert result.completion_s == {"j0": 162, "j1": 364, "j2": 666}
    assert result.makespan_s == 666 and result.p99_s == 666
    assert result.vm_hours == {"on_demand": pytest.approx(666 / 3600)}
    assert result.cost_usd == pytest.approx(666 / 3600 * 3.0)
    assert result.vms == 1 and result.preemptions == 0
    assert set(result.outcomes.values()) == {"solved"}


def test_a_preempted_job_is_requeued_and_after_its_spot_attempts_runs_on_demand() -> None:
    base = SimConfig(max_workers=1, slots=1, max_on_demand=1, spot_attempts=2, poll=1.0,
                     dispatch_s=0.0, boot=BootDelay(10.0), idle_timeout=600)
    # w-1 (Spot) dies 50 s in, its replacement w-2 40 s in: two preemptions, then on-demand
    result = simulate(_jobs(100), policy("spot-then-od", base), PRICES,
                      preempt_at={"w-1": 50, "w-2": 40}, name="spot-then-od")
    assert result.preemptions == 2 and result.requeues == 2
    assert result.started_s == {"j0": 100}  # w-3, on-demand, created at 90, ready at 100
    assert result.makespan_s == 200
    assert result.vm_hours == {"spot": pytest.approx(90 / 3600),
                               "on_demand": pytest.approx(110 / 3600)}
    # two Spot VMs of under a minute each are billed a minute each (GCE's minimum)
    assert result.cost_usd == pytest.approx(2 * 60 / 3600 * 1.0 + 110 / 3600 * 3.0)
    # naive retries stay on Spot: a third Spot VM runs it
    naive = simulate(_jobs(100), policy("spot-naive", base), PRICES,
                     preempt_at={"w-1": 50, "w-2": 40})
    assert naive.preemptions == 2 and naive.vm_hours.keys() == {"spot"}
    assert naive.makespan_s == 200


def test_each_stockout_holds_the_pool_back_for_the_capacity_retry() -> None:
    config = policy("spot-naive", SimConfig(max_workers=1, slots=1, poll=1.0, dispatch_s=0.0,
                                            boot=BootDelay(10.0), stockout=0.5))
    stockouts = []
    for seed in range(20):
        result = simulate(_jobs(100), config, PRICES, seed=seed)
        # every failed create call costs exactly CAPACITY_RETRY before the next one
        assert result.makespan_s == 110 + result.stockouts * CAPACITY_RETRY
        assert result.vms == 1
        stockouts.append(result.stockouts)
    assert min(stockouts) == 0 and max(stockouts) >= 1


def test_a_timeout_skips_harder_queued_jobs_and_kills_harder_running_ones() -> None:
    one_slot = SimConfig(max_workers=1, slots=1, main_pool=Pool.ON_DEMAND, max_on_demand=0,
                         poll=1.0, dispatch_s=0.0, boot=BootDelay(10.0))
    result = simulate(_ladder(10, math.inf, 5, 5, deadline=50), one_slot, PRICES)
    assert result.outcomes == {"l0": "solved", "l1": "timeout", "l2": "skipped",
                               "l3": "skipped"}
    assert result.makespan_s == 70 and result.started_s.keys() == {"l0", "l1"}
    # two slots: l1 (harder) ends before l0 times out and stands; l2 is running then
    two_slots = SimConfig(max_workers=1, slots=2, main_pool=Pool.ON_DEMAND, max_on_demand=0,
                          poll=1.0, dispatch_s=1.0, boot=BootDelay(10.0))
    result = simulate(_ladder(math.inf, 20, 40, 5, deadline=50), two_slots, PRICES)
    assert result.outcomes == {"l0": "timeout", "l1": "solved", "l2": "skipped",
                               "l3": "skipped"}
    assert result.started_s == {"l0": 11, "l1": 11, "l2": 32}
    # l0 times out at 61 (seen at that tick): l3 is skipped at once, and the worker kills l2
    # (due to end at 72) when it reads its inbox at 62, seen at the tick then
    assert result.completion_s == {"l0": 61, "l1": 31, "l2": 62, "l3": 61}


def test_a_job_that_fails_is_reported_failed() -> None:
    config = SimConfig(max_workers=1, slots=1, poll=1.0, dispatch_s=0.0, boot=BootDelay(0.0))
    work = Workload("w", (SimJob("bad", "bad", 5.0, fails=True), SimJob("ok", "ok", 5.0)))
    assert simulate(work, config, PRICES).outcomes == {"bad": "failed", "ok": "solved"}


def test_a_vm_per_job_pays_one_boot_per_job() -> None:
    base = SimConfig(max_workers=1, slots=2, max_on_demand=1, poll=1.0, dispatch_s=0.0,
                     boot=BootDelay(60.0), idle_timeout=600)
    pooled = simulate(_jobs(100, 100, 100, 100), policy("hybrid", base), PRICES)
    batch = simulate(_jobs(100, 100, 100, 100), policy("vm-per-job", base), PRICES)
    # one 2-slot VM boots once and runs two waves: 60 + 100 + 100
    assert pooled.vms == 1 and pooled.makespan_s == 260
    # two 1-slot VMs at a time, each booted for its job and deleted after it
    assert batch.vms == 4 and batch.makespan_s == 320
    assert batch.vm_hours == {"spot": pytest.approx(4 * 160 / 3600)}
    assert batch.cost_usd == pytest.approx(4 * 160 / 3600 * 1.0 / 2)  # half the machine each
    assert pooled.cost_usd == pytest.approx(260 / 3600 * 1.0)


def test_the_same_seed_gives_the_same_result_and_another_seed_another() -> None:
    from expo_executor.cost.preemption import default_model

    work = synthetic(400, seed=3)
    base = SimConfig(max_workers=8, slots=4, max_on_demand=2, boot=BootDelay(60, 20),
                     stockout=0.2)
    model = default_model("e2-standard-32")
    first = compare(work, base, PRICES, model, seed=7)
    again = compare(work, base, PRICES, model, seed=7)
    assert [r.policy for r in first] == list(POLICIES)
    assert first == again
    other = compare(work, base, PRICES, model, seed=8)
    assert [r.makespan_s for r in other] != [r.makespan_s for r in first]


def test_synthetic_sweeps_time_out_in_the_hard_corner_and_skip_beyond_it() -> None:
    work = synthetic(1000, seed=0)
    assert len(work.jobs) == 1000 and len({j.key for j in work.jobs}) == 1000
    result = simulate(work, policy("on-demand", SimConfig(max_workers=10)), PRICES)
    counts = result.counts()
    assert counts["timeout"] > 0 and counts["skipped"] > counts["timeout"]
    assert counts["solved"] + counts["timeout"] + counts["skipped"] == 1000
    easy = next(j for j in work.jobs if j.point and j.point.vector == (0, 0))
    assert result.outcomes[easy.key] == "solved"


def test_table_and_ratios_compare_against_the_reference_policies() -> None:
    work = synthetic(300, seed=1)
    results = compare(work, SimConfig(max_workers=6, slots=4, max_on_demand=2), PRICES)
    text = table(results)
    assert text.count("\n") == len(POLICIES) + 1
    assert "| on-demand |" in text and "1.000x" in text
    found = ratios(results)
    by = {r.policy: r for r in results}
    assert found["cost_vs_on_demand"] == pytest.approx(by["hybrid"].cost_usd
                                                       / by["on-demand"].cost_usd)
    assert found.keys() == {"cost_vs_on_demand", "makespan_vs_on_demand", "p99_vs_spot_naive",
                            "makespan_vs_vm_per_job"}


def test_percentile_is_nearest_rank() -> None:
    assert percentile(range(1, 101), 99) == 99
    assert percentile([5.0], 99) == 5.0 and percentile([], 99) == 0.0


# -- pool health and the budget, through the coordinator's own decisions ---------------------
def test_vms_that_never_come_up_are_replaced_until_their_pool_stops_and_the_work_fails() -> None:
    config = SimConfig(max_workers=1, slots=1, main_pool=Pool.ON_DEMAND, max_on_demand=0,
                       poll=1.0, dispatch_s=0.0, boot=BootDelay(700.0), boot_timeout=600.0)
    result = simulate(_jobs(10, 10), config, PRICES)
    # w-1 at 0, w-2 at 600, w-3 at 1200, each deleted when overdue; the third stops the pool
    assert result.vms == 3 and result.makespan_s == 1800
    assert result.outcomes == {"j0": "failed", "j1": "failed"}
    assert "3 VMs in a row never reported ready within 600 s" in result.stopped["on_demand"]


def test_a_pool_out_of_capacity_for_its_timeout_stops_and_its_work_fails() -> None:
    config = policy("spot-naive", SimConfig(max_workers=1, slots=1, poll=1.0, dispatch_s=0.0,
                                            boot=BootDelay(10.0), stockout=1.0,
                                            capacity_timeout=100.0))
    result = simulate(_jobs(10, 10), config, PRICES)
    assert result.stockouts == 4 and result.vms == 0  # at 0, 30, 60 and 90 s
    assert result.makespan_s == 100 and set(result.outcomes.values()) == {"failed"}
    assert "no capacity for e2-standard-4" in result.stopped["spot"]


def test_a_stopped_spot_pool_hands_its_work_to_on_demand() -> None:
    config = policy("hybrid", SimConfig(max_workers=2, slots=1, max_on_demand=1, poll=1.0,
                                        dispatch_s=0.0, boot=BootDelay(10.0), stockout=1.0,
                                        capacity_timeout=100.0))
    result = simulate(_jobs(10, 10), config, PRICES)
    assert set(result.outcomes.values()) == {"solved"} and result.stopped.keys() == {"spot"}
    # two jobs do not fit the one on-demand VM: they wait for Spot until it stops at 100 s
    assert result.started_s == {"j0": 110, "j1": 120} and result.vm_hours.keys() == {"on_demand"}


@pytest.mark.parametrize("action,solved,makespan", [("drain", 3, 310), ("cancel", 2, 300)])
def test_a_budget_stops_the_run_as_the_coordinator_would(action: str, solved: int,
                                                         makespan: float) -> None:
    config = SimConfig(max_workers=1, slots=1, main_pool=Pool.ON_DEMAND, max_on_demand=0,
                       poll=1.0, dispatch_s=0.0, boot=BootDelay(10.0),
                       budget=BudgetConfig(0.5, action))
    result = simulate(_jobs(*[100] * 20), config, PRICES)
    # at $3/h the VM alive for 300 s would reach $0.50 within the 300 s horizon: the limit
    # (drain: the job running then ends at 310 s; cancel: it is killed at once)
    assert result.counts()["solved"] == solved and result.counts()["failed"] == 20 - solved
    assert result.makespan_s == makespan and result.cost_usd <= 0.5


# -- a past run as the workload ---------------------------------------------------------------
def _record(key: str, n: int, outcome: str, runtime: float | None) -> dict:
    return {"v": 1, "key": key, "rule": "solve", "wildcards": {"n": str(n)},
            "hardness": {"spec": "n", "dims": ["n"], "vector": [float(n)], "scope": []},
            "outcome": outcome, "runtime_s": runtime, "deadline_s": 10.0, "worker": "w-1",
            "started": 0.0, "ended": 0.0, "preemptions": 0}


def test_a_past_runs_records_become_the_workload(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    records = [_record("s1", 1, "solved", 3.0), _record("s2", 2, "solved", 5.0),
               _record("s3", 3, "timeout", 10.2), _record("s4", 4, "skipped", None),
               {"v": 1, "key": "g1", "rule": "generate", "wildcards": {}, "hardness": None,
                "outcome": "solved", "runtime_s": 1.0, "deadline_s": None}]
    (run / "jobs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records) + "{torn")
    (run / "vms.jsonl").write_text(
        json.dumps({"name": "w-1", "pool": "spot", "created": 100.0, "ready": 145.0}) + "\n"
        + json.dumps({"name": "w-2", "pool": "spot", "created": 100.0}) + "\n")
    work, boot = load_run(run, scale=60.0)
    by = {job.key: job for job in work.jobs}
    assert by.keys() == {"s1", "s2", "s3", "s4"}, "only the rule with hardness"
    assert by["s1"].runtime_s == 180.0 and by["s1"].deadline_s == 600.0
    assert by["s3"].runtime_s == math.inf and by["s4"].runtime_s == 600.0
    assert by["s2"].point == HardnessPoint((), (2.0,)) and by["s2"].family == by["s4"].family
    assert "1 skipped jobs assumed to time out" in work.note
    assert boot == BootDelay(45.0, samples=(45.0,))
    config = SimConfig(max_workers=1, slots=1, main_pool=Pool.ON_DEMAND, max_on_demand=0,
                       poll=1.0, dispatch_s=0.0, boot=boot)
    result = simulate(work, config, PRICES)
    assert result.outcomes == {"s1": "solved", "s2": "solved", "s3": "timeout",
                               "s4": "skipped"}
    assert result.makespan_s == 45 + 180 + 300 + 600


# -- the local engine's injected preemptions --------------------------------------------------
# -- the command line -------------------------------------------------------------------------
@pytest.mark.parametrize("argv,setting", [
    (["--synthetic", "0"], "--synthetic"),
    (["--synthetic", "10", "--vms", "0"], "--vms"),
    (["--synthetic", "10", "--stockout", "1"], "--stockout"),
    (["--synthetic", "10", "--poll", "0"], "--poll"),
])
def test_bad_simulate_arguments_are_one_line(argv: list[str], setting: str, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    from expo_executor.cli import main

    png = tmp_path / "sim.png"
    assert main(["simulate", *argv, "--png", str(png)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and setting in err[0] and "fix:" in err[0], err
    assert not png.exists()


# -- prefetch (simulate/held_jobs.py) ----------------------------------------------------------
def _grid(size: int = 8) -> Workload:
    """A family's grid: a job's runtime doubles every 3 steps of hardness; past 60 s it times
    out, and its timeout skips or cancels what it dominates (held jobs among them)."""
    return Workload("grid", tuple(
        SimJob(f"j{i}_{j}", f"j{i}_{j}", float(2 ** ((i + j) / 3)), deadline_s=60.0,
               family="f", point=HardnessPoint(("a",), (i, j)))
        for i in range(size) for j in range(size)))


def test_prefetch_starts_held_jobs_as_slots_free_with_the_same_outcomes() -> None:
    """Held jobs start when a slot of their worker frees, not a dispatch later: the sweep ends
    sooner, and the domino effect still cancels (or drops unstarted) what a timeout dominates,
    so every job ends as without prefetch."""
    base = SimConfig(max_workers=3, slots=2, dispatch_s=2.0, poll=2.0)
    plain = simulate(_grid(), base, PRICES)
    for depth in (1, 2):
        held = simulate(_grid(), SimConfig(**{**base.__dict__, "prefetch": depth}), PRICES)
        assert held.outcomes == plain.outcomes, depth
        assert held.makespan_s < plain.makespan_s, (depth, held.makespan_s, plain.makespan_s)
