"""The fake Compute Engine answers the real ``google-cloud-compute`` client as GCE would.

Every test drives the fake through the real client (or plain HTTP for the control routes), so
a wrong URL, field name or error body shows up as a client failure, not as a passing mock.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from google.api_core import exceptions as gexc
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1

from expo_executor.emulator.compute import FakeCompute
from tests.helpers import REPO, wait_until

PROJECT = "proj"
ZONE = "us-central1-a"
ZONE_B = "us-central1-b"
IMAGE = "projects/debian-cloud/global/images/family/debian-12"

# Stands in for the worker: reads an attribute from its metadata server, then long-polls the
# preemption notice and writes what it saw to its scratch directory.
PROBE = r"""
import pathlib, signal, sys, time, urllib.request
host, scratch = sys.argv[1], pathlib.Path(sys.argv[2])
# the soft-off's SIGTERM: noted, and outlived until the power goes
signal.signal(signal.SIGTERM, lambda *_: (scratch / "sigterm").write_text("1"))
def get(path):
    req = urllib.request.Request(f"http://{host}/computeMetadata/v1/{path}",
                                 headers={"Metadata-Flavor": "Google"})
    return urllib.request.urlopen(req, timeout=60).read().decode()
(scratch / "attr.tmp").write_text(get("instance/attributes/greeting"))
(scratch / "attr.tmp").rename(scratch / "attr")
notice = get("instance/preempted?wait_for_change=true&timeout_sec=30")
(scratch / "notice.tmp").write_text(notice)
(scratch / "notice.tmp").rename(scratch / "notice")
time.sleep(3600)
"""


def sleeper(name: str, host: str, scratch: Path) -> list[str]:
    return ["sleep", "3600"]


def probe(name: str, host: str, scratch: Path) -> list[str]:
    return [sys.executable, "-c", PROBE, host, str(scratch)]


@pytest.fixture
def fake(tmp_path: Path):
    # These tests look at each call's answer: new instances are listed at once (the listing
    # delay has its own test below).
    server = FakeCompute(tmp_path / "vms", command=sleeper, notice_s=0.3, list_delay=0).start()
    yield server
    server.stop()


@pytest.fixture
def clients(fake: FakeCompute):
    kwargs = {"client_options": {"api_endpoint": fake.endpoint},
              "credentials": AnonymousCredentials()}
    return compute_v1.InstancesClient(**kwargs), compute_v1.ZoneOperationsClient(**kwargs)


def instance(name: str, zone: str = ZONE, labels: dict | None = None, spot: bool = False,
             metadata: dict | None = None, max_run_s: int | None = None,
             action: str = "DELETE") -> compute_v1.Instance:
    scheduling = compute_v1.Scheduling()
    if spot:
        scheduling = compute_v1.Scheduling(provisioning_model="SPOT", on_host_maintenance="TERMINATE",
                                           automatic_restart=False,
                                           instance_termination_action=action)
    if max_run_s is not None:
        scheduling.max_run_duration = compute_v1.Duration(seconds=max_run_s)
        scheduling.instance_termination_action = action
    return compute_v1.Instance(
        name=name, machine_type=f"zones/{zone}/machineTypes/e2-small", labels=labels or {},
        metadata=compute_v1.Metadata(items=[compute_v1.Items(key=k, value=v)
                                            for k, v in (metadata or {}).items()]),
        disks=[compute_v1.AttachedDisk(boot=True, auto_delete=True,
                                       initialize_params=compute_v1.AttachedDiskInitializeParams(
                                           source_image=IMAGE, disk_size_gb=10))],
        network_interfaces=[compute_v1.NetworkInterface(network="global/networks/default")],
        scheduling=scheduling)


def insert(client, inst: compute_v1.Instance, zone: str = ZONE, request_id: str = ""):
    return client.insert_unary(request=compute_v1.InsertInstanceRequest(
        project=PROJECT, zone=zone, instance_resource=inst, request_id=request_id))


def status(fake: FakeCompute, name: str) -> str | None:
    return fake.instances().get(name, {}).get("status")


def is_done(op) -> bool:
    return op.status == compute_v1.Operation.Status.DONE


def test_a_new_instance_is_listed_only_after_the_listing_delay(tmp_path: Path) -> None:
    """As on the real API: get and delete find a new instance at once, list and
    aggregatedList show it only ``list_delay`` s after its insert."""
    fake = FakeCompute(tmp_path / "vms", command=sleeper, list_delay=1.5).start()
    try:
        kwargs = {"client_options": {"api_endpoint": fake.endpoint},
                  "credentials": AnonymousCredentials()}
        instances = compute_v1.InstancesClient(**kwargs)
        insert(instances, instance("vm-1"))
        assert instances.get(project=PROJECT, zone=ZONE, instance="vm-1").name == "vm-1"
        assert [i.name for i in instances.list(project=PROJECT, zone=ZONE)] == []
        assert not [i for _z, scoped in instances.aggregated_list(project=PROJECT)
                    for i in scoped.instances]
        assert wait_until(lambda: [i.name for i in instances.list(project=PROJECT, zone=ZONE)]
                          == ["vm-1"], 5)
    finally:
        fake.stop()


def test_insert_get_list_delete(fake, clients):
    instances, _ = clients
    op = insert(instances, instance("vm-1", labels={"team": "a"}), request_id="req-1")
    assert is_done(op) and op.operation_type == "insert" and op.target_link.endswith("/vm-1")
    sent = [r for r in fake.requests if r["op"] == "insert"][0]
    assert sent["path"] == f"/compute/v1/projects/{PROJECT}/zones/{ZONE}/instances"
    assert sent["query"]["requestId"] == "req-1"
    assert sent["json"]["disks"][0]["initializeParams"]["diskSizeGb"] == "10"  # int64 as string
    assert wait_until(lambda: status(fake, "vm-1") == "RUNNING", 5)
    got = instances.get(project=PROJECT, zone=ZONE, instance="vm-1")
    assert got.status == "RUNNING" and got.labels["team"] == "a" and got.id > 0
    assert got.machine_type.endswith(f"/zones/{ZONE}/machineTypes/e2-small")
    assert [i.name for i in instances.list(project=PROJECT, zone=ZONE)] == ["vm-1"]
    with pytest.raises(gexc.Conflict):
        insert(instances, instance("vm-1"))
    op = instances.delete_unary(project=PROJECT, zone=ZONE, instance="vm-1")
    assert is_done(op)
    with pytest.raises(gexc.NotFound):
        instances.get(project=PROJECT, zone=ZONE, instance="vm-1")
    with pytest.raises(gexc.NotFound):
        instances.delete_unary(project=PROJECT, zone=ZONE, instance="vm-1")
    assert fake.instances() == {}


def test_invalid_requests_are_refused_as_gce_does(clients):
    instances, _ = clients
    with pytest.raises(gexc.BadRequest):
        insert(instances, instance("Bad_Name"))
    wrong_zone = instance("vm-2")
    wrong_zone.machine_type = f"zones/{ZONE_B}/machineTypes/e2-small"
    with pytest.raises(gexc.BadRequest):
        insert(instances, wrong_zone)
    restarting_spot = instance("vm-3", spot=True)
    restarting_spot.scheduling.automatic_restart = True
    with pytest.raises(gexc.BadRequest):
        insert(instances, restarting_spot)
    capped_without_action = instance("vm-4", max_run_s=60)
    capped_without_action.scheduling = compute_v1.Scheduling(
        max_run_duration=compute_v1.Duration(seconds=60))
    with pytest.raises(gexc.BadRequest):
        insert(instances, capped_without_action)


def test_a_machine_type_no_zone_has_is_refused_as_gce_does(fake, clients):
    """An insert or bulkInsert of a machine type Compute Engine does not have is the real
    API's 400 naming the field, the type and the zone, and creates nothing."""
    instances, _ = clients
    imaginary = instance("vm-1")
    imaginary.machine_type = f"zones/{ZONE}/machineTypes/e2-imaginary-7"
    with pytest.raises(gexc.BadRequest) as refused:
        insert(instances, imaginary)
    assert refused.value.message.endswith(
        f": Invalid value for field 'resource.machineType': 'zones/{ZONE}/machineTypes/"
        f"e2-imaginary-7'. Machine type with name 'e2-imaginary-7' does not exist in zone "
        f"'{ZONE}'.")
    assert [e["reason"] for e in refused.value.errors] == ["invalid"]
    props = compute_v1.InstanceProperties(
        machine_type="e2-imaginary-7", disks=imaginary.disks,
        network_interfaces=imaginary.network_interfaces)
    with pytest.raises(gexc.BadRequest, match="Machine type with name 'e2-imaginary-7' does "
                                              f"not exist in zone '{ZONE}'"):
        instances.bulk_insert_unary(project=PROJECT, zone=ZONE,
                                    bulk_insert_instance_resource_resource=compute_v1.
                                    BulkInsertInstanceResource(count=1, name_pattern="vm-#",
                                                               instance_properties=props))
    assert fake.instances() == {}


