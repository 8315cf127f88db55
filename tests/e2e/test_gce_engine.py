"""GceEngine against the fake Compute Engine, through the real client.

Assertions look at what reached the fake (its request log, its instances) rather than at the
engine's own bookkeeping, and faults are injected at the HTTP boundary only. Retry backoff
sleeps are recorded instead of slept.
"""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1

from expo_executor.core.scheduler import Pool
from expo_executor.core.shapes import Shape
from expo_executor.emulator.compute import DISCOVERY_IDS, FakeCompute
from expo_executor.engines.base import CreateFailed, Instance
from expo_executor.engines.gce.engine import GceConfig, GceEngine
from expo_executor.engines.gce.listing import find_instances
from expo_executor.engines.gce.teardown import delete_instances
from tests.helpers import wait_until

PROJECT = "proj"
ZONES = ["us-central1-a", "us-central1-b", "us-central1-c"]
SECRET = "feedfacecafebeef" * 4
WORKER = {"v": 1, "bucket": "gs://b", "slots": 1, "poll": 1, "grace": 60, "heartbeat": 10}


def sleeper(name: str, host: str, scratch: Path) -> list[str]:
    return ["sleep", "3600"]


@pytest.fixture
def fake(tmp_path: Path):
    server = FakeCompute(tmp_path / "vms", command=sleeper, notice_s=0.05).start()
    yield server
    server.stop()


