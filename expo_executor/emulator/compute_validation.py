"""What the fake Compute Engine refuses in an instance, beyond what the discovery document can
say: names, machine types, boot disks, networks, labels, metadata, Spot scheduling and GPUs.

Each check answers the real API's 400 (or 404 for an unknown accelerator type), so a client
that would be refused by Google is refused here, with the field the real error names.
"""

from __future__ import annotations

import re
import unicodedata

from expo_executor.emulator.api_error import ApiError, int_field
from expo_executor.emulator.catalogue import GPU_MACHINE_FAMILIES

NAME_RE = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
METADATA_KEY_RE = re.compile(r"[a-zA-Z0-9_-]{1,128}")
METADATA_MAX_BYTES = 512 * 1024
# Google's own words for a label that breaks its rules (a key: \p{Ll}\p{Lo} first, then
# [\p{Ll}\p{Lo}\p{N}_-]{0,62}; a value: [\p{Ll}\p{Lo}\p{N}_-]{0,63}): the fake's copy of
# the rules, apart from the executor's (gcp/labels.py), so that each checks the other.
LABEL_KEY_WORDS = ("The key must start with a lowercase character, can only contain lowercase "
                   "letters, numeric characters, underscores and dashes. The key can be at most "
                   "63 characters long. International characters are allowed.")
LABEL_VALUE_WORDS = ("The value can only contain lowercase letters, numeric characters, "
                     "underscores and dashes. The value can be at most 63 characters long. "
                     "International characters are allowed.")


def _label_chars(text: str) -> bool:
    return all(c in "_-" or unicodedata.category(c) in ("Ll", "Lo")
               or unicodedata.category(c).startswith("N") for c in text)


def _validate_labels(labels: dict, field: str) -> None:
    """Labels of an instance or a disk (``field``: where the body holds them), as Google
    checks them."""
    if len(labels) > 64:
        raise ApiError(400, "invalid", f"Invalid value for field '{field}': ''. Resource has "
                                       f"{len(labels)} labels, more than the limit of 64.")
    for key, value in labels.items():
        key, value = str(key), str(value)
        if not (0 < len(key) <= 63 and unicodedata.category(key[0]) in ("Ll", "Lo")
                and _label_chars(key)):
            raise ApiError(400, "invalid", f"Invalid value for field '{field}': ''. Label key "
                                           f"'{key}' violates format constraints. "
                                           f"{LABEL_KEY_WORDS}")
        if not (len(value) <= 63 and _label_chars(value)):
            raise ApiError(400, "invalid", f"Invalid value for field '{field}': ''. Label "
                                           f"value '{value}' violates format constraints. "
                                           f"{LABEL_VALUE_WORDS}")


def _validate_metadata(metadata: dict) -> None:
    items = metadata.get("items") or []
    keys = [item.get("key", "") for item in items]
    if len(set(keys)) != len(keys):
        raise ApiError(400, "invalid", "Invalid value for field 'resource.metadata': duplicate keys.")
    for key in keys:
        if not METADATA_KEY_RE.fullmatch(key):
            raise ApiError(400, "invalid", f"Invalid value for field 'resource.metadata': "
                                           f"key '{key}'.")
    size = sum(len(item.get("key", "")) + len(item.get("value", "")) for item in items)
    if size > METADATA_MAX_BYTES:
        raise ApiError(400, "invalid", "Metadata exceeds the 512 KB limit.")


def _validate_scheduling(scheduling: dict) -> None:
    model = scheduling.get("provisioningModel", "STANDARD")
    if model not in ("STANDARD", "SPOT"):
        raise ApiError(400, "invalid", f"Invalid value for field "
                                       f"'resource.scheduling.provisioningModel': '{model}'.")
    spot = model == "SPOT" or scheduling.get("preemptible") is True
    if spot and scheduling.get("automaticRestart") is True:
        raise ApiError(400, "invalid", "Invalid value for field 'resource.scheduling."
                                       "automaticRestart': 'true'. Spot and preemptible "
                                       "instances cannot be automatically restarted.")
    if spot and scheduling.get("onHostMaintenance", "TERMINATE") != "TERMINATE":
        raise ApiError(400, "invalid", "Invalid value for field 'resource.scheduling."
                                       "onHostMaintenance': Spot and preemptible instances "
                                       "must use TERMINATE.")
    action = scheduling.get("instanceTerminationAction")
    if action not in (None, "STOP", "DELETE"):
        raise ApiError(400, "invalid", f"Invalid value for field 'resource.scheduling."
                                       f"instanceTerminationAction': '{action}'.")
    if "maxRunDuration" in scheduling:
        seconds = int_field(scheduling["maxRunDuration"].get("seconds", 0),
                            "resource.scheduling.maxRunDuration.seconds")
        if not 30 <= seconds <= 120 * 86400:
            raise ApiError(400, "invalid", f"Invalid value for field 'resource.scheduling."
                                           f"maxRunDuration': '{seconds}s'.")
        if action is None:
            raise ApiError(400, "invalid", "Invalid value for field 'resource.scheduling."
                                           "instanceTerminationAction': ''. "
                                           "instanceTerminationAction must be specified when "
                                           "maxRunDuration or terminationTime is set.")


