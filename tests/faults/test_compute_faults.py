"""Compute Engine faults end to end: snakemake --executor expocloud with the real
google-cloud-compute client against the fake Compute Engine, files through the GCS emulator.

Stockouts (brief or without end), quota errors, rate limits, 503s, lost answers, VMs that never
boot and VMs whose worker never reports are injected by the fake; each run must either complete
with every output right or end with a clear one-line reason in bounded time, and never leave a
VM behind.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from expo_executor.cost import prices
from expo_executor.emulator.compute import FakeCompute
from expo_executor.runs.files import RunFiles

from tests.emulated_gce import PROJECT, emulated_args, emulated_env, fake_compute  # noqa: F401
from tests.gcs_emulator import gcs_emulator  # noqa: F401
from tests.helpers import SNAKEMAKE, job_records, run_dirs, wait_until
from .conftest import FULL, size

SWEEP = """
rule all:
    input: expand("out/{{i}}.txt", i=range({n}))

rule job:
    output: "out/{{i}}.txt"
    shell: "sleep {nap}; echo {{wildcards.i}} > {{output}}"
"""
# Fast rounds: every fault here is about the coordinator's reactions, not the bill.
FAST = ("--expocloud-poll-interval", "0.5", "--expocloud-slow-poll-interval", "1",
        "--expocloud-status-interval", "5")
RUN_TIMEOUT = 420  # seconds: generous for a loaded 2-core machine; a hang fails long before


@dataclass
class Run:
    result: subprocess.CompletedProcess
    workdir: Path
    run_dir: Path
    prefix: str
    seconds: float

    @property
    def log(self) -> str:
        return self.result.stdout + self.result.stderr

    def vms(self) -> list[dict]:
        path = self.run_dir / "vms.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() \
            else []

    def jobs(self) -> list[dict]:
        return [r for r in job_records(self.run_dir).values() if r["rule"] == "job"]


def _run(tmp_path: Path, fake: FakeCompute, gcs: str, jobs: int, *extra: str,
         nap: float = 0, during: Callable[[], None] | None = None,
         snakefile: str | None = None) -> Run:
    """One sweep of ``jobs`` jobs; ``during`` runs (in this thread) while snakemake does."""
    workdir = tmp_path / "wf"
    workdir.mkdir()
    (workdir / "Snakefile").write_text(snakefile or SWEEP.format(n=jobs, nap=nap))
    args = emulated_args(fake, gcs, None, *FAST, *extra)
    prefix = args[args.index("--default-storage-prefix") + 1]
    started = time.monotonic()
    proc = subprocess.Popen([SNAKEMAKE, *args], cwd=workdir, env=emulated_env(gcs),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        if during is not None:
            during()
        out, err = proc.communicate(timeout=RUN_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    result = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    return Run(result, workdir, run_dirs(workdir)[-1], prefix, time.monotonic() - started)


def _outputs(endpoint: str, prefix: str, jobs: int) -> int:
    """How many of the sweep's outputs are in the bucket with the right content."""
    bucket_name, _, path = prefix.removeprefix("gs://").partition("/")
    client = storage.Client(project=PROJECT, credentials=AnonymousCredentials(),
                            client_options={"api_endpoint": endpoint})
    bucket = client.bucket(bucket_name)
    right = 0
    for i in range(jobs):
        blob = bucket.blob(f"{path}/out/{i}.txt")
        if blob.exists() and blob.download_as_text().strip() == str(i):
            right += 1
    return right


def _orphans(fake: FakeCompute) -> int:
    """VMs left once the run is over (the coordinator's deletions may still be landing)."""
    wait_until(lambda: not fake.instances(), timeout=60)
    return len(fake.instances())


def _distinct_inserts(fake: FakeCompute) -> tuple[int, int]:
    """(instances the fake created, distinct names among them): equal when no insert was
    applied twice."""
    names = [vm["name"] for vm in fake.ledger()]
    return len(names), len(set(names))