class Clock:
    """A settable monotonic clock for the zone-exhaustion memory."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def clock() -> Clock:
    return Clock()


GPU_IMAGE = "projects/p/global/images/gpu-worker"


def config(fake: FakeCompute, **overrides) -> GceConfig:
    values = dict(
        project=PROJECT, zones=list(ZONES),
        machine_types={Pool.SPOT: "e2-standard-2", Pool.ON_DEMAND: "n2-standard-4"},
        image="projects/debian-cloud/global/images/family/debian-12",
        gpu_image=GPU_IMAGE, max_run_duration_s=7200, run_label="run-1", labels={"team": "sweeps"},
        metadata={"startup-script": "#!/bin/sh\necho boot", "expocloud-worker": json.dumps(WORKER),
                  "expocloud-run-key": SECRET},
        endpoint=fake.endpoint, close_timeout_s=20.0)
    values.update(overrides)
    return GceConfig(**values)


@pytest.fixture
def engine(fake, sleeps, clock):
    eng = GceEngine(config(fake), sleep=sleeps.append, rand=lambda: 0.5, clock=clock)
    yield eng
    eng.close()


def inserts(fake: FakeCompute, op: str = "insert") -> list[dict]:
    return [r for r in fake.requests if r["op"] == op]


def items(body: dict) -> dict[str, str]:
    return {i["key"]: i["value"] for i in body["metadata"]["items"]}


def client(fake: FakeCompute) -> compute_v1.InstancesClient:
    return compute_v1.InstancesClient(client_options={"api_endpoint": fake.endpoint},
                                      credentials=AnonymousCredentials())


def test_spot_request_shape(engine, fake):
    engine.create(["s-1"], Pool.SPOT, 2)
    [sent] = inserts(fake)
    body = sent["json"]
    assert sent["zone"] == ZONES[0]
    assert body["name"] == "s-1"
    assert body["machineType"] == f"zones/{ZONES[0]}/machineTypes/e2-standard-2"
    assert body["scheduling"] == {"provisioningModel": "SPOT", "instanceTerminationAction": "DELETE",
                                  "onHostMaintenance": "TERMINATE", "automaticRestart": False,
                                  "maxRunDuration": {"seconds": "7200"}}
    assert body["labels"] == {"team": "sweeps", "expocloud-run": "run-1",
                              "expocloud-pool": "spot", "expocloud-slots": "2",
                              "expocloud-machine": "e2-standard-2"}
    assert body["disks"][0]["initializeParams"]["labels"] == body["labels"]
    metadata = items(body)
    assert metadata["startup-script"].startswith("#!/bin/sh")
    assert metadata["expocloud-run-key"] == SECRET
    assert json.loads(metadata["expocloud-worker"]) == {**WORKER, "slots": 2}
    assert uuid.UUID(sent["query"]["requestId"]).version == 4
    assert body["disks"][0]["initializeParams"]["sourceImage"].endswith("family/debian-12")
    assert body["serviceAccounts"][0]["email"] == "default"
    assert fake.instances()["s-1"]["metadata"]["expocloud-run-key"] == SECRET


def test_on_demand_request_shape(engine, fake):
    engine.create(["d-1"], Pool.ON_DEMAND, 4)
    body = inserts(fake)[0]["json"]
    assert body["machineType"] == f"zones/{ZONES[0]}/machineTypes/n2-standard-4"
    assert body["scheduling"]["provisioningModel"] == "STANDARD"
    assert body["scheduling"]["maxRunDuration"] == {"seconds": "7200"}
    assert body["scheduling"]["instanceTerminationAction"] == "DELETE"
    assert body["labels"]["expocloud-pool"] == "on-demand"
    assert body["labels"]["expocloud-slots"] == "4"


def test_the_bill_labels_reach_the_vm_and_its_boot_disk(fake, sleeps, clock):
    """The workflow, the shape (machine, GPUs) and a rule's own labels, on the instance and in
    its boot disk's initializeParams, by insert and by bulk insert; the fake checked each body
    against the discovery document and Google's label rules, so they are what the API takes."""
    eng = GceEngine(config(fake, workflow_label="sweep-demo"), sleep=sleeps.append,
                    rand=lambda: 0.5, clock=clock)
    try:
        gpu = Shape("n1-standard-4", "nvidia-tesla-t4", 1,
                    labels=(("expocloud-rule", "train"), ("team", "ml")))
        eng.create(["g-1"], Pool.ON_DEMAND, 4, shape=gpu)
        eng.create(["b-1", "b-2"], Pool.SPOT, 2)
    finally:
        eng.close()
    body = inserts(fake)[0]["json"]
    assert body["labels"] == {"team": "ml", "expocloud-rule": "train", "expocloud-run": "run-1",
                              "expocloud-pool": "on-demand", "expocloud-slots": "4",
                              "expocloud-machine": "n1-standard-4",
                              "expocloud-gpu": "1-nvidia-tesla-t4",
                              "expocloud-workflow": "sweep-demo"}
    assert body["disks"][0]["initializeParams"]["labels"] == body["labels"]
    props = inserts(fake, "bulkInsert")[0]["json"]["instanceProperties"]
    assert props["labels"]["expocloud-workflow"] == "sweep-demo"
    assert props["labels"]["team"] == "sweeps" and "expocloud-rule" not in props["labels"]
    assert props["disks"][0]["initializeParams"]["labels"] == props["labels"]


def test_a_label_google_refuses_is_refused_by_the_fake_with_googles_words(fake, sleeps, clock):
    eng = GceEngine(config(fake, labels={"Team": "x"}), sleep=sleeps.append, rand=lambda: 0.5,
                    clock=clock)
    try:
        with pytest.raises(CreateFailed) as caught:
            eng.create(["x-1"], Pool.SPOT, 1)
    finally:
        eng.close()
    assert "Label key 'Team' violates format constraints" in caught.value.message
    assert fake.instances() == {}


def test_request_ids_are_unique_per_call_and_reused_on_retry(engine, fake, sleeps):
    engine.create(["a-1"], Pool.SPOT, 1)
    engine.create(["a-2"], Pool.SPOT, 1)
    fake.fail_next("rate_limit", count=1, op="insert")
    fake.fail_next("rate_limit", count=1, op="insert", http_status=429)
    engine.create(["a-3"], Pool.SPOT, 1)
    ids = [r["query"]["requestId"] for r in inserts(fake)]
    assert len(ids) == 5
    assert len({ids[0], ids[1], ids[2]}) == 3
    assert ids[2] == ids[3] == ids[4]  # two retries of one logical insert
    assert len(sleeps) == 2 and sleeps[1] > sleeps[0]  # exponential, jitter fixed at 0.5
    assert "a-3" in fake.instances()


