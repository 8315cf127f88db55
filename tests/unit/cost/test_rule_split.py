"""The bill by rule (cost/rule_split.py): each VM's cost split among the rules whose jobs it
ran, by slot-seconds, from records shaped as the run writes them."""

from __future__ import annotations

import pytest

from expo_executor.cost.cost_report import summarize
from expo_executor.cost.rule_split import NO_RULE, RuleCost, by_rule, split_by_rule


def vm(name: str, hourly: float, seconds: float, machine: str = "e2-standard-4",
       pool: str = "spot", end: str = "deleted") -> dict:
    return {"name": name, "pool": pool, "machine_type": machine, "created": 1000.0,
            "ended": 1000.0 + seconds, "end": end, "hourly": hourly, "on_demand_hourly": hourly}


def job(key: str, rule: str, worker: str | None, runtime_s: float | None, cpus: int = 1,
        outcome: str = "solved") -> dict:
    return {"key": key, "rule": rule, "worker": worker, "runtime_s": runtime_s, "cpus": cpus,
            "outcome": outcome}


def test_a_shared_vm_is_split_by_the_slot_seconds_each_rule_held() -> None:
    # 3600 s at $3.60/h: $3.60; align held 2 slots x 600 s, call 1 slot x 1200 s + 1 x 1200 s
    rows = split_by_rule([(vm("v1", 3.6, 3600), 3.6)], [
        job("a", "align", "v1", 600, cpus=2), job("b", "call", "v1", 1200),
        job("c", "call", "v1", 1200)])
    assert rows == (RuleCost("align", "spot", "e2-standard-4", 1, 1200 / 3600, 3.6 * 1200 / 3600),
                    RuleCost("call", "spot", "e2-standard-4", 2, 2400 / 3600, 3.6 * 2400 / 3600))
    assert sum(r.cost_usd for r in rows) == pytest.approx(3.6)  # idle time split too


def test_a_vm_that_finished_no_job_goes_to_the_rules_of_its_machine_type() -> None:
    vms = [(vm("v1", 1.0, 3600), 1.0), (vm("v2", 1.0, 1800, end="preempted"), 0.5),
           (vm("g1", 2.0, 60, machine="n1-standard-4", pool="on-demand"), 2.0 / 60)]
    rows = split_by_rule(vms, [job("a", "align", "v1", 300), job("b", "call", "v1", 100),
                               job("s", "skip", None, None, outcome="skipped")])
    assert by_rule(rows) == pytest.approx({"align": 1.5 * 0.75, "call": 1.5 * 0.25,
                                           NO_RULE: 2.0 / 60})
    assert {r.rule for r in rows if r.machine_type == "n1-standard-4"} == {NO_RULE}


def test_the_cost_report_carries_the_split_and_old_records_count_one_slot() -> None:
    vms = [vm("v1", 3.6, 3600), vm("v2", 3.6, 3600)]
    old = {"key": "a", "rule": "align", "worker": "v1", "runtime_s": 100.0, "outcome": "solved"}
    report = summarize(vms, [old, job("b", "call", "v2", 100, cpus=4)], "snapshot", 99999.0)
    assert by_rule(report.rules) == pytest.approx({"align": 3.6, "call": 3.6})
    assert sum(r.cost_usd for r in report.rules) == pytest.approx(report.cost_usd)
    assert report.rules[0].slot_hours == pytest.approx(100 / 3600)  # 1 slot: no "cpus"
    assert report.rules[1].slot_hours == pytest.approx(400 / 3600)
    text = "\n".join(report.lines())
    assert "cost by rule" in text and "align: $3.6000" in text
    assert "| call | spot | e2-standard-4 | 1 | 0.111 | 3.6000 |" in report.to_markdown()
    assert report.to_dict()["by_rule"][0]["rule"] == "align"
