"""The record of a VM of a run across regions (coordinator/vms.py): where it ran, priced there,
with the egress of its staged files from a bucket in another region."""

from __future__ import annotations

from pathlib import Path

import pytest

from expo_executor.coordinator.config import CoordinatorConfig
from expo_executor.coordinator.persist import Persister
from expo_executor.coordinator.vms import VmFleet
from expo_executor.core.records import VmEnd
from expo_executor.core.scheduler import Pool
from expo_executor.runs.files import RunFiles

pytestmark = pytest.mark.unit


def test_a_vm_is_recorded_where_it_ran_at_its_regions_prices_with_its_egress(
        tmp_path: Path) -> None:
    config = CoordinatorConfig(
        run_id="r", slots_per_worker=1, max_workers=2, vm_prefix="w",
        machine_types={Pool.SPOT: "e2-standard-2", Pool.ON_DEMAND: "e2-standard-2"},
        hourly={Pool.SPOT: 0.02, Pool.ON_DEMAND: 0.07},
        on_demand_hourly={Pool.SPOT: 0.07, Pool.ON_DEMAND: 0.07},
        region_hourly={"europe-west1": {Pool.SPOT: 0.03, Pool.ON_DEMAND: 0.08}},
        region_on_demand_hourly={"europe-west1": {Pool.SPOT: 0.08, Pool.ON_DEMAND: 0.08}},
        staged_bytes_per_vm=2e9, bucket_location="US")
    files = RunFiles(tmp_path)
    fleet = VmFleet(config, files, Persister(print))
    here, there, unlisted = fleet.add(Pool.SPOT, 3, now=0.0)
    fleet[here].zone, fleet[there].zone = "us-central1-a", "europe-west1-b"
    # a job's staged files, as its result arrives (the budget meter's egress): where it runs
    assert (fleet.staged_egress_usd(here, 10**9), fleet.staged_egress_usd(unlisted, 10**9),
            fleet.staged_egress_usd("gone", 10**9)) == (0.0, 0.0, 0.0)
    assert fleet.staged_egress_usd(there, 10**9) == pytest.approx(0.08)
    for name in (here, there, unlisted):
        fleet.end(name, VmEnd.DELETED, ended=600.0)
    records = {r["name"]: r for r in files.vms()}
    assert (records[here]["region"], records[here]["hourly"], records[here]["egress_usd"]) == \
        ("us-central1", 0.02, 0.0)  # a region of the bucket's multi-region: no egress
    assert (records[there]["region"], records[there]["hourly"],
            records[there]["on_demand_hourly"]) == ("europe-west1", 0.03, 0.08)
    assert records[there]["egress_usd"] == pytest.approx(2 * 0.08)  # 2 GB to another continent
    # the rate its jobs' staged files pay in the cost report
    assert (records[here]["egress_usd_per_gb"], records[there]["egress_usd_per_gb"]) == (0.0, 0.08)
    assert "region" not in records[unlisted] and records[unlisted]["hourly"] == 0.02