def test_lost_answer_retried_with_same_request_id_creates_once(engine, fake):
    fake.fail_next("lost_response", op="insert")
    engine.create(["lost-1"], Pool.SPOT, 1)  # no 409: the retry is recognised
    assert list(fake.instances()) == ["lost-1"]
    assert len(inserts(fake)) == 2


def test_delete_carries_a_request_id_and_is_idempotent(engine, fake):
    engine.create(["x-1"], Pool.SPOT, 1)
    engine.delete("x-1")
    engine.delete("x-1")  # gone: still success
    engine.delete("never-made")
    deletes = inserts(fake, "delete")
    assert deletes and all(r["query"].get("requestId") for r in deletes)
    assert fake.instances() == {}


def test_stockout_moves_to_next_zone_and_is_remembered(engine, fake, clock):
    fake.fail_next("stockout", zone=ZONES[0])
    engine.create(["z-1"], Pool.SPOT, 1)
    assert fake.instances()["z-1"]["zone"] == ZONES[1]
    fake.clear_requests()
    engine.create(["z-2"], Pool.SPOT, 1)
    assert [r["zone"] for r in inserts(fake)] == [ZONES[1]]  # zone a avoided for a while
    clock.now += 3600
    engine.create(["z-3"], Pool.SPOT, 1)
    assert fake.instances()["z-3"]["zone"] == ZONES[0]


def test_a_spot_stockout_does_not_keep_on_demand_out_of_the_zone(engine, fake):
    """Spot and on-demand capacity run out separately: a zone Spot avoids is still tried for
    an on-demand VM, and the fake's Spot-only stockout leaves it be."""
    fake.fail_next("stockout", count=10, zone=ZONES[0], spot=True)
    engine.create(["s-1"], Pool.SPOT, 1)
    assert fake.instances()["s-1"]["zone"] == ZONES[1]
    fake.clear_requests()
    engine.create(["o-1"], Pool.ON_DEMAND, 1)
    assert [r["zone"] for r in inserts(fake)] == [ZONES[0]]
    assert fake.instances()["o-1"]["zone"] == ZONES[0]


def test_stockout_with_details_also_moves_on(engine, fake):
    fake.fail_next("stockout_details", zone=ZONES[0])
    engine.create(["zd-1", "zd-2"], Pool.SPOT, 1)
    assert {v["zone"] for v in fake.instances().values()} == {ZONES[1]}


def test_every_zone_exhausted_is_a_temporary_failure(engine, fake):
    fake.fail_next("stockout", count=3)
    with pytest.raises(CreateFailed) as caught:
        engine.create(["e-1"], Pool.SPOT, 1)
    assert caught.value.stop_growth is False and caught.value.names == ["e-1"]
    assert caught.value.pool is Pool.SPOT
    assert [r["zone"] for r in inserts(fake)] == ZONES
    with pytest.raises(CreateFailed):  # all remembered as exhausted: no call at all
        engine.create(["e-2"], Pool.SPOT, 1)
    assert len(inserts(fake)) == 3


def test_quota_holds_growth_with_a_clear_message(engine, fake):
    """A full quota: the pool waits for one of the run's VMs to end (the coordinator decides,
    with ``quota``), never a zone hop and never a stop for good here."""
    fake.fail_next("quota", quota_metric="PREEMPTIBLE_CPUS")
    with pytest.raises(CreateFailed) as caught:
        engine.create(["q-1", "q-2", "q-3"], Pool.SPOT, 1)
    failed = caught.value
    assert failed.quota is True and failed.stop_growth is False
    assert failed.names == ["q-1", "q-2", "q-3"]
    assert "PREEMPTIBLE_CPUS" in failed.message and "us-central1" in failed.message
    assert "quota increase" in failed.message and "--expocloud-max-workers" in failed.message
    assert "\n" not in failed.message
    assert len(inserts(fake, "bulkInsert")) == 1  # a quota is regional: no zone hopping


REGIONS = ["us-central1-a", "us-central1-b", "europe-west1-b", "europe-west1-c"]


