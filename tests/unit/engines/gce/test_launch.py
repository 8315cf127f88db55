"""Run labels and coordination prefixes (engines/gce/launch.py): unique per run id by
construction, within GCE's limits, and a new run refuses a prefix that holds objects."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from expo_executor.core.errors import ExpoError
from expo_executor.engines.gce.config import LABEL_VALUE_RE
from expo_executor.engines.gce.launch import check_new_prefix, run_label, vm_prefix
from expo_executor.protocol.bucket import LocalBucket

INSTANCE_NAME = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")

# Pairs the old label (lowercased, '_'/'.' -> '-', cut at 40) mapped to one prefix.
LOOK_ALIKES = [
    ("Sweep_1", "sweep-1"),
    ("sweep.1", "sweep_1"),
    ("Run-A", "run-a"),
    ("a" * 40 + "-first", "a" * 40 + "-second"),
]


@pytest.mark.parametrize("one,other", LOOK_ALIKES)
def test_run_ids_that_look_alike_get_distinct_labels_and_prefixes(one: str, other: str) -> None:
    assert run_label(one) != run_label(other)
    assert vm_prefix(one) != vm_prefix(other)


@pytest.mark.parametrize("run_id", ["20261125-155400-ab12", "A", "_", "x" * 64, "Ünïcode.run",
                                    "9starts-with-digit", "--"])
def test_labels_and_vm_names_are_valid_gce_names(run_id: str) -> None:
    label = run_label(run_id)
    assert LABEL_VALUE_RE.fullmatch(label), label
    assert run_label(run_id) == label  # stable: cleanup and doctor find the run's VMs again
    name = f"{vm_prefix(run_id)}-{10**15}"  # a VM of the run, with room to spare
    assert len(name) <= 63 and INSTANCE_NAME.fullmatch(name), name


def test_label_keeps_the_run_id_readable() -> None:
    assert run_label("Sweep_2026.11").startswith("sweep-2026-11-")


def test_a_new_run_refuses_a_prefix_holding_another_runs_objects(tmp_path: Path) -> None:
    bucket = LocalBucket(tmp_path / "prefix")
    check_new_prefix(bucket, "gs://b/wf/run")  # empty: fine
    bucket.write("results/j1a1/w-1.json", b"{}")
    with pytest.raises(ExpoError) as caught:
        check_new_prefix(bucket, "gs://b/wf/run")
    message = str(caught.value)
    assert "--expocloud-run-id" in message and "gs://b/wf/run" in message
    assert "\n" not in message
