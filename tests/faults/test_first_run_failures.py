"""The failures a first real GCE run meets, on the strict fake (issue 15), end to end.

Each test reproduces one way the real Compute API differs from a kind fake, and checks that the
run ends with a clear message or recovers, that no VM is left and no job is lost:

- a VM whose startup script fails powers itself off: replacing it forever would bill boots
  without end, so failed startups count as failed boots and stop the pool with the VM's last
  boot-log lines (left in the bucket by the script);
- a new VM is listed some time after its insert: a VM missing from one listing is not lost;
- a bulk insert fails with the summary ``VM_MIN_COUNT_NOT_REACHED`` (the causes are in its
  instances' operations), and Spot creation with ``UNSUPPORTED_OPERATION``: neither may end
  Spot for the run;
- a zone that does not offer a machine type (a 400) or is out of resources (a 503 whose message
  alone says so) sends the VMs to the next zone; every zone refusing stops the pool with the fix;
- a full quota holds a pool only until one of the run's VMs ends and frees some.
"""

from __future__ import annotations

from pathlib import Path

from expo_executor.emulator.compute import FakeCompute
from expo_executor.emulator.failing_startup import REASON

from tests.emulated_gce import fake_compute  # noqa: F401
from tests.gcs_emulator import gcs_emulator  # noqa: F401
from .conftest import size
from .test_compute_faults import _completed, _failed_with_the_reason, _run


def _stop_line(log: str) -> str:
    lines = [line for line in log.splitlines()
             if "no more on_demand VMs this run" in line and "powered off before" in line]
    assert len(lines) == 1, log[-4000:]
    return lines[0]


def test_vms_whose_startup_fails_stop_the_pool_with_their_boot_log(
        tmp_path: Path, fake_compute: FakeCompute, gcs_emulator: str,  # noqa: F811
        fault_figures) -> None:
    """Every VM's startup fails (the host's Python is not the image's): each powers itself off.
    Before: each was "lost" and replaced, for ever. Now three in a row stop the pool, the
    message holds the script's own error, and every job fails with the reason."""
    jobs = size(2, 10)
    fake_compute.fail_next("startup_fails", 1000)
    run = _run(tmp_path, fake_compute, gcs_emulator, jobs, "--keep-going",
               "--expocloud-on-demand-only", "--expocloud-max-on-demand", "3")
    stop = _stop_line(run.log)
    assert REASON in stop and "3 VMs in a row" in stop, stop
    orphans = _failed_with_the_reason(run, fake_compute, jobs, "powered off before")
    failed = [vm for vm in run.vms() if vm["end"] == "never ready"]
    injected = fake_compute.faults_served().get("startup_fails", 0)
    assert 3 <= injected == len(failed) <= 5, (injected, run.vms())
    assert "was lost" not in run.log
    fault_figures("every VM's startup script fails", injected=injected, survived=injected,
                  jobs=jobs, jobs_lost=0, orphan_vms=orphans,
                  detail=f"pool stopped after {injected} failed startups, the boot log in the "
                         f"message; every job failed with the reason after {run.seconds:.0f} s")


def test_a_startup_that_leaves_no_log_says_where_to_look(
        tmp_path: Path, fake_compute: FakeCompute, gcs_emulator: str,  # noqa: F811
        fault_figures) -> None:
    """No boot log reached the bucket (the worker's account cannot write it): the message says
    so, which is itself the clue."""
    jobs = size(1, 5)
    fake_compute.fail_next("startup_fails_silently", 1000)
    run = _run(tmp_path, fake_compute, gcs_emulator, jobs, "--keep-going",
               "--expocloud-on-demand-only", "--expocloud-max-on-demand", "1")
    assert "no startup log reached the bucket" in _stop_line(run.log)
    orphans = _failed_with_the_reason(run, fake_compute, jobs, "powered off before")
    fault_figures("startup fails and leaves no log", injected=3, survived=3, jobs=jobs,
                  orphan_vms=orphans, detail=f"pool stopped; run {run.seconds:.0f} s")


