"""The money side, on figures easy to check by hand: the budget's phases, the cost report, and
machine selection (the SciSpot cost model over constructed price and preemption tables)."""

from __future__ import annotations

import pytest

from expo_executor.core.budget import (MIN_BILLED_S, BudgetConfig, Phase, affordable, phase,
                                  projected, vm_cost)
from expo_executor.cost import machines
from expo_executor.cost.cost_report import summarize
from expo_executor.core.errors import ExpoError
from expo_executor.cost.machine_choice import (Candidate, Workload, choose, evaluate, jobs_per_vm,
                                          measured_runtimes, workload_of)

# -- the budget ------------------------------------------------------------------------------
HOURLY = 36.0  # USD per VM-hour: a cent per VM-second, so that every figure below is obvious


def test_vm_cost_bills_at_least_a_minute() -> None:
    assert vm_cost(HOURLY, 10) == pytest.approx(0.01 * MIN_BILLED_S)  # 60 s: $0.60
    assert vm_cost(HOURLY, 90) == pytest.approx(0.90)


def test_projection_counts_the_minute_already_paid() -> None:
    # a VM 20 s old, 30 s ahead: still inside its first minute, $0.60; one 100 s old: $1.30
    assert projected(0.0, [(HOURLY, 20)], 30) == pytest.approx(0.60)
    assert projected(0.5, [(HOURLY, 20), (HOURLY, 100)], 30) == pytest.approx(0.5 + 0.6 + 1.3)


def test_phases_advance_as_the_money_runs_out() -> None:
    config = BudgetConfig(limit_usd=3.0, horizon_s=50, margin_s=10)
    # nothing alive: a new VM for the horizon costs $0.60 (its minimum): 4 fit strictly
    # under $3.00 (5 would make exactly $3.00)
    assert affordable(0.0, [], HOURLY, config) == 4
    assert phase(0.0, [], HOURLY, config) is Phase.OK
    # one VM 100 s old: $1.50 by the horizon; room $1.50 = 2.5 more VMs -> 2
    assert affordable(0.0, [(HOURLY, 100)], HOURLY, config) == 2
    # 200 s old: $2.50 by the horizon; room $0.50 < $0.60: no growth
    assert phase(0.0, [(HOURLY, 200)], HOURLY, config) is Phase.NO_GROWTH
    # 260 s old: $3.10 by the horizon: the limit; $2.70 within the margin: not yet a stop
    assert phase(0.0, [(HOURLY, 260)], HOURLY, config) is Phase.LIMIT
    # 290 s old: $3.00 within the margin: stop now
    assert phase(0.0, [(HOURLY, 290)], HOURLY, config) is Phase.STOP
    # money of VMs that are gone counts the same
    assert phase(2.95, [], HOURLY, config) is Phase.NO_GROWTH


# -- the cost report -------------------------------------------------------------------------
def test_cost_report_groups_prices_and_compares_with_on_demand() -> None:
    vms = [
        {"pool": "spot", "machine_type": "n2-standard-4", "created": 0, "ended": 3600,
         "end": "deleted", "hourly": 0.05, "on_demand_hourly": 0.20},
        {"pool": "spot", "machine_type": "n2-standard-4", "created": 0, "ended": 1800,
         "end": "preempted", "hourly": 0.05, "on_demand_hourly": 0.20},
        {"pool": "on_demand", "machine_type": "n2-standard-4", "created": 1800, "ended": None,
         "end": "alive", "hourly": 0.20, "on_demand_hourly": 0.20},
        {"pool": "spot", "machine_type": "n2-standard-4", "created": 5, "ended": 6,
         "end": "not created", "hourly": 0.05, "on_demand_hourly": 0.20},
    ]
    jobs = [{"outcome": "solved"}] * 3 + [{"outcome": "timeout"}]
    report = summarize(vms, jobs, "prices: test", now=5400)
    spot, on_demand = sorted(report.rows, key=lambda r: r.pool, reverse=True)
    assert (spot.vms, spot.preempted, spot.vm_hours) == (2, 1, pytest.approx(1.5))
    assert spot.cost_usd == pytest.approx(0.075)  # 1.5 h x $0.05
    assert on_demand.vm_hours == pytest.approx(1.0)  # alive from 1800 s to now (5400 s)
    assert report.cost_usd == pytest.approx(0.275)
    assert report.on_demand_usd == pytest.approx(0.5)  # 2.5 VM-hours at $0.20
    assert report.per_solved_usd == pytest.approx(0.275 / 3)
    assert report.saving == pytest.approx(0.45)
    assert "prices: test" in report.lines()[0]
    assert "| **total** | | 3 | 1 | 2.500 |" in report.to_markdown()


