"""Requests checked against Google's Compute v1 discovery document, on plain dict bodies.

The valid bodies are what GceEngine sent the fake through the real client (an on-demand VM with
a GPU by insert, two Spot VMs by bulkInsert); each test breaks one thing in a copy and expects
the message Google's front end gives for it.
"""

from __future__ import annotations

import copy
import json

import pytest

from expo_executor.emulator import discovery
from expo_executor.emulator.compute import DISCOVERY_IDS

INSERT = "compute.instances.insert"
BULK = "compute.instances.bulkInsert"
PATH = {"project": "proj", "zone": "us-central1-a"}

SCHEDULING = {"provisioningModel": "STANDARD", "onHostMaintenance": "TERMINATE",
              "instanceTerminationAction": "DELETE", "automaticRestart": False,
              "maxRunDuration": {"seconds": "7200"}}
NIC = {"accessConfigs": [{"name": "External NAT", "type": "ONE_TO_ONE_NAT"}],
       "network": "global/networks/default"}
ACCOUNTS = [{"email": "default", "scopes": ["https://www.googleapis.com/auth/cloud-platform"]}]
METADATA = {"items": [{"key": "startup-script", "value": "#!/bin/sh\necho boot"},
                      {"key": "expocloud-worker", "value": '{"v":1,"slots":4}'},
                      {"key": "install-nvidia-driver", "value": "True"}]}
GPU_INSERT = {
    "name": "g-1", "networkInterfaces": [NIC], "metadata": METADATA,
    "disks": [{"boot": True, "type": "PERSISTENT", "autoDelete": True,
               "initializeParams": {"sourceImage": "projects/p/global/images/gpu-worker",
                                    "diskType": "zones/us-central1-a/diskTypes/pd-balanced",
                                    "diskSizeGb": "120"}}],
    "machineType": "zones/us-central1-a/machineTypes/n1-standard-4",
    "serviceAccounts": ACCOUNTS, "scheduling": SCHEDULING,
    "guestAccelerators": [{
        "acceleratorType": "zones/us-central1-a/acceleratorTypes/nvidia-tesla-t4",
        "acceleratorCount": 1}],
    "labels": {"expocloud-pool": "on-demand", "expocloud-run": "run-1", "expocloud-slots": "4",
               "team": "sweeps"},
}
SPOT_BULK = {
    "count": "2", "minCount": "2",
    "perInstanceProperties": {"b-1": {"name": "b-1"}, "b-2": {"name": "b-2"}},
    "instanceProperties": {
        "networkInterfaces": [NIC], "metadata": METADATA, "machineType": "e2-standard-2",
        "disks": [{"boot": True, "type": "PERSISTENT", "autoDelete": True,
                   "initializeParams": {"sourceImage": "projects/debian-cloud/global/images/"
                                                       "family/debian-12",
                                        "diskType": "pd-balanced", "diskSizeGb": "20"}}],
        "serviceAccounts": ACCOUNTS, "scheduling": {**SCHEDULING, "provisioningModel": "SPOT"},
        "labels": {"expocloud-run": "run-1", "expocloud-pool": "spot", "expocloud-slots": "2"}},
}


def insert_with(**changes: object) -> dict:
    """A copy of GPU_INSERT with these top-level fields set."""
    body = copy.deepcopy(GPU_INSERT)
    body.update(changes)
    return body


def test_the_pinned_document_is_the_one_read() -> None:
    document = discovery.document()
    assert document["revision"] == "20261106" and len(document["schemas"]) == 1075
    assert discovery.method(INSERT)["request"] == {"$ref": "Instance"}


def test_what_the_engine_sends_is_valid() -> None:
    assert discovery.check_request(INSERT, PATH, {"requestId": "0b9f"}, GPU_INSERT) == []
    assert discovery.check_request(BULK, PATH, {"requestId": "0b9f"}, SPOT_BULK) == []


def test_an_unknown_nested_field_is_refused_where_it_is() -> None:
    body = insert_with(scheduling={**SCHEDULING, "preemptable": True})
    assert discovery.check_body(INSERT, body) == [
        'Invalid JSON payload received. Unknown name "preemptable" at '
        "'instance_resource.scheduling': Cannot find field."]
    body = insert_with(disks=[{**GPU_INSERT["disks"][0], "initializeParams": {"sizeGb": "9"}}])
    assert discovery.check_body(INSERT, body) == [
        'Invalid JSON payload received. Unknown name "sizeGb" at '
        "'instance_resource.disks[0].initialize_params': Cannot find field."]


@pytest.mark.parametrize("field, value, path, proto_type, shown", [
    ("automaticRestart", "false", "scheduling.automatic_restart", "TYPE_BOOL", '"false"'),
    ("maxRunDuration", {"seconds": "2h"}, "scheduling.max_run_duration.seconds", "TYPE_INT64",
     '"2h"'),
    ("maxRunDuration", "7200s", "scheduling.max_run_duration",
     "type.googleapis.com/google.cloud.compute.v1.Duration", '"7200s"'),
])
def test_a_value_of_the_wrong_type_is_refused(field: str, value: object, path: str,
                                              proto_type: str, shown: str) -> None:
    body = insert_with(scheduling={**SCHEDULING, field: value})
    assert discovery.check_body(INSERT, body) == [
        f"Invalid value at 'instance_resource.{path}' ({proto_type}), {shown}"]