def test_a_failed_startup_among_good_ones_is_replaced_and_the_run_completes(
        tmp_path: Path, fake_compute: FakeCompute, gcs_emulator: str,  # noqa: F811
        fault_figures) -> None:
    jobs = size(3, 20)
    fake_compute.fail_next("startup_fails", 1)
    run = _run(tmp_path, fake_compute, gcs_emulator, jobs, "--expocloud-max-workers", "1",
               "--expocloud-max-on-demand", "1", "--expocloud-slots-per-worker", "2")
    lost, orphans = _completed(run, fake_compute, gcs_emulator, jobs)
    assert "its startup failed" in run.log and REASON in run.log
    assert "no more" not in run.log
    fault_figures("one VM's startup fails", injected=1, survived=1, jobs=jobs, jobs_lost=lost,
                  orphan_vms=orphans, detail=f"replaced; run {run.seconds:.0f} s")


def test_vms_listed_late_are_not_lost(
        tmp_path: Path, fake_compute: FakeCompute, gcs_emulator: str,  # noqa: F811
        fault_figures) -> None:
    """New instances appear in listings 4 s after their insert, while the coordinator lists
    every half second. Before: each new VM was lost at its first listing, deleted and
    replaced, over and over. Now none is lost and the run completes."""
    fake_compute.list_delay = 4.0
    jobs = size(3, 20)
    run = _run(tmp_path, fake_compute, gcs_emulator, jobs)
    lost, orphans = _completed(run, fake_compute, gcs_emulator, jobs)
    assert "was lost" not in run.log, run.log[-4000:]
    assert {vm["end"] for vm in run.vms()} <= {"deleted"}, run.vms()
    fault_figures("VMs listed 4 s after their insert", injected=len(run.vms()),
                  survived=len(run.vms()), jobs=jobs, jobs_lost=lost, orphan_vms=orphans,
                  detail=f"none lost; run {run.seconds:.0f} s")


def _booted_zones(fake: FakeCompute, spot: bool | None = None) -> set[str]:
    return {vm["zone"] for vm in fake.ledger()
            if vm["running"] is not None and spot in (None, vm["spot"])}


def test_a_bulk_insert_summary_is_resolved_from_its_instances_operations(
        tmp_path: Path, fake_compute: FakeCompute, gcs_emulator: str,  # noqa: F811
        fault_figures) -> None:
    """The first Spot bulk insert fails with VM_MIN_COUNT_NOT_REACHED alone; its first
    instance's operation says the zone is out of resources. Before: an unknown code stopped
    Spot for the run. Now the cause is read, the zone is left and Spot runs the work."""
    jobs = size(3, 20)
    fake_compute.fail_next("bulk_partial", 1, zone="us-central1-a")
    run = _run(tmp_path, fake_compute, gcs_emulator, jobs)
    lost, orphans = _completed(run, fake_compute, gcs_emulator, jobs)
    assert fake_compute.faults_served().get("bulk_partial") == 1
    assert "no more spot" not in run.log, run.log[-4000:]
    assert _booted_zones(fake_compute, spot=True) == {"us-central1-b"}, fake_compute.ledger()
    assert "spot" in {r["pool"] for r in run.jobs()}
    fault_figures("bulk insert fails with VM_MIN_COUNT_NOT_REACHED", injected=1, survived=1,
                  jobs=jobs, jobs_lost=lost, orphan_vms=orphans,
                  detail=f"cause read from the instances' operations; next zone; run "
                         f"{run.seconds:.0f} s")


def test_spot_unsupported_in_a_zone_moves_spot_to_the_next(
        tmp_path: Path, fake_compute: FakeCompute, gcs_emulator: str,  # noqa: F811
        fault_figures) -> None:
    jobs = size(3, 20)
    fake_compute.fail_next("spot_unsupported", 100, zone="us-central1-a", spot=True)
    run = _run(tmp_path, fake_compute, gcs_emulator, jobs)
    lost, orphans = _completed(run, fake_compute, gcs_emulator, jobs)
    assert "no more spot" not in run.log, run.log[-4000:]
    assert _booted_zones(fake_compute, spot=True) == {"us-central1-b"}
    # the zone is not asked for Spot again this run
    assert fake_compute.faults_served().get("spot_unsupported") == 1
    fault_figures("Spot UNSUPPORTED_OPERATION in a zone", injected=1, survived=1, jobs=jobs,
                  jobs_lost=lost, orphan_vms=orphans,
                  detail=f"Spot moved to the next zone; run {run.seconds:.0f} s")