def _validate_machine_type(machine_type: str, zone: str, bulk: bool) -> str:
    """The machine type's name; insert wants a (partial) URL, bulkInsert a bare name."""
    if not machine_type:
        raise ApiError(400, "required", "Required field 'resource.machineType' not specified")
    if bulk:
        if "/" in machine_type:
            raise ApiError(400, "invalid", f"Invalid value for field 'instanceProperties."
                                           f"machineType': '{machine_type}'. This field only "
                                           "accepts a machine type name.")
        return machine_type
    match = re.search(r"(?:^|/)zones/([^/]+)/machineTypes/([^/]+)$", machine_type)
    if match is None:
        raise ApiError(400, "invalid", f"Invalid value for field 'resource.machineType': "
                                       f"'{machine_type}'. The URL is malformed.")
    if match.group(1) != zone:
        raise ApiError(400, "invalid", f"Invalid value for field 'resource.machineType': "
                                       f"'{machine_type}'. Machine type zone must match the "
                                       f"instance zone '{zone}'.")
    return match.group(2)


# Accelerator types of the fake's zones, with the counts N1 takes and its most vCPUs per count;
# L4 and A100 exist but come only with their machine types (g2, a2), never as guest accelerators.
N1_ACCELERATORS = {"nvidia-tesla-t4": {1: 24, 2: 48, 4: 96},
                   "nvidia-tesla-v100": {1: 12, 2: 24, 4: 48, 8: 96},
                   "nvidia-tesla-p4": {1: 24, 2: 48, 4: 96},
                   "nvidia-tesla-p100": {1: 16, 2: 32, 4: 96}}
ACCELERATOR_TYPES = frozenset({*N1_ACCELERATORS, "nvidia-l4", "nvidia-tesla-a100"})


def _accelerator_name(value: str, zone: str, bulk: bool, field: str) -> str:
    """The accelerator type's name; insert wants a (partial) URL, bulkInsert a bare name."""
    if bulk:
        if "/" in value:
            raise ApiError(400, "invalid", f"Invalid value for field '{field}': '{value}'. This "
                                           "field only accepts an accelerator type name.")
        return value
    match = re.search(r"(?:^|/)zones/([^/]+)/acceleratorTypes/([^/]+)$", value)
    if match is None:
        raise ApiError(400, "invalid", f"Invalid value for field '{field}': '{value}'. The URL "
                                       "is malformed.")
    if match.group(1) != zone:
        raise ApiError(400, "invalid", f"Invalid value for field '{field}': '{value}'. "
                                       f"Accelerator type zone must match the instance zone "
                                       f"'{zone}'.")
    return match.group(2)