# -- machine selection -----------------------------------------------------------------------
def _candidate(name: str, vcpus: int, per_vcpu: float, lifetime_h: float | None,
               gb_per_vcpu: float = 4.0) -> Candidate:
    return Candidate(name, vcpus, int(vcpus * gb_per_vcpu * 1024), vcpus * per_vcpu, lifetime_h)


JOB = Workload(cpus=1, mem_mb=0, runtime_s=3600, runtime_source="test")


def test_the_largest_vm_is_not_always_the_cheapest_under_preemption() -> None:
    # Per-vCPU prices fall with size, lifetimes too (SciSpot Fig. 2). One-hour jobs, one per
    # vCPU, no boot: cost per job = per-vCPU price x (1 + p/2), p = 1 h / E[L]:
    #   x-2:  $0.012 x (1 + 0.05/2) = $0.01230
    #   x-8:  $0.010 x (1 + 0.10/2) = $0.01050   <- cheapest
    #   x-32: $0.009 x (1 + 0.50/2) = $0.01125
    table = [_candidate("x-2", 2, 0.012, 20.0), _candidate("x-8", 8, 0.010, 10.0),
             _candidate("x-32", 32, 0.009, 2.0)]
    costs = {c.machine_type: evaluate(JOB, c, boot_s=0).cost_per_job for c in table}
    assert costs == pytest.approx({"x-2": 0.0123, "x-8": 0.0105, "x-32": 0.01125})
    pick = choose(JOB, table, "--expocloud-machine-type", boot_s=0)
    assert (pick.machine_type, pick.jobs_per_vm, pick.p_preempted) == ("x-8", 8, pytest.approx(0.1))
    # On-demand nothing is recomputed: the lowest per-vCPU price, the largest VM, wins.
    on_demand = [_candidate(c.machine_type, c.vcpus, c.hourly / c.vcpus, None) for c in table]
    assert choose(JOB, on_demand, "--expocloud-machine-type", boot_s=0).machine_type == "x-32"


def test_boots_forced_by_preemptions_are_paid_too() -> None:
    # x-2 vs x-4 at the same per-vCPU price; x-4 lives 8 h, x-2 4 h. Ten-minute jobs with a
    # 30-minute boot: per job = per-vCPU price x (t + p t/2 + p boot):
    #   x-2: p = 1/24: 1/6 + 1/288 + 1/48 = 0.19097 h -> x $0.01 = $0.0019097
    #   x-4: p = 1/48: 1/6 + 1/576 + 1/96 = 0.17882 h -> x $0.01 = $0.0017882  <- cheaper
    job = Workload(1, 0, 600, "test")
    table = [_candidate("x-2", 2, 0.01, 4.0), _candidate("x-4", 4, 0.01, 8.0)]
    costs = {c.machine_type: evaluate(job, c, boot_s=1800).cost_per_job for c in table}
    assert costs == pytest.approx({"x-2": 0.0019097, "x-4": 0.0017882}, rel=1e-4)
    assert choose(job, table, "s", boot_s=1800).machine_type == "x-4"


def test_memory_decides_how_many_jobs_a_vm_holds() -> None:
    # 6 GB jobs: a highcpu-8 (8 GB) holds one, a standard-8 (32 GB) five, a highmem-8 all 8.
    job = Workload(cpus=1, mem_mb=6 * 1024, runtime_s=3600, runtime_source="test")
    highcpu = _candidate("x-highcpu-8", 8, 0.008, None, gb_per_vcpu=1)
    standard = _candidate("x-standard-8", 8, 0.010, None, gb_per_vcpu=4)
    highmem = _candidate("x-highmem-8", 8, 0.013, None, gb_per_vcpu=8)
    assert [jobs_per_vm(job, c.vcpus, c.memory_mb) for c in (highcpu, standard, highmem)] \
        == [1, 5, 8]
    # per job: $0.064 / 1, $0.080 / 5 = $0.016, $0.104 / 8 = $0.013 -> highmem
    assert choose(job, [highcpu, standard, highmem], "s", boot_s=0).machine_type == "x-highmem-8"


def test_a_job_no_type_holds_is_a_one_line_error() -> None:
    job = Workload(cpus=64, mem_mb=0, runtime_s=60, runtime_source="test")
    with pytest.raises(ExpoError, match="--expocloud-machine-type.*64 threads"):
        choose(job, [_candidate("x-8", 8, 0.01, None)], "--expocloud-machine-type")


def test_workload_takes_the_largest_job_and_the_best_known_runtime() -> None:
    shapes = [(1, 0, None), (2, 3000, 600.0), (1, 500, 1200.0)]
    assert workload_of(shapes, []) == Workload(2, 3000, 900.0, "median runtime resource")
    measured = measured_runtimes([{"outcome": "solved", "runtime_s": 10, "rule": "a"},
                                  {"outcome": "solved", "runtime_s": 30, "rule": "a"},
                                  {"outcome": "timeout", "runtime_s": 99, "rule": "a"},
                                  {"outcome": "solved", "runtime_s": 50, "rule": "b"}], {"a"})
    assert measured == [10.0, 30.0]
    assert workload_of(shapes, measured).runtime_s == 20.0
    assert workload_of([], []).runtime_source.startswith("no runtime known")