def test_a_machine_type_a_zone_does_not_offer_moves_to_the_next_zone(
        tmp_path: Path, fake_compute: FakeCompute, gcs_emulator: str,  # noqa: F811
        fault_figures) -> None:
    jobs = size(3, 20)
    fake_compute.withhold("us-central1-a", "e2-standard-2")
    run = _run(tmp_path, fake_compute, gcs_emulator, jobs, "--expocloud-on-demand-min", "1")
    lost, orphans = _completed(run, fake_compute, gcs_emulator, jobs)
    assert "no more" not in run.log, run.log[-4000:]
    assert _booted_zones(fake_compute) == {"us-central1-b"}
    refused = [r for r in fake_compute.requests
               if r["op"] in ("insert", "bulkInsert") and r["zone"] == "us-central1-a"]
    assert 1 <= len(refused) <= 2  # once per pool: the zone is not asked again this run
    fault_figures("machine type not offered in a zone (HTTP 400)", injected=len(refused),
                  survived=len(refused), jobs=jobs, jobs_lost=lost, orphan_vms=orphans,
                  detail=f"next zone; run {run.seconds:.0f} s")


def test_a_machine_type_no_zone_offers_stops_the_run_with_the_fix(
        tmp_path: Path, fake_compute: FakeCompute, gcs_emulator: str,  # noqa: F811
        fault_figures) -> None:
    """What the engine does when a type is gone from every zone after the checks before the
    run (which refuse such a run before any VM: tests/e2e/test_doctor_fakes.py), so they are
    skipped here."""
    jobs = size(2, 10)
    for zone in ("us-central1-a", "us-central1-b"):
        fake_compute.withhold(zone, "e2-standard-2")
    run = _run(tmp_path, fake_compute, gcs_emulator, jobs, "--keep-going",
               "--expocloud-gce-skip-doctor")
    stops = [line for line in run.log.splitlines() if "no zone offers" in line]
    assert stops and "--expocloud-gce-zones" in stops[0] and "does not exist in zone" \
        in stops[0], run.log[-4000:]
    orphans = _failed_with_the_reason(run, fake_compute, jobs, "no zone offers")
    assert not fake_compute.ledger()
    fault_figures("machine type offered in no zone", injected=2, survived=2, jobs=jobs,
                  orphan_vms=orphans, detail=f"both pools stopped with the fix; "
                                             f"{run.seconds:.0f} s")


def test_a_stockout_said_only_in_a_503_message_moves_to_the_next_zone(
        tmp_path: Path, fake_compute: FakeCompute, gcs_emulator: str,  # noqa: F811
        fault_figures) -> None:
    """Before: a 503 is retried in the same zone (backoff), then "trying again later" in the
    same zone, until the capacity timeout. Now the message is read as the stockout it is."""
    jobs = size(3, 20)
    for op in ("insert", "bulkInsert"):
        fake_compute.fail_next("stockout_http", 1000, zone="us-central1-a", op=op)
    run = _run(tmp_path, fake_compute, gcs_emulator, jobs)
    lost, orphans = _completed(run, fake_compute, gcs_emulator, jobs)
    assert _booted_zones(fake_compute) == {"us-central1-b"}
    served = fake_compute.faults_served().get("stockout_http", 0)
    assert 1 <= served <= 2, served  # once per pool: no retry in the zone
    fault_figures("stockout said only in a 503's message", injected=served, survived=served,
                  jobs=jobs, jobs_lost=lost, orphan_vms=orphans,
                  detail=f"next zone at once; run {run.seconds:.0f} s")