def _completed(run: Run, fake: FakeCompute, gcs: str, jobs: int) -> tuple[int, int]:
    """Assert a clean, complete run; return (jobs lost, orphan VMs)."""
    assert run.result.returncode == 0, run.log[-4000:]
    right = _outputs(gcs, run.prefix, jobs)
    orphans = _orphans(fake)
    assert right == jobs, f"{jobs - right} outputs missing or wrong"
    assert orphans == 0, fake.instances()
    assert {r["outcome"] for r in run.jobs()} == {"solved"}
    return jobs - right, orphans


def _failed_with_the_reason(run: Run, fake: FakeCompute, jobs: int, *words: str) -> int:
    """Assert a run that could get no VM ended in bounded time with every job failed, its
    reason holding ``words``; return the orphan VMs (asserted 0)."""
    assert run.result.returncode != 0
    assert run.seconds < 180, f"took {run.seconds:.0f} s to give up"
    records = run.jobs()
    assert len(records) == jobs and {r["outcome"] for r in records} == {"failed"}
    assert all("no VM is left" in r["reason"] and all(w in r["reason"] for w in words)
               for r in records), records
    orphans = _orphans(fake)
    assert orphans == 0, fake.instances()
    return orphans


def test_stockouts_in_the_first_zone_move_the_vms_to_the_next(
        tmp_path: Path, fake_compute: FakeCompute, gcs_emulator: str,  # noqa: F811
        fault_figures) -> None:
    jobs = size(2, 40)
    # the first one makes the engine avoid the zone for a while: the others may never be served
    fake_compute.fail_next("stockout_details", 1, zone="us-central1-a")
    fake_compute.fail_next("stockout", size(2, 6), zone="us-central1-a")
    run = _run(tmp_path, fake_compute, gcs_emulator, jobs)
    lost, orphans = _completed(run, fake_compute, gcs_emulator, jobs)
    served = fake_compute.faults_served()
    injected = served.get("stockout", 0) + served.get("stockout_details", 0)
    assert injected >= 1
    booted = [vm for vm in fake_compute.ledger() if vm["running"] is not None]
    assert booted and {vm["zone"] for vm in booted} == {"us-central1-b"}, fake_compute.ledger()
    fault_figures("stockout in the first zone", injected=injected, survived=injected, jobs=jobs,
                  jobs_lost=lost, orphan_vms=orphans,
                  detail=f"{len(booted)} VMs booted, all in the second zone; "
                         f"run {run.seconds:.0f} s")


def test_a_spot_stockout_in_the_first_region_moves_the_work_to_the_second(
        tmp_path: Path, fake_compute: FakeCompute, gcs_emulator: str,  # noqa: F811
        fault_figures) -> None:
    """Zones of two regions (us-central1, the cheaper for Spot, first) and no Spot capacity
    in us-central1: the Spot VMs are made in europe-west1, each VM record and the cost report
    price them at europe-west1's Spot price, and no VM is left."""
    jobs = size(3, 40)
    for zone in ("us-central1-a", "us-central1-b"):
        fake_compute.fail_next("stockout", 1000, zone=zone, spot=True)
    run = _run(tmp_path, fake_compute, gcs_emulator, jobs, "--expocloud-gce-zones",
               "us-central1-a,us-central1-b", "--expocloud-gce-regions", "europe-west1")
    lost, orphans = _completed(run, fake_compute, gcs_emulator, jobs)
    injected = fake_compute.faults_served().get("stockout", 0)
    assert injected >= 1
    spot = [vm for vm in fake_compute.ledger() if vm["spot"] and vm["running"] is not None]
    assert spot and {vm["zone"].rsplit("-", 1)[0] for vm in spot} == {"europe-west1"}, \
        fake_compute.ledger()
    assert {r["pool"] for r in run.jobs()} == {"spot"}
    europe = prices.load("europe-west1")
    records = [r for r in run.vms() if r["pool"] == "spot" and r["end"] != "not_created"]
    assert records and all(r["region"] == "europe-west1" and r["hourly"] == pytest.approx(
        europe.hourly(r["machine_type"], spot=True)) for r in records), records
    cost = json.loads((run.run_dir / "cost.json").read_text())
    rows = [r for r in cost["rows"] if r["pool"] == "spot"]
    assert [r["region"] for r in rows] == ["europe-west1"], cost
    assert re.search(r"expocloud: cost: .*europe-west1\)", run.log), run.log[-3000:]
    assert re.search(r"expocloud: +spot \S+ in europe-west1: \d+ VM", run.log), run.log[-3000:]
    fault_figures("Spot stockout in the first of two regions", injected=injected,
                  survived=injected, jobs=jobs, jobs_lost=lost, orphan_vms=orphans,
                  detail=f"{len(spot)} Spot VMs booted, all in europe-west1, priced there; "
                         f"run {run.seconds:.0f} s")