def test_list_filter_and_paging(fake, clients):
    instances, _ = clients
    for i in range(5):
        insert(instances, instance(f"vm-{i}", labels={"run": "r1" if i < 3 else "r2"}))
    insert(instances, instance("plain"))

    def names(flt: str, **extra) -> list[str]:
        request = compute_v1.ListInstancesRequest(project=PROJECT, zone=ZONE, filter=flt, **extra)
        return sorted(i.name for i in instances.list(request=request))

    assert names('labels.run = "r1"') == ["vm-0", "vm-1", "vm-2"]
    assert names("labels.run:*") == [f"vm-{i}" for i in range(5)]
    assert names('(labels.run:*) (labels.run != "r1")') == ["vm-3", "vm-4"]
    assert names('labels.run = "r2" AND name = "vm-4"') == ["vm-4"]
    assert names("name eq vm-[12]") == ["vm-1", "vm-2"]
    fake.clear_requests()
    assert names("", max_results=2) == ["plain"] + [f"vm-{i}" for i in range(5)]
    pages = [r["query"].get("pageToken") for r in fake.requests if r["op"] == "list"]
    assert len(pages) == 3 and pages[0] is None and all(pages[1:])
    with pytest.raises(gexc.BadRequest):
        names('labels.run = "r1" (')