def test_a_vm_is_shared_by_no_more_jobs_than_there_are() -> None:
    assert jobs_per_vm(Workload(3, 0, 600.0, "default"), 16, 65536) == 5
    assert jobs_per_vm(Workload(3, 0, 600.0, "default", jobs=2), 16, 65536) == 2
    assert jobs_per_vm(Workload(3, 0, 600.0, "default", jobs=2), 2, 65536) == 0  # holds none


# -- auto, with the shipped price snapshot and the default preemption priors ------------------
def test_auto_machine_types_come_from_the_snapshot(tmp_path) -> None:
    from expo_executor.coordinator.launch import resolve_machine_types
    from expo_executor.cost.machines import shape
    from expo_executor.coordinator.settings import ExecutorSettings
    from expo_executor.coordinator.state import StateDir

    lines: list[str] = []
    settings = ExecutorSettings(engine="gce", gce_project="p", gce_zones="us-central1-a",
                                max_workers=4, machine_type="auto")
    # four-thread jobs of 3 GB, half an hour each
    chosen = resolve_machine_types(settings, [(4, 3072, 1800.0)], StateDir(tmp_path), None,
                                   lines.append)
    spot, on_demand = chosen.gce_machine_type, chosen.gce_on_demand_machine_type
    assert "auto" not in (spot, on_demand)
    assert shape(spot).vcpus == shape(on_demand).vcpus == chosen.slots_per_worker >= 4
    assert len(lines) == 1 and "Spot " + spot in lines[0] and "on-demand " + on_demand in lines[0]
    assert "prices: snapshot" in lines[0] and "default prior" in lines[0]
    # a named type is left alone, and the other pool follows its vCPU count
    fixed = resolve_machine_types(
        ExecutorSettings(engine="gce", gce_project="p", gce_zones="us-central1-a",
                         max_workers=4, gce_machine_type="n2-standard-8",
                         gce_on_demand_machine_type="auto"),
        [(1, 0, None)], StateDir(tmp_path), None, lines.append)
    assert fixed.gce_machine_type == "n2-standard-8"
    assert shape(fixed.gce_on_demand_machine_type).vcpus == 8 == fixed.slots_per_worker


# -- GPUs: which machine takes which ---------------------------------------------------------------
@pytest.mark.parametrize("machine_type, gpu_type, count, problem", [
    ("n1-standard-4", "nvidia-tesla-t4", 1, None),
    ("n1-standard-8", "nvidia-tesla-v100", 2, None),
    ("g2-standard-4", "nvidia-l4", 1, None),
    ("a2-highgpu-2g", "nvidia-tesla-a100", 2, None),
    ("e2-standard-4", "nvidia-tesla-t4", 1, "e2-standard-4 takes no GPUs"),
    ("n1-standard-4", "nvidia-tesla-t4", 3, "counts of 1, 2, 4, not 3"),
    ("n1-standard-32", "nvidia-tesla-v100", 1, "at most 12 vCPUs"),
    ("n1-standard-4", "nvidia-l4", 1, "comes with g2"),
    ("g2-standard-4", "nvidia-l4", 2, "comes with 1 x nvidia-l4"),
    ("a2-highgpu-1g", "nvidia-tesla-t4", 1, "comes with 1 x nvidia-tesla-a100"),
    ("n1-standard-4", "nvidia-h999", 1, "unknown GPU type 'nvidia-h999'"),
])
def test_which_machine_takes_which_gpus(machine_type: str, gpu_type: str, count: int,
                                        problem: str | None) -> None:
    found = machines.gpu_problem(machine_type, gpu_type, count)
    assert (found is None) if problem is None else (problem in (found or "")), found


def test_a_gpu_rule_without_a_machine_type_gets_the_smallest_that_holds_it() -> None:
    assert machines.gpu_machine("nvidia-tesla-t4", 1, 1, 0) == "n1-standard-1"
    assert machines.gpu_machine("nvidia-tesla-t4", 1, 3, 0) == "n1-standard-4"
    assert machines.gpu_machine("nvidia-l4", 1, 8, 0) == "g2-standard-8"
    assert machines.gpu_machine("nvidia-l4", 2, 1, 0) == "g2-standard-24"
    assert machines.gpu_machine("nvidia-tesla-a100", 4, 1, 0) == "a2-highgpu-4g"
    assert machines.gpu_machine("nvidia-tesla-v100", 1, 16, 0) is None  # 1 V100: 12 vCPUs
    assert machines.shape("a2-highgpu-1g") == machines.Shape(12, 85 * 1024)