STAGED = """
rule all:
    input: expand("out/{i}.txt", i=range(N))

rule make:
    output: "data/{i}.bin"
    shell: "head -c 200000 /dev/zero > {output}"

rule job:
    input: "data/{i}.bin"
    output: "out/{i}.txt"
    shell: "test $(wc -c < {input}) -eq 200000 && echo {wildcards.i} > {output}"
"""


def test_staged_files_moved_to_a_region_away_from_the_bucket_are_priced(
        tmp_path: Path, fake_compute: FakeCompute, gcs_emulator: str,  # noqa: F811
        fault_figures) -> None:
    """The bucket is in US (the emulator's multi-region) and Spot has no capacity in
    us-central1: the work runs in europe-west1, whose VMs pay $0.08/GB for every byte a job
    reads from the bucket (its input) or writes to it (its output). Each job's record holds
    the bytes its worker measured, and cost.json prices them at its VM's rate."""
    jobs = size(2, 20)
    for zone in ("us-central1-a", "us-central1-b"):
        fake_compute.fail_next("stockout", 1000, zone=zone, spot=True)
    run = _run(tmp_path, fake_compute, gcs_emulator, jobs, "--expocloud-gce-zones",
               "us-central1-a,us-central1-b", "--expocloud-gce-regions", "europe-west1",
               snakefile=STAGED.replace("range(N)", f"range({jobs})"))
    lost, orphans = _completed(run, fake_compute, gcs_emulator, jobs)
    rate = {r["name"]: r.get("egress_usd_per_gb") for r in run.vms()}
    records = RunFiles(run.run_dir).jobs()  # every attempt's record: every byte moved
    made = [r for r in records if r["rule"] == "make" and r["outcome"] == "solved"]
    used = [r for r in records if r["rule"] == "job" and r["outcome"] == "solved"]
    assert len(made) == len(used) == jobs, records
    assert all(r["staged_up_bytes"] >= 200_000 for r in made), made  # its output, stored
    assert all(r["staged_down_bytes"] >= 200_000 for r in used), used  # its input, read
    assert {rate[r["worker"]] for r in records} == {0.08}, rate  # US to europe-west1
    priced = sum((r["staged_down_bytes"] + r["staged_up_bytes"]) / 1e9 * 0.08 for r in records)
    cost = json.loads((run.run_dir / "cost.json").read_text())
    assert cost["staged_egress_usd"] == pytest.approx(priced) and priced > 0, cost
    assert cost["egress_usd"] >= cost["staged_egress_usd"]
    assert re.search(r"egress between the bucket and VMs in other regions \(\$\d+\.\d+ jobs' "
                     r"staged files", run.log), run.log[-3000:]
    injected = fake_compute.faults_served().get("stockout", 0)
    fault_figures("staged files across regions", injected=injected, survived=injected, jobs=jobs,
                  jobs_lost=lost, orphan_vms=orphans,
                  detail=f"${priced:.6f} of staged-file egress priced; run {run.seconds:.0f} s")


@pytest.mark.parametrize("pool", ["spot", pytest.param("on_demand", marks=pytest.mark.skipif(
    not FULL, reason="full size only: quick covers on-demand quota in the next test"))])