def test_aggregated_list_groups_by_zone_and_filters(clients):
    instances, _ = clients
    insert(instances, instance("a-1", labels={"run": "r1"}))
    insert(instances, instance("b-1", zone=ZONE_B, labels={"run": "r1"}), zone=ZONE_B)
    insert(instances, instance("b-2", zone=ZONE_B, labels={"run": "r2"}), zone=ZONE_B)
    request = compute_v1.AggregatedListInstancesRequest(project=PROJECT, filter='labels.run = "r1"')
    found = {(scope, i.name) for scope, scoped in instances.aggregated_list(request=request)
             for i in scoped.instances}
    assert found == {(f"zones/{ZONE}", "a-1"), (f"zones/{ZONE_B}", "b-1")}


def test_request_id_makes_insert_idempotent_even_when_the_answer_is_lost(fake, clients):
    instances, _ = clients
    first = insert(instances, instance("vm-1"), request_id="same")
    again = insert(instances, instance("vm-1"), request_id="same")
    assert again.name == first.name and len(fake.instances()) == 1
    fake.fail_next("lost_response", op="insert")
    with pytest.raises(gexc.ServiceUnavailable):
        insert(instances, instance("vm-2"), request_id="lost")
    assert "vm-2" in fake.instances()  # applied although the client heard 503
    assert is_done(insert(instances, instance("vm-2"), request_id="lost"))  # a faithful retry
    with pytest.raises(gexc.Conflict):  # a retry with a new request id collides
        insert(instances, instance("vm-2"), request_id="fresh")