def _cheaper_in_europe(region: str, pool: Pool, shape: object) -> float:
    return {"us-central1": 0.03, "europe-west1": 0.02}[region]


def test_across_regions_the_cheapest_goes_first_and_a_stockout_cools_its_region(
        fake, clock):
    """The cheaper region first; its stockout sends the next VM to the other region's first
    zone, not to its own second one (a region out of Spot tends to stay out)."""
    eng = GceEngine(config(fake, zones=REGIONS, region_weight=_cheaper_in_europe),
                    sleep=lambda s: None, clock=clock)
    try:
        fake.fail_next("stockout", count=1, zone="europe-west1-b", spot=True)
        eng.create(["c-1"], Pool.SPOT, 1)
        assert [r["zone"] for r in inserts(fake)] == ["europe-west1-b", "us-central1-a"]
        assert fake.instances()["c-1"]["zone"] == "us-central1-a"
        fake.clear_requests()
        eng.create(["c-2"], Pool.SPOT, 1)  # still cooling: the other region again
        assert [r["zone"] for r in inserts(fake)] == ["us-central1-a"]
        clock.now += 3600  # cooled down: the cheaper region again
        eng.create(["c-3"], Pool.SPOT, 1)
        assert fake.instances()["c-3"]["zone"] == "europe-west1-b"
    finally:
        eng.close()


def test_across_regions_a_full_quota_moves_to_the_next_region(fake, clock):
    eng = GceEngine(config(fake, zones=REGIONS), sleep=lambda s: None, clock=clock)
    try:
        fake.fail_next("quota", zone="us-central1-a", quota_metric="PREEMPTIBLE_CPUS")
        eng.create(["q-1", "q-2"], Pool.SPOT, 1)
        assert {v["zone"] for v in fake.instances().values()} == {"europe-west1-b"}
        fake.clear_requests()
        eng.create(["q-3"], Pool.SPOT, 1)  # the region's zones are avoided for a while
        assert [r["zone"] for r in inserts(fake)] == ["europe-west1-b"]
    finally:
        eng.close()


def test_rate_limit_and_unavailable_back_off_then_succeed(engine, fake, sleeps):
    fake.fail_next("rate_limit", count=2, op="bulkInsert")
    fake.fail_next("unavailable", count=1, op="bulkInsert")
    engine.create(["r-1", "r-2"], Pool.ON_DEMAND, 1)
    attempts = inserts(fake, "bulkInsert")
    assert len(attempts) == 4 and len({r["query"]["requestId"] for r in attempts}) == 1
    assert len(sleeps) == 3
    assert set(fake.instances()) == {"r-1", "r-2"}


def test_endless_rate_limit_gives_up_with_a_temporary_failure(fake, sleeps):
    engine = GceEngine(config(fake, retry_attempts=3), sleep=sleeps.append)
    fake.fail_next("rate_limit", count=10, op="insert")
    with pytest.raises(CreateFailed) as caught:
        engine.create(["t-1"], Pool.SPOT, 1)
    assert caught.value.stop_growth is False
    assert len(inserts(fake)) == 3 and len(sleeps) == 2


def test_several_vms_go_through_bulk_insert(engine, fake):
    engine.create(["b-1", "b-2", "b-3"], Pool.SPOT, 2)
    [sent] = inserts(fake, "bulkInsert")
    body = sent["json"]
    assert body["count"] == "3" and body["minCount"] == "3"
    assert sorted(body["perInstanceProperties"]) == ["b-1", "b-2", "b-3"]
    props = body["instanceProperties"]
    assert props["machineType"] == "e2-standard-2"
    assert props["scheduling"]["provisioningModel"] == "SPOT"
    assert props["scheduling"]["maxRunDuration"] == {"seconds": "7200"}
    assert props["labels"]["expocloud-run"] == "run-1"
    assert sent["query"]["requestId"]
    assert inserts(fake) == []
    assert wait_until(lambda: sorted(i.name for i in engine.list()) == ["b-1", "b-2", "b-3"], 5)
    assert {i.slots for i in engine.list()} == {2}