def test_a_quota_error_stops_growth_and_the_run_completes_on_what_it_has(
        tmp_path: Path, fake_compute: FakeCompute, gcs_emulator: str,  # noqa: F811
        fault_figures, pool: str) -> None:
    """Spot: its bulk insert is refused, and the on-demand pool takes over the work.
    On-demand: the reliable core's insert is refused, and the Spot VMs do all the work."""
    jobs = size(3, 40)  # 3: Spot's 2 VMs come in one bulk insert, the core's in an insert
    if pool == "spot":
        fake_compute.fail_next("quota", 1, op="bulkInsert", quota_metric="PREEMPTIBLE_CPUS")
        extra: tuple[str, ...] = ()
    else:
        fake_compute.fail_next("quota", 1, op="insert")
        extra = ("--expocloud-on-demand-min", "1")
    run = _run(tmp_path, fake_compute, gcs_emulator, jobs, *extra)
    lost, orphans = _completed(run, fake_compute, gcs_emulator, jobs)
    injected = fake_compute.faults_served().get("quota", 0)
    assert injected == 1
    stopped = [line for line in run.log.splitlines()
               if f"no more {pool} VMs this run: GCE quota" in line]
    assert len(stopped) == 1, run.log[-4000:]
    assert "fix: request a quota increase" in stopped[0] or "request a quota increase" \
        in stopped[0]
    other = "on_demand" if pool == "spot" else "spot"
    assert {r["pool"] for r in run.jobs()} == {other}
    fault_figures(f"quota error on the {pool} pool", injected=injected, survived=injected,
                  jobs=jobs, jobs_lost=lost, orphan_vms=orphans,
                  detail=f"growth of {pool} stopped; every job ran on {other}; "
                         f"run {run.seconds:.0f} s")


def test_endless_spot_stockouts_stop_the_pool_and_on_demand_finishes_the_work(
        tmp_path: Path, fake_compute: FakeCompute, gcs_emulator: str,  # noqa: F811
        fault_figures) -> None:
    """No Spot capacity in any zone, ever: after the capacity timeout the Spot pool stops
    (one line, with the fix) and the on-demand pool does the work, instead of a run that waits
    for capacity that does not come."""
    jobs = size(3, 30)
    fake_compute.fail_next("stockout", 1000, spot=True)
    run = _run(tmp_path, fake_compute, gcs_emulator, jobs, "--expocloud-capacity-timeout", "5s")
    lost, orphans = _completed(run, fake_compute, gcs_emulator, jobs)
    stopped = [line for line in run.log.splitlines()
               if "no more spot VMs this run: no capacity for" in line]
    assert len(stopped) == 1, run.log[-4000:]
    assert "--expocloud-capacity-timeout" in stopped[0] and "fix:" in stopped[0], stopped[0]
    assert {r["pool"] for r in run.jobs()} == {"on_demand"}
    injected = fake_compute.faults_served().get("stockout", 0)
    assert injected >= 2  # every zone, at least once
    fault_figures("stockouts of Spot in every zone, without end", injected=injected,
                  survived=injected, jobs=jobs, jobs_lost=lost, orphan_vms=orphans,
                  detail=f"Spot stopped after the 5 s capacity timeout; every job ran on "
                         f"on-demand; run {run.seconds:.0f} s")


def test_endless_stockouts_everywhere_fail_the_run_with_the_reason(
        tmp_path: Path, fake_compute: FakeCompute, gcs_emulator: str,  # noqa: F811
        fault_figures) -> None:
    jobs = size(2, 20)
    fake_compute.fail_next("stockout", 1000)
    run = _run(tmp_path, fake_compute, gcs_emulator, jobs, "--keep-going",
               "--expocloud-capacity-timeout", "5s")
    orphans = _failed_with_the_reason(run, fake_compute, jobs, "--expocloud-capacity-timeout")
    assert all(vm["running"] is None for vm in fake_compute.ledger())  # nothing billed
    injected = fake_compute.faults_served().get("stockout", 0)
    fault_figures("stockouts in every zone for every pool, without end", injected=injected,
                  survived=injected, jobs=jobs, jobs_lost=0, orphan_vms=orphans,
                  detail=f"both pools stopped after the 5 s capacity timeout; every job failed "
                         f"with the reason after {run.seconds:.0f} s")