def _validate_accelerators(body: dict, zone: str, machine: str, bulk: bool) -> None:
    """GPUs only where Compute Engine has them: known types, on N1 in its counts and vCPU
    limits; and no live migration for a VM with GPUs (its own or its machine type's)."""
    accelerators = body.get("guestAccelerators") or []
    for index, acc in enumerate(accelerators):
        field = f"resource.guestAccelerators[{index}].acceleratorType"
        name = _accelerator_name(acc.get("acceleratorType", ""), zone, bulk, field)
        count = int_field(acc.get("acceleratorCount", 0),
                          f"resource.guestAccelerators[{index}].acceleratorCount")
        if name not in ACCELERATOR_TYPES:
            raise ApiError(404, "notFound", f"The resource 'projects/-/zones/{zone}/"
                                            f"acceleratorTypes/{name}' was not found")
        family = machine.split("-", 1)[0]
        limits = N1_ACCELERATORS.get(name, {}) if family == "n1" else {}
        if not limits:
            raise ApiError(400, "invalid", f"Invalid value for field '{field}': '{name}'. "
                                           f"Accelerator type {name} is not supported with "
                                           f"machine type {machine}.")
        vcpus = re.fullmatch(r"n1-[a-z]+-(\d+)", machine)
        if count not in limits or (vcpus and int(vcpus.group(1)) > limits[count]):
            raise ApiError(400, "invalid", f"Invalid value for field 'resource.guestAccelerators"
                                           f"[{index}].acceleratorCount': '{count}'. "
                                           f"{machine} cannot take {count} x {name}.")
    gpus = bool(accelerators) or machine.split("-", 1)[0] in GPU_MACHINE_FAMILIES
    maintenance = (body.get("scheduling") or {}).get("onHostMaintenance", "MIGRATE")
    if gpus and maintenance != "TERMINATE":
        raise ApiError(400, "invalid", "Invalid value for field 'resource.scheduling."
                                       "onHostMaintenance': 'MIGRATE'. Instances with guest "
                                       "accelerators do not support live migration.")


_API_ROOT = r"(?:https://www\.googleapis\.com/compute/v1/)?(?:projects/[^/]+/)?"
_NETWORK_URL = re.compile(rf"{_API_ROOT}global/networks/[^/]+")
_SUBNETWORK_URL = re.compile(rf"{_API_ROOT}regions/(?P<region>[^/]+)/subnetworks/[^/]+")


def _validate_network_interfaces(body: dict, zone: str) -> None:
    """Networks and subnetworks are URLs, full or partial: a bare name is malformed (what the
    real API answers), and a subnetwork must be in the VM's region."""
    for i, nic in enumerate(body.get("networkInterfaces") or []):
        for key, pattern in (("network", _NETWORK_URL), ("subnetwork", _SUBNETWORK_URL)):
            value = nic.get(key)
            if value is not None and not pattern.fullmatch(value):
                raise ApiError(400, "invalid", f"Invalid value for field 'resource."
                                               f"networkInterfaces[{i}].{key}': '{value}'. "
                                               "The URL is malformed.")
        match = _SUBNETWORK_URL.fullmatch(nic.get("subnetwork") or "")
        if match and match["region"] != zone.rsplit("-", 1)[0]:
            raise ApiError(400, "invalid", f"Invalid value for field 'resource."
                                           f"networkInterfaces[{i}].subnetwork': "
                                           f"'{nic['subnetwork']}'. The subnetwork must be in "
                                           "the instance's region.")


def validate_instance(body: dict, zone: str, bulk: bool = False) -> str:
    """Reject what the real API rejects; return the machine type's name."""
    name = body.get("name", "")
    if not NAME_RE.fullmatch(name or ""):
        raise ApiError(400, "invalid", f"Invalid value for field 'resource.name': '{name}'. "
                                       "Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,61}"
                                       "[a-z0-9])?)'")
    machine = _validate_machine_type(body.get("machineType", ""), zone, bulk)
    disks = body.get("disks") or []
    boot = [d for d in disks if d.get("boot")]
    if len(boot) != 1 or not (boot[0].get("source")
                               or (boot[0].get("initializeParams") or {}).get("sourceImage")):
        raise ApiError(400, "invalid", "Invalid value for field 'resource.disks': exactly one "
                                       "boot disk with a source or initializeParams.sourceImage "
                                       "is required.")
    if not body.get("networkInterfaces"):
        raise ApiError(400, "invalid", "Invalid value for field 'resource.networkInterfaces': "
                                       "At least one network interface is required.")
    _validate_network_interfaces(body, zone)
    root = "resource.instanceProperties" if bulk else "resource"
    _validate_labels(body.get("labels") or {}, f"{root}.labels")
    for i, disk in enumerate(disks):
        _validate_labels((disk.get("initializeParams") or {}).get("labels") or {},
                         f"{root}.disks[{i}].initializeParams.labels")
    _validate_metadata(body.get("metadata") or {})
    _validate_scheduling(body.get("scheduling") or {})
    _validate_accelerators(body, zone, machine, bulk)
    return machine