def test_bulk_insert_names_and_properties(fake, clients):
    instances, _ = clients
    props = compute_v1.InstanceProperties(
        machine_type="e2-small", labels={"run": "r1"},
        disks=[compute_v1.AttachedDisk(boot=True, initialize_params=compute_v1.AttachedDiskInitializeParams(
            source_image=IMAGE))],
        network_interfaces=[compute_v1.NetworkInterface(network="global/networks/default")])
    resource = compute_v1.BulkInsertInstanceResource(
        count=4, min_count=4, name_pattern="w-##",
        per_instance_properties={"first": compute_v1.BulkInsertInstanceResourcePerInstanceProperties(name="first")},
        instance_properties=props)
    op = instances.bulk_insert_unary(request=compute_v1.BulkInsertInstanceRequest(
        project=PROJECT, zone=ZONE, bulk_insert_instance_resource_resource=resource,
        request_id="bulk-1"))
    assert is_done(op) and not op.error.errors
    sent = [r for r in fake.requests if r["op"] == "bulkInsert"][0]
    assert sent["json"]["count"] == "4" and sent["query"]["requestId"] == "bulk-1"
    assert sorted(fake.instances()) == ["first", "w-01", "w-02", "w-03"]
    assert {v["labels"]["run"] for v in fake.instances().values()} == {"r1"}
    props.machine_type = f"zones/{ZONE}/machineTypes/e2-small"  # bulkInsert wants a bare name
    resource.instance_properties = props
    resource.per_instance_properties = {}
    with pytest.raises(gexc.BadRequest):
        instances.bulk_insert_unary(request=compute_v1.BulkInsertInstanceRequest(
            project=PROJECT, zone=ZONE, bulk_insert_instance_resource_resource=resource))


def test_stockout_and_quota_end_the_operation_with_gce_error_codes(fake, clients):
    instances, _ = clients
    fake.fail_next("stockout", zone=ZONE)
    op = insert(instances, instance("vm-1"))
    assert is_done(op) and op.error.errors[0].code == "ZONE_RESOURCE_POOL_EXHAUSTED"
    assert op.http_error_status_code == 503 and "vm-1" not in fake.instances()
    assert is_done(insert(instances, instance("vm-1", zone=ZONE_B), zone=ZONE_B))
    fake.fail_next("quota")
    op = insert(instances, instance("vm-2"))
    assert op.error.errors[0].code == "QUOTA_EXCEEDED"
    assert "Quota 'CPUS' exceeded.  Limit: 24.0 in region us-central1." in op.error.errors[0].message


@pytest.mark.parametrize("kind,http_status,error", [
    ("rate_limit", None, gexc.Forbidden), ("rate_limit", 429, gexc.TooManyRequests),
    ("unavailable", None, gexc.ServiceUnavailable)])
def test_http_faults(fake, clients, kind, http_status, error):
    instances, _ = clients
    fake.fail_next(kind, http_status=http_status, op="get")
    insert(instances, instance("vm-1"))  # not a get: not affected
    with pytest.raises(error) as caught:
        instances.get(project=PROJECT, zone=ZONE, instance="vm-1", retry=None)
    if kind == "rate_limit":
        assert caught.value.errors[0]["reason"] == "rateLimitExceeded"
    assert instances.get(project=PROJECT, zone=ZONE, instance="vm-1").name == "vm-1"


def test_running_operations_finish_later_and_wait_blocks_until_done(fake, clients):
    instances, operations = clients
    fake.op_delay = 0.4
    op = insert(instances, instance("vm-1"))
    assert not is_done(op) and status(fake, "vm-1") == "PROVISIONING"
    with pytest.raises(gexc.BadRequest):  # resourceNotReady while the insert runs
        instances.delete_unary(project=PROJECT, zone=ZONE, instance="vm-1")
    assert not is_done(operations.get(project=PROJECT, zone=ZONE, operation=op.name))
    assert is_done(operations.wait(project=PROJECT, zone=ZONE, operation=op.name))
    assert wait_until(lambda: status(fake, "vm-1") == "RUNNING", 5)
    fake.fail_next("stockout")
    op = insert(instances, instance("vm-2"))
    assert not is_done(op) and "vm-2" in fake.instances()
    done = operations.wait(project=PROJECT, zone=ZONE, operation=op.name)
    assert done.error.errors[0].code == "ZONE_RESOURCE_POOL_EXHAUSTED"
    assert "vm-2" not in fake.instances()


