"""Benchmark 1's bookkeeping (bench/dispatch.py, bench/expocloud_orig.py): the figures it derives
from run records, not the runs themselves (those are the benchmark's)."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import dispatch  # noqa: E402
import expocloud_orig  # noqa: E402


def job(worker: str, started: float, runtime: float) -> dict:
    return {"worker": worker, "started": 1_700_000_000 + started, "runtime_s": runtime}


def test_slot_gaps_of_a_two_slot_worker_are_the_idle_time_of_each_slot() -> None:
    # one worker, two slots: jobs of 1 s, each slot idle 0.1 s between two jobs
    recs = [job("w1", 0.0, 1.0), job("w1", 0.05, 1.0),
            job("w1", 1.1, 1.0), job("w1", 1.15, 1.0)]
    recs.reverse()  # records are written as jobs end, not as they start
    median, mean = dispatch.slot_gaps(recs)
    assert median == pytest.approx(0.1, abs=1e-6) and mean == pytest.approx(0.1, abs=1e-6)
    assert dispatch.fleet_shape(recs) == "1 worker(s) x 2 slot(s)"
    assert dispatch.jobs_span(recs) == pytest.approx(2.15)


def test_events_span_counts_the_original_s_task_events(tmp_path: Path) -> None:
    client = tmp_path / f"output-{socket.gethostname()}" / "client-1"
    client.mkdir(parents=True)
    (client / "events.txt").write_text(
        "timestamp,descr,worker_id,task_id,i\n1.19,received,None,0,0\n1.4,starting,0,0,0\n"
        "1.41,done,0,0,0\n1.5,starting,1,1,1\n2.0,done,1,1,1\n")
    backup = tmp_path / "output-server-1" / "client-1"  # a backup server's copy
    backup.mkdir(parents=True)
    (backup / "events.txt").write_text((client / "events.txt").read_text())
    assert expocloud_orig.events_span(tmp_path) == {"started": 2, "done": 2,
                                                    "span_s": pytest.approx(0.6)}


def test_a_path_that_is_not_an_expocloud_checkout_is_one_line_naming_the_fix(
        tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as err:
        expocloud_orig.check_checkout(tmp_path)
    msg = str(err.value)
    assert "--orig" in msg and "mgoldenbe/ExpoCloud" in msg and "\n" not in msg


def test_the_original_s_events_become_records_benchmark_2_can_count(tmp_path: Path) -> None:
    client = tmp_path / f"output-{socket.gethostname()}" / "client-1"
    client.mkdir(parents=True)
    (client / "events.txt").write_text(
        "timestamp,descr,worker_id,task_id,variant,n_tasks,n_agents,instance\n"
        "1.0,received,None,0,bnb,6,10,0\n1.0,received,None,1,brute,6,10,0\n"
        "1.2,starting,0,0,bnb,6,10,0\n1.3,starting,1,1,brute,6,10,0\n"
        "7.3,timeout,1,1,brute,6,10,0\n7.4,domino,0,0,bnb,6,10,0\n"
        "7.5,received,None,2,heuristic,6,10,0\n7.6,starting,2,2,heuristic,6,10,0\n"
        "7.8,done,2,2,heuristic,6,10,0\n")
    every = [("heuristic", 6, 10, 0), ("bnb", 6, 10, 0), ("brute", 6, 10, 0),
             ("brute", 10, 10, 0)]
    recs = expocloud_orig.task_records(tmp_path, every, ("variant", "n_tasks", "n_agents"))
    assert [(r["outcome"], r["killed"]) for r in recs] == [
        ("solved", False), ("skipped", True), ("timeout", False), ("skipped", False)]
    assert [r["runtime_s"] and round(r["runtime_s"], 2) for r in recs] == [0.2, 6.2, 6.0, None]
    assert recs[2]["wildcards"] == {"variant": "brute", "n_tasks": "6", "n_agents": "10",
                                    "instance": "0"}