def test_int32_wants_a_number_int64_also_takes_digits() -> None:
    accelerator = {**GPU_INSERT["guestAccelerators"][0], "acceleratorCount": "1"}
    assert discovery.check_body(INSERT, insert_with(guestAccelerators=[accelerator])) == [
        "Invalid value at 'instance_resource.guest_accelerators[0].accelerator_count' "
        '(TYPE_INT32), "1"']
    for seconds in ("7200", 7200):
        body = insert_with(scheduling={**SCHEDULING, "maxRunDuration": {"seconds": seconds}})
        assert discovery.check_body(INSERT, body) == []
    body = insert_with(scheduling={**SCHEDULING, "maxRunDuration": {"nanos": 2**31}})
    assert discovery.check_body(INSERT, body) == [
        "Invalid value at 'instance_resource.scheduling.max_run_duration.nanos' (TYPE_INT32), "
        "2147483648"]


def test_an_enum_value_the_api_does_not_know_is_refused() -> None:
    body = insert_with(scheduling={**SCHEDULING, "provisioningModel": "SPOTT"})
    assert discovery.check_body(INSERT, body) == [
        "Invalid value at 'instance_resource.scheduling.provisioning_model' "
        "(type.googleapis.com/google.cloud.compute.v1.Scheduling.ProvisioningModel), \"SPOTT\""]


def test_maps_take_any_key_and_check_their_values() -> None:
    assert discovery.check_body(INSERT, insert_with(labels={"any-key": "v", "k": ""})) == []
    assert discovery.check_body(INSERT, insert_with(labels={"a": "b", "slots": 2})) == [
        "Invalid value at 'instance_resource.labels[1].value' (TYPE_STRING), 2"]
    bulk = copy.deepcopy(SPOT_BULK)
    bulk["perInstanceProperties"]["b-2"] = {"name": "b-2", "hostname": "b2.example"}
    assert discovery.check_body(BULK, bulk) == []
    bulk["perInstanceProperties"]["b-2"]["zone"] = "us-central1-a"
    assert discovery.check_body(BULK, bulk) == [
        'Invalid JSON payload received. Unknown name "zone" at '
        "'bulk_insert_instance_resource_resource.per_instance_properties[1].value': "
        "Cannot find field."]


def test_lists_and_messages_are_not_confused() -> None:
    assert discovery.check_body(INSERT, insert_with(scheduling=[SCHEDULING])) == [
        'Invalid JSON payload received. Unknown name "scheduling" at \'instance_resource\': '
        "Proto field is not repeating, cannot start list."]
    assert discovery.check_body(INSERT, insert_with(disks=GPU_INSERT["disks"][0])) == [
        f"Invalid value at 'instance_resource.disks' "
        f"(type.googleapis.com/google.cloud.compute.v1.AttachedDisk), "
        f"{json.dumps(GPU_INSERT['disks'][0])}"]
    assert discovery.check_body(INSERT, [GPU_INSERT]) == [
        'Invalid JSON payload received. Unknown name "": Root element must be a message.']


def test_output_only_fields_and_nulls_are_accepted() -> None:
    body = insert_with(id="5127", kind="compute#instance", status="RUNNING",
                       creationTimestamp="2026-11-06T10:00:00.000-08:00", description=None)
    assert discovery.check_body(INSERT, body) == []


def test_query_parameters_are_known_and_typed() -> None:
    listing = "compute.instances.list"
    assert discovery.check_query(listing, {"filter": "labels.a:*", "maxResults": "500",
                                           "pageToken": "t", "prettyPrint": "false"}) == []
    assert discovery.check_query(listing, {"maxResults": "many"}) == [
        "Invalid value at 'max_results' (TYPE_UINT32), \"many\""]
    assert discovery.check_query(listing, {"maxResults": "-1"}) == [
        "Invalid value at 'max_results' (TYPE_UINT32), -1"]
    assert discovery.check_query("compute.instances.aggregatedList",
                                 {"includeAllScopes": "yes"}) == [
        "Invalid value at 'include_all_scopes' (TYPE_BOOL), \"yes\""]
    # a path parameter is no query parameter; returnPartialSuccess is not in this revision
    assert discovery.check_query(listing, {"zone": "us-central1-a",
                                           "returnPartialSuccess": "true"}) == [
        f'Invalid JSON payload received. Unknown name "{name}": Cannot bind query parameter. '
        f"Field '{name}' could not be found in request message."
        for name in ("zone", "returnPartialSuccess")]


def test_path_parameters_match_their_pattern() -> None:
    get = "compute.instances.get"
    assert discovery.check_path(get, {**PATH, "instance": "vm-1"}) == []
    assert discovery.check_path(get, {**PATH, "instance": "VM_1"}) == [
        "Invalid value for field 'instance': 'VM_1'. Must be a match of regex "
        "'[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?|[1-9][0-9]{0,19}'"]


def test_every_method_the_fake_serves_is_in_the_document() -> None:
    for method_id in DISCOVERY_IDS.values():
        assert discovery.method(method_id)["id"] == method_id
