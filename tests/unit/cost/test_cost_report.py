"""The cost report of a run across regions (cost/cost_report.py): a row per pool, machine type
and region, each VM priced by its own record, and the egress of staged files."""

from __future__ import annotations

import pytest

from expo_executor.cost.cost_report import summarize

pytestmark = pytest.mark.unit


def test_the_cost_report_has_a_row_per_region_and_the_egress() -> None:
    vm = {"pool": "spot", "machine_type": "e2-standard-2", "created": 0.0, "ended": 3600.0,
          "end": "deleted", "hourly": 0.02, "on_demand_hourly": 0.07}
    records = [{**vm, "zone": "us-central1-a", "region": "us-central1", "egress_usd": 0.0},
               {**vm, "hourly": 0.03, "zone": "europe-west1-b", "region": "europe-west1",
                "egress_usd": 0.004}]
    report = summarize(records, [], "prices: test", now=3600.0)
    assert [(r.region, r.cost_usd) for r in report.rows] == \
        [("europe-west1", pytest.approx(0.03)), ("us-central1", pytest.approx(0.02))]
    assert report.egress_usd == pytest.approx(0.004)
    lines = report.lines()
    assert any("spot e2-standard-2 in europe-west1: 1 VM(s)" in line for line in lines)
    assert any("$0.0040 egress between the bucket and VMs in other regions ($0.0000 jobs' "
               "staged files, $0.0040 worker software" in line for line in lines)
    assert "e2-standard-2 in us-central1" in report.to_markdown()


def test_each_jobs_staged_bytes_are_priced_at_the_rate_of_the_vm_that_moved_them() -> None:
    """A job's bytes read from and written to the bucket (its record's staged_down_bytes and
    staged_up_bytes) cost its VM's rate (vms.jsonl's egress_usd_per_gb, cost/egress.py): 0 in
    the bucket's region, nothing for a VM whose record has no rate (local engine, older run);
    every attempt counts, a failed one too."""
    vm = {"pool": "spot", "machine_type": "e2-standard-2", "created": 0.0, "ended": 3600.0,
          "end": "deleted", "hourly": 0.02, "on_demand_hourly": 0.07, "egress_usd": 0.001}
    vms = [{**vm, "name": "home", "region": "us-central1", "egress_usd": 0.0,
            "egress_usd_per_gb": 0.0},
           {**vm, "name": "away", "region": "europe-west1", "egress_usd_per_gb": 0.08},
           {**vm, "name": "old", "region": "asia-southeast1"}]

    def job(worker: str, down: int, up: int, outcome: str = "solved") -> dict:
        return {"worker": worker, "outcome": outcome, "runtime_s": 10.0, "cpus": 1,
                "rule": "r", "staged_down_bytes": down, "staged_up_bytes": up}

    attempts = [job("home", 5 * 10**9, 10**9), job("away", 2 * 10**9, 10**9),
                job("away", 10**9, 0, "failed"), job("old", 10**9, 10**9)]
    report = summarize(vms, attempts[:2] + attempts[3:], "prices: test", 3600.0, attempts)
    rows = {r.region: r for r in report.rows}
    assert rows["europe-west1"].staged_egress_usd == pytest.approx(4 * 0.08)
    assert rows["europe-west1"].egress_usd == pytest.approx(4 * 0.08 + 0.001)
    assert rows["us-central1"].staged_egress_usd == rows["asia-southeast1"].staged_egress_usd == 0
    assert report.staged_egress_usd == pytest.approx(0.32)
    assert report.egress_usd == pytest.approx(0.32 + 0.001 + 0.001)
    assert report.to_dict()["staged_egress_usd"] == pytest.approx(0.32)
    assert any("$0.3220 egress between the bucket and VMs in other regions ($0.3200 jobs' "
               "staged files, $0.0020 worker software" in line for line in report.lines())
    assert "| egress: jobs' staged files | | | | | 0.3200 | |" in report.to_markdown()