def test_late_stockout_is_placed_in_the_next_zone_by_list(engine, fake):
    fake.op_delay = 0.3
    fake.fail_next("stockout", zone=ZONES[0])
    engine.create(["late-1"], Pool.SPOT, 1)  # the operation is still RUNNING
    assert engine.failures() == []

    def placed() -> bool:
        return any(i.name == "late-1" for i in engine.list()) and \
            fake.instances().get("late-1", {}).get("zone") == ZONES[1]

    assert wait_until(placed, 10)
    assert [r["zone"] for r in inserts(fake)] == [ZONES[0], ZONES[1]]
    assert engine.failures() == []


def test_late_quota_becomes_a_failure(engine, fake):
    fake.op_delay = 0.2
    fake.fail_next("quota")
    engine.create(["lq-1", "lq-2"], Pool.ON_DEMAND, 1)
    found: list[CreateFailed] = []

    def failed() -> bool:
        engine.list()
        found.extend(engine.failures())
        return bool(found)

    assert wait_until(failed, 10)
    assert len(found) == 1 and found[0].quota and found[0].names == ["lq-1", "lq-2"]
    assert "CPUS" in found[0].message
    assert engine.failures() == []  # drained


def test_delete_while_insert_runs_deletes_once_created(engine, fake):
    fake.op_delay = 0.3
    engine.create(["p-1"], Pool.SPOT, 1)
    engine.delete("p-1")  # returns at once
    assert wait_until(lambda: engine.list() == [] and "p-1" not in fake.instances(), 10)


def test_list_maps_labels_back(engine, fake):
    engine.create(["l-1"], Pool.SPOT, 3)
    engine.create(["l-2"], Pool.ON_DEMAND, 5)
    assert wait_until(lambda: [i.status for i in engine.list()] == ["RUNNING"] * 2, 5)
    zone = engine.config.zones[0]  # where each runs, which prices it by region
    assert sorted(engine.list(), key=lambda i: i.name) == [
        Instance("l-1", Pool.SPOT, 3, "RUNNING", zone),
        Instance("l-2", Pool.ON_DEMAND, 5, "RUNNING", zone)]
    other = GceEngine(config(fake, run_label="run-2"))
    assert other.list() == []  # another run's engine does not see them


def test_the_round_s_listing_carries_only_what_a_round_needs(engine, fake):
    """Every round lists the run's VMs: by its label, and with a field mask, so 1,000 VMs do
    not each bring their startup script and metadata along. The fake cuts its answer to the
    mask as Compute does; what the engine makes of it is unchanged."""
    engine.create(["m-1"], Pool.SPOT, 2)
    assert wait_until(lambda: [i.status for i in engine.list()] == ["RUNNING"], 5)
    fake.clear_requests()
    assert engine.list() == [Instance("m-1", Pool.SPOT, 2, "RUNNING", ZONES[0])]
    (listing,) = [r for r in fake.requests if r["op"] == "aggregatedList"]
    assert listing["field_mask"] == "items/*/instances(name,id,status,labels),nextPageToken"
    assert 'labels.expocloud-run = "run-1"' in listing["query"]["filter"]
    full = fake.handle("GET", f"/compute/v1/projects/{PROJECT}/aggregated/instances", None)[1]
    lean = fake.handle("GET", f"/compute/v1/projects/{PROJECT}/aggregated/instances", None,
                       {"X-Goog-FieldMask": listing["field_mask"]})[1]
    (vm,) = [i for scoped in lean["items"].values() for i in scoped.get("instances", [])]
    assert set(vm) == {"name", "id", "status", "labels"}
    assert len(json.dumps(lean)) < len(json.dumps(full)) / 2


def test_the_fake_refuses_a_field_mask_that_does_not_parse(fake):
    status, body = fake.handle("GET", f"/compute/v1/projects/{PROJECT}/aggregated/instances"
                               "?fields=items(name", None)
    assert status == 400 and "field selection" in body["error"]["message"]