def test_boot_starts_metadata_and_preempt_raises_the_notice(tmp_path, clients, fake):
    instances, operations = clients
    fake.command = probe
    insert(instances, instance("spot-1", spot=True, metadata={"greeting": "hello"}))
    scratch = fake.scratch_root / "spot-1"
    assert wait_until(lambda: (scratch / "attr").exists(), 10)
    assert (scratch / "attr").read_text() == "hello"
    record = fake.instances()["spot-1"]
    assert record["scheduling"]["provisioningModel"] == "SPOT"
    assert fake.preempt("spot-1")
    assert (scratch / "notice").read_text() == "TRUE"  # seen before the power-off
    assert (scratch / "sigterm").exists()  # ACPI soft-off: the guest's services got SIGTERM
    assert "spot-1" not in fake.instances()  # Spot default termination action: DELETE
    request = compute_v1.ListZoneOperationsRequest(
        project=PROJECT, zone=ZONE, filter='operationType = "compute.instances.preempted"')
    ops = list(operations.list(request=request))
    assert len(ops) == 1 and ops[0].target_link.endswith("/instances/spot-1")
    assert is_done(ops[0]) and ops[0].target_id == int(record["id"])


def test_preempt_with_stop_leaves_the_instance_terminated(fake, clients):
    instances, _ = clients
    insert(instances, instance("spot-2", spot=True, action="STOP"))
    assert wait_until(lambda: status(fake, "spot-2") == "RUNNING", 5)
    assert fake.preempt("spot-2")
    assert status(fake, "spot-2") == "TERMINATED"
    assert not fake.preempt("spot-2")  # already off: nothing to preempt


def test_worker_exit_is_a_guest_poweroff(fake, clients):
    instances, _ = clients
    fake.command = lambda name, host, scratch: ["true"]
    insert(instances, instance("short"))
    assert wait_until(lambda: status(fake, "short") == "TERMINATED", 5)
    instances.delete_unary(project=PROJECT, zone=ZONE, instance="short")
    assert fake.instances() == {}


def test_max_run_duration_is_enforced(tmp_path, clients, fake):
    instances, _ = clients
    fake.max_run_scale = 0.01  # 60 s -> 0.6 s
    insert(instances, instance("capped", max_run_s=60, action="DELETE"))
    insert(instances, instance("stopped", max_run_s=60, action="STOP"))
    insert(instances, instance("free"))
    assert wait_until(lambda: "capped" not in fake.instances(), 5)
    assert wait_until(lambda: status(fake, "stopped") == "TERMINATED", 5)
    assert status(fake, "free") == "RUNNING"


def test_default_command_runs_the_worker_from_metadata(tmp_path):
    recorder = tmp_path / "python"
    recorder.write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$5/argv"\n'
                        'echo $$ > "$5/pid"\necho "$GCE_METADATA_HOST" > "$5/host"\nexec sleep 3600\n')
    recorder.chmod(recorder.stat().st_mode | stat.S_IXUSR)
    fake = FakeCompute(tmp_path / "vms", python=str(recorder)).start()
    try:
        kwargs = {"client_options": {"api_endpoint": fake.endpoint},
                  "credentials": AnonymousCredentials()}
        insert(compute_v1.InstancesClient(**kwargs), instance("vm-1"))
        scratch = tmp_path / "vms" / "vm-1"
        assert wait_until(lambda: (scratch / "host").exists(), 5)
        assert (scratch / "argv").read_text().split() == [
            "-m", "expo_executor.worker.agent", "--from-metadata", "--scratch", str(scratch)]
        assert (scratch / "host").read_text().strip().startswith("127.0.0.1:")
        pid = int((scratch / "pid").read_text())
        assert Path(f"/proc/{pid}").exists()
    finally:
        fake.stop()
    assert not Path(f"/proc/{pid}").exists()  # stop() powered the instance off


