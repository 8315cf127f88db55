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
    assert any("$0.0040 egress of staged files" in line for line in lines)
    assert "e2-standard-2 in us-central1" in report.to_markdown()