def test_preempted_reports_once(engine, fake):
    engine.create(["pre-1", "pre-2"], Pool.SPOT, 1)
    assert wait_until(lambda: fake.instances().get("pre-1", {}).get("status") == "RUNNING", 5)
    assert engine.preempted() == set()
    fake.preempt("pre-1")
    assert engine.preempted() == {"pre-1"}
    assert engine.preempted() == set()
    assert wait_until(lambda: [i.name for i in engine.list()] == ["pre-2"], 5)


def test_close_deletes_every_vm_of_the_run(engine, fake):
    engine.create(["c-1", "c-2"], Pool.SPOT, 1)
    engine.create(["c-3"], Pool.ON_DEMAND, 1)
    stray = compute_v1.Instance(
        name="stray", machine_type=f"zones/{ZONES[2]}/machineTypes/e2-small",
        labels={"expocloud-run": "run-1"},
        disks=[compute_v1.AttachedDisk(boot=True, initialize_params=compute_v1.AttachedDiskInitializeParams(
            source_image="projects/debian-cloud/global/images/family/debian-12"))],
        network_interfaces=[compute_v1.NetworkInterface(network="global/networks/default")])
    client(fake).insert_unary(project=PROJECT, zone=ZONES[2], instance_resource=stray)
    # close() finds a VM it did not create by its label: once a listing shows it (its own
    # are deleted by name, listed or not)
    assert wait_until(lambda: "stray" in [f["name"] for f in find_instances(
        PROJECT, ZONES, endpoint=fake.endpoint, run_label="run-1")], 5)
    engine.close()
    assert fake.instances() == {}
    deletes = len([r for r in fake.requests if r["op"] == "delete"])
    engine.close()  # twice is fine, and deletes nothing again (an atexit hook may call it)
    assert len([r for r in fake.requests if r["op"] == "delete"]) == deletes
    with pytest.raises(RuntimeError):
        engine.create(["c-4"], Pool.SPOT, 1)


def test_metadata_values_are_never_logged(fake, caplog):
    caplog.set_level(logging.DEBUG)
    engine = GceEngine(config(fake), sleep=lambda _s: None)
    fake.fail_next("rate_limit", op="insert")
    fake.fail_next("stockout", zone=ZONES[0])
    engine.create(["m-1"], Pool.SPOT, 1)
    engine.delete("m-1")
    engine.close()
    assert SECRET not in caplog.text


def test_find_and_delete_instances_for_cleanup(fake):
    for run, names in (("run-1", ["f-1", "f-2"]), ("run-2", ["g-1"])):
        GceEngine(config(fake, run_label=run, zones=ZONES[:2])).create(names, Pool.SPOT, 1)
    plain = compute_v1.Instance(
        name="not-ours", machine_type=f"zones/{ZONES[0]}/machineTypes/e2-small",
        disks=[compute_v1.AttachedDisk(boot=True, initialize_params=compute_v1.AttachedDiskInitializeParams(
            source_image="projects/debian-cloud/global/images/family/debian-12"))],
        network_interfaces=[compute_v1.NetworkInterface(network="global/networks/default")])
    client(fake).insert_unary(project=PROJECT, zone=ZONES[0], instance_resource=plain)
    assert wait_until(lambda: len(find_instances(PROJECT, ZONES, endpoint=fake.endpoint)) == 3,
                      5)  # once listed
    found = find_instances(PROJECT, ZONES, endpoint=fake.endpoint)
    assert sorted(f["name"] for f in found) == ["f-1", "f-2", "g-1"]
    assert {f["labels"]["expocloud-run"] for f in found} == {"run-1", "run-2"}
    assert all(f["zone"] in ZONES and f["created"] and f["status"] for f in found)
    one = find_instances(PROJECT, ZONES, endpoint=fake.endpoint, run_label="run-2")
    assert [f["name"] for f in one] == ["g-1"]
    assert sorted(f["name"] for f in find_instances(PROJECT, [], endpoint=fake.endpoint)) == \
        ["f-1", "f-2", "g-1"]  # no zones: every zone
    assert sorted(delete_instances(PROJECT, found, endpoint=fake.endpoint)) == ["f-1", "f-2", "g-1"]
    assert list(fake.instances()) == ["not-ours"]