def test_control_routes_over_http(fake, clients):
    instances, _ = clients

    def post(what: str, body: dict) -> dict:
        request = urllib.request.Request(f"{fake.endpoint}/_fake/{what}",
                                         data=json.dumps(body).encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
        return json.loads(urllib.request.urlopen(request, timeout=10).read())

    post("fail_next", {"kind": "stockout", "zone": ZONE})
    assert insert(instances, instance("vm-1")).error.errors[0].code == "ZONE_RESOURCE_POOL_EXHAUSTED"
    insert(instances, instance("vm-1", spot=True, action="STOP"))
    assert wait_until(lambda: status(fake, "vm-1") == "RUNNING", 5)
    assert post("preempt", {"name": "vm-1"}) == {"preempted": True}
    listing = json.loads(urllib.request.urlopen(f"{fake.endpoint}/_fake/instances").read())
    assert listing["vm-1"]["status"] == "TERMINATED"
    logged = json.loads(urllib.request.urlopen(f"{fake.endpoint}/_fake/requests").read())
    assert [r["op"] for r in logged][:2] == ["insert", "insert"]


def test_fail_next_over_http_keeps_its_spot_limit(fake, clients):
    """``/_fake/fail_next`` passes every argument of ``fail_next``: a stockout of Spot capacity
    alone leaves an on-demand insert alone (it once dropped ``spot``, failing both)."""
    instances, _ = clients
    request = urllib.request.Request(
        f"{fake.endpoint}/_fake/fail_next", method="POST",
        data=json.dumps({"kind": "stockout", "zone": ZONE, "spot": True}).encode(),
        headers={"Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=10).read()
    assert not insert(instances, instance("steady")).error.errors  # on-demand: not this fault
    failed = insert(instances, instance("spot-1", spot=True))
    assert failed.error.errors[0].code == "ZONE_RESOURCE_POOL_EXHAUSTED"
    assert fake.faults_served() == {"stockout": 1}


def test_chaos_preempts_spot_instances_only(fake, clients):
    instances, _ = clients
    fake.notice_s = 0.05
    fake.chaos(spot_mean_life_s=0.2, seed=7)
    for i in range(3):
        insert(instances, instance(f"spot-{i}", spot=True))
    insert(instances, instance("steady"))
    assert wait_until(lambda: set(fake.instances()) == {"steady"}, 10)
    assert status(fake, "steady") == "RUNNING"


def test_main_serves_until_sigterm(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "expo_executor.emulator.compute", "--port", "0",
                             "--scratch", str(tmp_path)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        endpoint = proc.stdout.readline().strip()
        assert endpoint.startswith("http://127.0.0.1:")
        client = compute_v1.InstancesClient(client_options={"api_endpoint": endpoint},
                                            credentials=AnonymousCredentials())
        assert list(client.list(project=PROJECT, zone=ZONE)) == []
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_instances_that_never_boot_or_never_start_their_worker(fake, clients, tmp_path):
    """never_boot: PROVISIONING until deleted, never billed; silent_worker: RUNNING and billed,
    but no worker process. Steered over HTTP like the other faults; served ones are counted."""
    instances, _ = clients
    request = urllib.request.Request(
        f"{fake.endpoint}/_fake/fail_next", method="POST",
        data=json.dumps({"kind": "never_boot", "zone": ZONE}).encode(),
        headers={"Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=10).read()
    fake.fail_next("silent_worker", 1, zone=ZONE_B)
    assert is_done(insert(instances, instance("vm-1")))
    assert is_done(insert(instances, instance("vm-2", zone=ZONE_B), zone=ZONE_B))
    assert is_done(insert(instances, instance("vm-3")))  # the fault was used up: boots
    assert wait_until(lambda: status(fake, "vm-2") == "RUNNING"
                      and status(fake, "vm-3") == "RUNNING", 10)
    assert status(fake, "vm-1") == "PROVISIONING"
    assert not (tmp_path / "vms" / "vm-2" / "worker.log").exists()  # no worker ever started
    assert (tmp_path / "vms" / "vm-3" / "worker.log").exists()
    served = json.loads(urllib.request.urlopen(f"{fake.endpoint}/_fake/faults").read())
    assert served == fake.faults_served() == {"never_boot": 1, "silent_worker": 1}
    for name, zone in (("vm-1", ZONE), ("vm-2", ZONE_B), ("vm-3", ZONE)):
        assert is_done(instances.delete_unary(project=PROJECT, zone=zone, instance=name))
    assert fake.instances() == {}
    ledger = {vm["name"]: vm for vm in fake.ledger()}
    assert ledger["vm-1"]["running"] is None  # never RUNNING: nothing billed
    assert ledger["vm-2"]["running"] is not None and ledger["vm-2"]["ended"] is not None
    with pytest.raises(ValueError):
        fake.fail_next("never_booting")


def test_boot_faults_apply_per_instance_of_a_bulk_insert(fake, clients):
    instances, _ = clients
    fake.fail_next("never_boot", 2)
    params = compute_v1.AttachedDiskInitializeParams(source_image=IMAGE, disk_size_gb=10)
    resource = compute_v1.BulkInsertInstanceResource(
        count=3, min_count=3, name_pattern="vm-#",
        instance_properties=compute_v1.InstanceProperties(
            machine_type="e2-small",
            disks=[compute_v1.AttachedDisk(boot=True, auto_delete=True, initialize_params=params)],
            network_interfaces=[compute_v1.NetworkInterface(network="global/networks/default")]))
    instances.bulk_insert_unary(request=compute_v1.BulkInsertInstanceRequest(
        project=PROJECT, zone=ZONE, bulk_insert_instance_resource_resource=resource))
    assert wait_until(lambda: status(fake, "vm-3") == "RUNNING", 10)
    assert status(fake, "vm-1") == status(fake, "vm-2") == "PROVISIONING"
    assert fake.faults_served() == {"never_boot": 2}


def _with_gpus(inst: compute_v1.Instance, machine: str, gpu: str | None, count: int = 1,
               terminate: bool = True, zone: str = ZONE) -> compute_v1.Instance:
    inst.machine_type = f"zones/{zone}/machineTypes/{machine}"
    if gpu:
        inst.guest_accelerators = [compute_v1.AcceleratorConfig(
            accelerator_type=f"zones/{zone}/acceleratorTypes/{gpu}", accelerator_count=count)]
    if terminate:
        inst.scheduling = compute_v1.Scheduling(on_host_maintenance="TERMINATE",
                                                automatic_restart=False)
    return inst


@pytest.mark.parametrize("machine, gpu, count, terminate, error, words", [
    ("n1-standard-4", "nvidia-h999", 1, True, gexc.NotFound, "acceleratorTypes/nvidia-h999"),
    ("e2-standard-4", "nvidia-tesla-t4", 1, True, gexc.BadRequest, "not supported with machine"),
    ("n1-standard-4", "nvidia-tesla-t4", 3, True, gexc.BadRequest, "cannot take 3"),
    ("n1-standard-32", "nvidia-tesla-v100", 1, True, gexc.BadRequest, "cannot take 1"),
    ("n1-standard-4", "nvidia-l4", 1, True, gexc.BadRequest, "not supported with machine"),
    ("n1-standard-4", "nvidia-tesla-t4", 1, False, gexc.BadRequest, "live migration"),
    ("g2-standard-4", None, 0, False, gexc.BadRequest, "live migration"),
])
def test_gpus_are_refused_where_gce_has_none(fake, clients, machine, gpu, count, terminate,
                                             error, words):
    instances, _ = clients
    with pytest.raises(error) as info:
        insert(instances, _with_gpus(instance("gpu-1"), machine, gpu, count, terminate))
    assert words in str(info.value)
    assert fake.instances() == {}


def test_gpus_where_gce_has_them_are_accepted(fake, clients):
    instances, _ = clients
    insert(instances, _with_gpus(instance("t4"), "n1-standard-4", "nvidia-tesla-t4", 2))
    insert(instances, _with_gpus(instance("l4"), "g2-standard-4", None))
    assert set(fake.instances()) == {"t4", "l4"}
    body = [r for r in fake.requests if r["op"] == "insert"][0]["json"]
    assert body["guestAccelerators"] == [{
        "acceleratorType": f"zones/{ZONE}/acceleratorTypes/nvidia-tesla-t4",
        "acceleratorCount": 2}]
    # a bulk insert names the accelerator type as it names the machine type: bare
    props = _with_gpus(instance("x"), "n1-standard-4", "nvidia-tesla-t4")
    props.guest_accelerators[0].accelerator_type = f"zones/{ZONE}/acceleratorTypes/nvidia-tesla-t4"
    resource = compute_v1.BulkInsertInstanceResource(
        count=1, min_count=1, name_pattern="b-#", instance_properties=compute_v1.InstanceProperties(
            machine_type="n1-standard-4", disks=props.disks,
            network_interfaces=props.network_interfaces, scheduling=props.scheduling,
            guest_accelerators=props.guest_accelerators))
    with pytest.raises(gexc.BadRequest, match="accelerator type name"):
        instances.bulk_insert_unary(request=compute_v1.BulkInsertInstanceRequest(
            project=PROJECT, zone=ZONE, bulk_insert_instance_resource_resource=resource))


def _raw(fake: FakeCompute, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    """(status, JSON answer) of a request sent without the client, as a hand-built body is."""
    request = urllib.request.Request(f"{fake.endpoint}/compute/v1/projects/{PROJECT}/{path}",
                                     data=None if body is None else json.dumps(body).encode(),
                                     method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def _invalid_argument(message: str) -> dict:
    return {"error": {"code": 400, "message": message,
                      "errors": [{"message": message, "reason": "invalid"}],
                      "status": "INVALID_ARGUMENT"}}


def test_what_the_discovery_document_refuses_is_a_400_as_google_answers_it(fake, clients):
    """A body the client itself sent, with one unknown field added by hand; an enum typo the
    client passes through (enums are strings in its protos); a query parameter the method does
    not take; an instance name no URL may carry. Each is answered 400 before anything happens,
    and the request log says why."""
    instances, _ = clients
    insert(instances, instance("vm-1", spot=True))
    body = fake.requests[-1]["json"]
    assert fake.requests[-1]["problems"] == []
    body["name"], body["scheduling"]["preemptable"] = "vm-2", True
    unknown = ('Invalid JSON payload received. Unknown name "preemptable" at '
               "'instance_resource.scheduling': Cannot find field.")
    answer = _raw(fake, "POST", f"zones/{ZONE}/instances", body)
    assert answer == (400, _invalid_argument(unknown))
    assert fake.requests[-1]["problems"] == [unknown]

    typo = instance("vm-3", spot=True)
    typo.scheduling.provisioning_model = "SPOTT"
    with pytest.raises(gexc.BadRequest) as info:
        insert(instances, typo)
    assert info.value.message.endswith(
        ": Invalid value at 'instance_resource.scheduling.provisioning_model' "
        "(type.googleapis.com/google.cloud.compute.v1.Scheduling.ProvisioningModel), \"SPOTT\"")
    assert _raw(fake, "GET", f"zones/{ZONE}/instances?maxResult=5")[0] == 400
    with pytest.raises(gexc.BadRequest, match="Must be a match of regex"):
        instances.get(project=PROJECT, zone=ZONE, instance="VM_1")
    assert list(fake.instances()) == ["vm-1"]