CORE = """
rule all:
    input: expand("out/{{i}}.txt", i=range({n})), "core.txt"

rule job:
    output: "out/{{i}}.txt"
    shell: "echo {{wildcards.i}} > {{output}}"

rule core:
    output: "core.txt"
    resources: expocloud_preemptible=0
    shell: "echo core > {{output}}"
"""


def test_on_demand_quota_waits_for_a_vm_to_end_and_then_the_work_runs(
        tmp_path: Path, fake_compute: FakeCompute, gcs_emulator: str,  # noqa: F811
        fault_figures) -> None:
    """On-demand refused by quota while Spot VMs run: the pool waits instead of stopping for
    good (before: the job that must not be preempted failed), and once a Spot VM ends and frees
    some quota the on-demand VM comes and runs it."""
    jobs = size(2, 30)
    fake_compute.fail_next("quota", 1, op="insert")  # Spot's 2 come in bulk: on-demand's insert
    run = _run(tmp_path, fake_compute, gcs_emulator, jobs, snakefile=CORE.format(n=jobs))
    lost, orphans = _completed(run, fake_compute, gcs_emulator, jobs)
    assert fake_compute.faults_served().get("quota", 0) == 1
    waits = [line for line in run.log.splitlines()
             if "GCE quota" in line and "wait until one of the run's" in line]
    assert len(waits) == 1 and "no more on_demand" not in run.log, run.log[-4000:]
    core = job_records(run.run_dir)["core"]
    assert core["outcome"] == "solved" and core["pool"] == "on_demand", core
    fault_figures("quota on the on-demand pool, Spot alive", injected=1, survived=1,
                  jobs=jobs + 1, jobs_lost=lost, orphan_vms=orphans,
                  detail=f"on-demand waited for a Spot VM to end, then ran the non-preemptible "
                         f"job; run {run.seconds:.0f} s")


def test_quota_with_no_vm_at_all_fails_the_run_clearly_and_in_bounded_time(
        tmp_path: Path, fake_compute: FakeCompute, gcs_emulator: str,  # noqa: F811
        fault_figures) -> None:
    jobs = size(2, 20)
    fake_compute.fail_next("quota", 10)
    run = _run(tmp_path, fake_compute, gcs_emulator, jobs, "--keep-going")
    failing = [line for line in run.log.splitlines()
               if "no VM is left and no more can be created" in line and "quota" in line]
    assert failing, run.log[-4000:]
    orphans = _failed_with_the_reason(run, fake_compute, jobs, "quota")
    injected = fake_compute.faults_served().get("quota", 0)
    assert injected == 2  # Spot's, then on-demand's (which took over the work)
    fault_figures("quota on every pool, no VM", injected=injected, survived=injected, jobs=jobs,
                  jobs_lost=0, orphan_vms=orphans,
                  detail=f"every job failed with the reason after {run.seconds:.0f} s")


def test_rate_limits_503s_and_lost_answers_are_retried_without_duplicates(
        tmp_path: Path, fake_compute: FakeCompute, gcs_emulator: str,  # noqa: F811
        fault_figures) -> None:
    jobs = size(2, 40)
    fault = fake_compute.fail_next
    fault("rate_limit", size(2, 4), op="bulkInsert")
    fault("rate_limit", size(1, 3), op="insert", http_status=429)
    fault("lost_response", 1, op="bulkInsert")
    fault("lost_response", size(1, 2), op="insert")
    fault("unavailable", size(2, 4), op="aggregatedList")
    fault("rate_limit", size(1, 3), op="aggregatedList", http_status=429)
    fault("rate_limit", size(1, 2), op="delete")
    fault("lost_response", size(1, 2), op="delete")
    fault("unavailable", 1, op="delete")
    # the on-demand core makes single inserts happen too (Spot's come in bulk)
    run = _run(tmp_path, fake_compute, gcs_emulator, jobs, "--expocloud-on-demand-min", "1")
    lost, orphans = _completed(run, fake_compute, gcs_emulator, jobs)
    served = fake_compute.faults_served()
    injected = sum(served.get(k, 0) for k in ("rate_limit", "unavailable", "lost_response"))
    assert served.get("lost_response", 0) >= 2 and served.get("rate_limit", 0) >= 2, served
    created, distinct = _distinct_inserts(fake_compute)
    assert created == distinct, fake_compute.ledger()
    ours = {vm["name"] for vm in run.vms()}
    assert {vm["name"] for vm in fake_compute.ledger()} == ours
    fault_figures("rate limits, 503s, lost answers", injected=injected, survived=injected,
                  jobs=jobs, jobs_lost=lost, orphan_vms=orphans,
                  detail=f"{created} VMs created, none twice ({served}); "
                         f"run {run.seconds:.0f} s")