def test_bare_network_names_become_urls_in_both_request_bodies(fake):
    """GCE refuses a bare name ("The URL is malformed"): a subnetwork name is completed in the
    region of the VM's zone, a network name to global/networks/NAME."""
    engine = GceEngine(config(fake, network="my-vpc", subnetwork="my-subnet"),
                       sleep=lambda _s: None)
    try:
        engine.create(["n-1"], Pool.SPOT, 1)
        engine.create(["n-2", "n-3"], Pool.SPOT, 1)
        [single] = inserts(fake)
        [bulk] = inserts(fake, "bulkInsert")
        for nics in (single["json"]["networkInterfaces"],
                     bulk["json"]["instanceProperties"]["networkInterfaces"]):
            assert nics[0]["network"] == "global/networks/my-vpc"
            assert nics[0]["subnetwork"] == "projects/proj/regions/us-central1/subnetworks/my-subnet"
        assert wait_until(lambda: len(engine.list()) == 3, 5)
    finally:
        engine.close()
    # a subnetwork with the network left at its default: the subnetwork's network, not default
    engine = GceEngine(config(fake, subnetwork="my-subnet"), sleep=lambda _s: None)
    try:
        engine.create(["n-4"], Pool.SPOT, 1)
        nic = inserts(fake)[-1]["json"]["networkInterfaces"][0]
        assert "network" not in nic and nic["subnetwork"].endswith("/subnetworks/my-subnet")
    finally:
        engine.close()
    with pytest.raises(ValueError, match="is in region europe-west1"):
        config(fake, subnetwork="projects/proj/regions/europe-west1/subnetworks/s")


def test_the_fake_refuses_a_bare_network_name_as_gce_does(fake):
    bare = compute_v1.Instance(
        name="bare", machine_type=f"zones/{ZONES[0]}/machineTypes/e2-small",
        disks=[compute_v1.AttachedDisk(boot=True, initialize_params=compute_v1.AttachedDiskInitializeParams(
            source_image="projects/debian-cloud/global/images/family/debian-12"))],
        network_interfaces=[compute_v1.NetworkInterface(network="default", subnetwork="sub")])
    with pytest.raises(Exception, match="networkInterfaces\\[0\\].network': 'default'. The URL is "
                                        "malformed"):
        client(fake).insert_unary(project=PROJECT, zone=ZONES[0], instance_resource=bare)
    assert fake.instances() == {}


def test_config_rejects_an_uncapped_vm_life(fake):
    with pytest.raises(ValueError, match="max_run_duration_s"):
        config(fake, max_run_duration_s=0)
    with pytest.raises(ValueError, match="run_label"):
        config(fake, run_label="Run 1")


T4 = Shape("n1-standard-4", "nvidia-tesla-t4", 1, disk_gb=120)


def test_a_gpu_shape_gets_what_the_api_requires(engine, fake):
    """Accelerators (a zonal URL in an insert, a bare name in a bulk insert), no live
    migration even on-demand, the GPU image with the driver flag, the shape's disk."""
    engine.create(["g-1"], Pool.ON_DEMAND, 4, shape=T4)
    body = inserts(fake)[0]["json"]
    assert body["machineType"] == f"zones/{ZONES[0]}/machineTypes/n1-standard-4"
    assert body["guestAccelerators"] == [{
        "acceleratorType": f"zones/{ZONES[0]}/acceleratorTypes/nvidia-tesla-t4",
        "acceleratorCount": 1}]
    assert body["scheduling"]["onHostMaintenance"] == "TERMINATE"
    assert body["scheduling"]["provisioningModel"] == "STANDARD"
    disk = body["disks"][0]["initializeParams"]
    assert disk["sourceImage"] == GPU_IMAGE and disk["diskSizeGb"] == "120"
    assert items(body)["install-nvidia-driver"] == "True"
    assert json.loads(items(body)["expocloud-worker"])["slots"] == 4
    engine.create(["g-2", "g-3"], Pool.SPOT, 4, shape=T4)
    props = inserts(fake, "bulkInsert")[0]["json"]["instanceProperties"]
    assert props["guestAccelerators"] == [{"acceleratorType": "nvidia-tesla-t4",
                                           "acceleratorCount": 1}]
    assert set(fake.instances()) == {"g-1", "g-2", "g-3"}


