"""A small agent-assignment sweep through ``snakemake --executor expocloud`` with the
workflow's own default profile: real timeouts, real skips, the aggregate built from
placeholders, and every skip justified by a timeout that dominates it."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

from tests.agent_assignment import WORKFLOW, hardness_vector
from tests.helpers import job_records, processes_under, run_dirs, run_snakemake


def test_small_sweep_times_out_skips_and_aggregates(tmp_path: Path) -> None:
    workdir = tmp_path / "agent-assignment"
    shutil.copytree(WORKFLOW, workdir, ignore=shutil.ignore_patterns(".snakemake", ".expocloud",
                                                                     "results", "instances"))
    result = run_snakemake(workdir, "--executor", "expocloud", "--config", "n_tasks=6,10",
                           "n_agents=10,14,18", "instances=1", "--expocloud-poll-interval", "0.1")
    assert result.returncode == 0, result.stderr[-3000:]

    records = [r for r in job_records(run_dirs(workdir)[-1]).values() if r["rule"] == "solve"]
    assert len(records) == 18
    outcomes = [r["outcome"] for r in records]
    assert outcomes.count("timeout") >= 1 and outcomes.count("skipped") >= 1
    assert outcomes.count("solved") >= 12 and "failed" not in outcomes
    timed_out = [hardness_vector(r["wildcards"]) for r in records if r["outcome"] == "timeout"]
    for record in records:
        if record["outcome"] == "skipped":
            point = hardness_vector(record["wildcards"])
            assert any(all(t <= p for t, p in zip(timeout, point)) for timeout in timed_out), \
                f"{record['wildcards']} was skipped without a dominating timeout"
            assert record["dominator"].startswith("solve {variant=")

    with open(workdir / "results" / "table.tsv") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    statuses = {(r["variant"], r["n_tasks"], r["n_agents"]): r["status"] for r in rows}
    for record in records:
        w = record["wildcards"]
        assert statuses[(w["variant"], w["n_tasks"], w["n_agents"])] == record["outcome"]
    assert not processes_under(workdir)