def test_vms_that_never_come_up_are_replaced_after_the_boot_timeout(
        tmp_path: Path, fake_compute: FakeCompute, gcs_emulator: str,  # noqa: F811
        fault_figures) -> None:
    """One Spot VM at a time: the first never boots, the second boots with no worker, so the
    work can only be done by the third (two failures in a row: the pool is not stopped)."""
    jobs = size(2, 30)
    fake_compute.fail_next("never_boot", 1)
    fake_compute.fail_next("silent_worker", 1)
    run = _run(tmp_path, fake_compute, gcs_emulator, jobs, "--expocloud-boot-timeout", "10s",
               "--expocloud-max-workers", "1", "--expocloud-max-on-demand", "1",
               "--expocloud-slots-per-worker", "2")
    lost, orphans = _completed(run, fake_compute, gcs_emulator, jobs)
    served = fake_compute.faults_served()
    assert served.get("never_boot") == served.get("silent_worker") == 1, served
    ledger = fake_compute.ledger()
    never = {vm["name"] for vm in run.vms() if vm["end"] == "never ready"}
    for kind, hung in zip(("never_boot", "silent_worker"), ledger[:2]):
        # (a healthy VM slower than 10 s under load would be replaced too: not asserted away)
        assert hung["name"] in never, (kind, run.vms())
        timed_out = [line for line in run.log.splitlines()
                     if f"worker {hung['name']} did not report ready within 10 s" in line]
        assert timed_out and "--expocloud-boot-timeout" in timed_out[0], run.log[-4000:]
        # the fake's bill: a silent VM ran (billed) until deleted; one that never booted did not
        assert (hung["running"] is None) == (kind == "never_boot"), hung
        assert hung["ended"] is not None
        fault_figures(f"VM {kind.replace('_', ' ')}", injected=1, survived=1, jobs=jobs,
                      jobs_lost=lost, orphan_vms=orphans,
                      detail=f"replaced after the 10 s boot timeout; run {run.seconds:.0f} s "
                             "(both faults in one run)")
    assert "no more spot VMs" not in run.log


def test_when_no_vm_ever_boots_the_run_ends_with_the_reason(
        tmp_path: Path, fake_compute: FakeCompute, gcs_emulator: str,  # noqa: F811
        fault_figures) -> None:
    jobs = size(2, 20)
    fake_compute.fail_next("never_boot", 1000)
    run = _run(tmp_path, fake_compute, gcs_emulator, jobs, "--keep-going",
               "--expocloud-boot-timeout", "8s", "--expocloud-on-demand-only",
               "--expocloud-max-on-demand", "3")
    stop = [line for line in run.log.splitlines()
            if re.search(r"no more on_demand VMs this run: \d+ VMs in a row never reported "
                         "ready", line)]
    assert len(stop) == 1, run.log[-4000:]
    assert "check the image" in stop[0] and "serial" in stop[0]
    orphans = _failed_with_the_reason(run, fake_compute, jobs, "never reported ready")
    injected = fake_compute.faults_served().get("never_boot", 0)
    never = [vm for vm in run.vms() if vm["end"] == "never ready"]
    # 3 in a row stop the pool; VMs asked for together fail together (up to 3 at once)
    assert 3 <= injected == len(never) <= 5, (injected, run.vms())
    assert all(vm["running"] is None for vm in fake_compute.ledger())  # nothing billed
    fault_figures("no VM ever boots", injected=injected, survived=injected, jobs=jobs,
                  jobs_lost=0, orphan_vms=orphans,
                  detail=f"pool stopped after {injected} boot timeouts; every job failed with the "
                         f"reason after {run.seconds:.0f} s")