def test_machine_types_that_come_with_gpus_and_plain_shapes(engine, fake):
    engine.create(["l-1"], Pool.ON_DEMAND, 4, shape=Shape("g2-standard-4", "nvidia-l4", 1))
    engine.create(["d-1"], Pool.ON_DEMAND, 2, shape=Shape("e2-standard-2", disk_gb=200))
    l4, disk = (r["json"] for r in inserts(fake))
    assert "guestAccelerators" not in l4 and l4["scheduling"]["onHostMaintenance"] == "TERMINATE"
    assert l4["disks"][0]["initializeParams"]["diskSizeGb"] == "50"  # the GPU image's size
    assert disk["disks"][0]["initializeParams"] == {
        "sourceImage": "projects/debian-cloud/global/images/family/debian-12",
        "diskSizeGb": "200", "diskType": f"zones/{ZONES[0]}/diskTypes/pd-balanced",
        "labels": disk["labels"]}
    assert disk["scheduling"]["onHostMaintenance"] == "MIGRATE"
    assert "install-nvidia-driver" not in items(disk)


def test_a_refused_gpu_stops_only_its_shape_and_says_so(engine, fake):
    with pytest.raises(CreateFailed) as info:
        engine.create(["x-1"], Pool.SPOT, 2,
                      shape=Shape("e2-standard-2", "nvidia-tesla-t4", 1))
    assert info.value.stop_growth and info.value.shape.machine_type == "e2-standard-2"
    assert "not supported with machine type e2-standard-2" in info.value.message


def test_every_request_the_engine_makes_passes_the_discovery_document(fake):
    """Spot and on-demand VMs, plain and with a GPU shape, one by insert and several by
    bulkInsert while the operations still run (operations.get); a name taken (instances.get:
    is it ours?), preemptions (operations.list), a delete, the cleanup's zonal list and
    close() (aggregatedList, operations.wait): the fake checked each request against Google's
    discovery document and found nothing wrong."""
    fake.op_delay = 0.2
    engine = GceEngine(config(fake), sleep=lambda _s: None)
    engine.create(["v-1"], Pool.SPOT, 2)
    engine.create(["v-2", "v-3"], Pool.ON_DEMAND, 4)
    engine.create(["v-4"], Pool.ON_DEMAND, 4, shape=T4)
    engine.create(["v-5", "v-6"], Pool.SPOT, 4, shape=T4)
    assert wait_until(lambda: [i.status for i in engine.list()] == ["RUNNING"] * 6, 10)
    engine.create(["v-1"], Pool.SPOT, 2)
    engine.preempted()
    engine.delete("v-2")
    assert len(find_instances(PROJECT, ZONES, endpoint=fake.endpoint)) == 5
    engine.close()
    requests = fake.requests
    # every instance and operation method the fake serves (the catalogue's are the doctor's)
    assert {r["op"] for r in requests} == {"insert", "bulkInsert", "get", "list", "delete",
                                          "aggregatedList", "operations.get",
                                          "operations.wait", "operations.list"}
    assert {r["op"] for r in requests} <= set(DISCOVERY_IDS)
    assert [(r["op"], r["problems"]) for r in requests if r["problems"]] == []
    inserted = [r["json"] for r in requests if r["op"] == "insert"]
    assert {b["scheduling"]["provisioningModel"] for b in inserted} == {"SPOT", "STANDARD"}
    assert any("guestAccelerators" in b for b in inserted)
    bulk = [r["json"]["instanceProperties"] for r in requests if r["op"] == "bulkInsert"]
    assert [("guestAccelerators" in p, p["scheduling"]["provisioningModel"]) for p in bulk] == [
        (False, "STANDARD"), (True, "SPOT")]
