"""The request bodies of the VMs the GCE engine creates: a single insert's ``Instance`` (machine,
disk and accelerator types as zonal URLs) and a bulk insert's ``InstanceProperties`` (bare
names: URLs are refused there), with the labels of the bill on the VM and on its boot disk, the
worker's metadata (its ``slots`` set per VM), Spot or standard scheduling capped at
``max_run_duration``, the boot disk, GPUs, the network interface and the service account.
"""

from __future__ import annotations

import json
from typing import Any

from expo_executor.core.scheduler import Pool
from expo_executor.core.shapes import comes_with_gpus
from expo_executor.engines.gce.compute_lib import compute_types
from expo_executor.engines.gce.config import (GPU_DRIVER_ATTRIBUTE, GPU_LABEL,
                                              MACHINE_LABEL, POOL_LABEL, POOL_LABEL_VALUES,
                                              RUN_LABEL, SLOTS_LABEL, WORKFLOW_LABEL, Ask,
                                              GceConfig)
from expo_executor.engines.gce.references import network_interface
from expo_executor.gcp.labels import as_value
from expo_executor.protocol.keys import WORKER_ATTRIBUTE


class VmBodies:
    """Builds what one create call sends, for ``config``'s run."""

    def __init__(self, config: GceConfig) -> None:
        self.config = config

    def machine(self, ask: Ask) -> str:
        return ask.shape.machine_type if ask.shape else self.config.machine_types[ask.pool]

    def what(self, ask: Ask) -> str:
        """The asked-for machine, for a message: the shape, or the pool's machine type."""
        return ask.shape.describe() if ask.shape else self.machine(ask)

    def _labels(self, ask: Ask) -> dict[str, str]:
        """The VM's and its boot disk's labels: the user's (the run's, then its rule's, whose
        shape carries its rule's name too), the run, the pool, the slots, the workflow and the
        machine shape (GCE does not copy an instance's labels to its disk: both get them)."""
        shape = ask.shape
        labels = {**self.config.labels, **dict(shape.labels if shape else ()),
                  RUN_LABEL: self.config.run_label, POOL_LABEL: POOL_LABEL_VALUES[ask.pool],
                  SLOTS_LABEL: str(ask.slots), MACHINE_LABEL: as_value(self.machine(ask))}
        if self.config.workflow_label:
            labels[WORKFLOW_LABEL] = self.config.workflow_label
        if shape is not None and shape.gpus and shape.gpu_type:
            labels[GPU_LABEL] = as_value(f"{shape.gpu_count}-{shape.gpu_type}")
        return labels

    def _metadata(self, ask: Ask) -> Any:
        compute = compute_types()

        values = worker_metadata(self.config.metadata, ask.slots)
        if ask.gpus:
            values[GPU_DRIVER_ATTRIBUTE] = "True"
        return compute.Metadata(items=[compute.Items(key=k, value=v)
                                       for k, v in values.items()])

    def _scheduling(self, ask: Ask) -> Any:
        """Spot or standard, capped at ``max_run_duration``. A VM with GPUs cannot live-migrate:
        the API wants TERMINATE on host maintenance for it, on-demand or not."""
        compute = compute_types()

        cap = compute.Duration(seconds=int(self.config.max_run_duration_s))
        if ask.pool is Pool.SPOT:
            return compute.Scheduling(provisioning_model="SPOT",
                                      instance_termination_action="DELETE",
                                      on_host_maintenance="TERMINATE",
                                      automatic_restart=False, max_run_duration=cap)
        return compute.Scheduling(provisioning_model="STANDARD",
                                  instance_termination_action="DELETE",
                                  on_host_maintenance="TERMINATE" if ask.gpus else "MIGRATE",
                                  automatic_restart=False, max_run_duration=cap)

    def _disk(self, disk_type: str, ask: Ask) -> Any:
        """The boot disk: the shape's size (or the run's), from the GPU image for GPU VMs."""
        compute = compute_types()

        size = (ask.shape.disk_gb if ask.shape else 0) or self.config.disk_gb
        if ask.gpus:
            size = max(size, self.config.gpu_disk_gb)
            if self.config.gpu_image is None:  # the front ends refuse GPU rules without one
                raise ValueError("GceConfig.gpu_image is needed for VMs with GPUs")
        params = compute.AttachedDiskInitializeParams(
            source_image=self.config.gpu_image if ask.gpus else self.config.image,
            disk_size_gb=int(size), disk_type=disk_type, labels=self._labels(ask))
        return compute.AttachedDisk(boot=True, auto_delete=True, type_="PERSISTENT",
                                    initialize_params=params)

    def _accelerators(self, ask: Ask, zone: str | None) -> list[Any]:
        """``guestAccelerators`` for GPUs attached to an N1 VM (a zonal URL for an insert, the
        bare name for a bulk insert, as for machine types); none where the machine type comes
        with its GPUs (a2, g2, ...)."""
        compute = compute_types()

        shape = ask.shape
        if shape is None or not shape.gpus or comes_with_gpus(shape.machine_type):
            return []
        name = f"zones/{zone}/acceleratorTypes/{shape.gpu_type}" if zone else shape.gpu_type
        return [compute.AcceleratorConfig(accelerator_type=name,
                                          accelerator_count=shape.gpu_count)]

    def _nic(self, zone: str) -> Any:
        """The VM's interface in ``zone``: network and subnetwork as the API takes them (a bare
        subnetwork name completed in the zone's region), and an external IP unless told not."""
        compute = compute_types()

        nic = compute.NetworkInterface(**network_interface(
            self.config.network, self.config.subnetwork, self.config.project, zone))
        if self.config.external_ip:
            nic.access_configs = [compute.AccessConfig(name="External NAT",
                                                       type_="ONE_TO_ONE_NAT")]
        return nic

    def _service_accounts(self) -> list[Any]:
        compute = compute_types()

        return [compute.ServiceAccount(email=self.config.service_account or "default",
                                       scopes=list(self.config.scopes))]

    def instance(self, name: str, zone: str, ask: Ask) -> Any:
        """The body of a single insert: machine, disk and accelerator types as zonal URLs."""
        compute = compute_types()

        return compute.Instance(
            name=name, machine_type=f"zones/{zone}/machineTypes/{self.machine(ask)}",
            labels=self._labels(ask), metadata=self._metadata(ask),
            disks=[self._disk(f"zones/{zone}/diskTypes/{self.config.disk_type}", ask)],
            guest_accelerators=self._accelerators(ask, zone),
            network_interfaces=[self._nic(zone)], service_accounts=self._service_accounts(),
            scheduling=self._scheduling(ask))

    def properties(self, ask: Ask, zone: str) -> Any:
        """The body of a bulk insert: machine, disk and accelerator types as bare names (URLs
        are refused)."""
        compute = compute_types()

        return compute.InstanceProperties(
            machine_type=self.machine(ask), labels=self._labels(ask),
            metadata=self._metadata(ask), disks=[self._disk(self.config.disk_type, ask)],
            guest_accelerators=self._accelerators(ask, None),
            network_interfaces=[self._nic(zone)], service_accounts=self._service_accounts(),
            scheduling=self._scheduling(ask))


def worker_metadata(metadata: dict[str, str], slots: int) -> dict[str, str]:
    """The caller's metadata with the worker settings' ``slots`` set to this VM's slots."""
    out = dict(metadata)
    raw = out.get(WORKER_ATTRIBUTE)
    if raw:
        try:
            settings = json.loads(raw)
        except ValueError:
            return out
        if isinstance(settings, dict):
            settings["slots"] = slots
            out[WORKER_ATTRIBUTE] = json.dumps(settings, separators=(",", ":"))
    return out
