"""The bill by rule and by run on the emulated GCE path: every VM and its boot disk carry the
run's, the workflow's and the machine's labels, a rule with ``gce_labels`` (given as a profile
gives it, through set-resources) runs on VMs of its own that carry its labels and its name,
every body passed Google's discovery document and label rules in the fake, and the cost report
splits the run's cost by rule; a CWL tool's expo:Labels hint does the same for its jobs. Real
snakemake and expocloud-cwl, the fake Compute API and the GCS emulator."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from expo_executor.emulator.compute import FakeCompute
from expo_executor.runs.files import RunFiles

from tests.emulated_gce import (created_bodies, emulated_args, emulated_env,  # noqa: F401
                                fake_compute)
from tests.gcs_emulator import fresh_bucket, gcs_emulator  # noqa: F401
from tests.helpers import EXPOCLOUD, REPO, run_dirs, run_snakemake

pytestmark = pytest.mark.slow

SNAKEFILE = """
rule all:
    input: expand("out/a{i}.txt", i=range(2)), expand("out/c{i}.txt", i=range(2))

rule align:
    output: "out/a{i}.txt"
    shell: "echo a > {output}"

rule call:
    output: "out/c{i}.txt"
    shell: "echo c > {output}"
"""
FAST = ("--expocloud-poll-interval", "0.2", "--expocloud-slow-poll-interval", "0.5",
        "--expocloud-idle-timeout", "1", "--expocloud-max-workers", "3")


def test_labels_reach_every_vm_and_disk_and_the_report_splits_by_rule(
        tmp_path: Path, fake_compute: FakeCompute, gcs_emulator: str) -> None:  # noqa: F811
    workdir = tmp_path / "sweep-demo"
    workdir.mkdir()
    (workdir / "Snakefile").write_text(SNAKEFILE)
    for git in (["init", "-q"], ["add", "."]):  # sources travel to the VMs by git
        subprocess.run(["git", *git], cwd=workdir, check=True, capture_output=True)
    args = emulated_args(fake_compute, gcs_emulator, None, *FAST,
                         "--expocloud-gce-labels", "cost-center=lab-7",
                         "--set-resources", "align:gce_labels=team=ml,project=x")
    proc = run_snakemake(workdir, *args, env=emulated_env(gcs_emulator), timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]

    run_dir, = run_dirs(workdir)
    created = created_bodies(fake_compute)
    jobs = RunFiles(run_dir).jobs()
    worker_of = {r["key"]: r["worker"] for r in jobs}
    align_vms = {r["worker"] for r in jobs if r["rule"] == "align"}
    call_vms = {r["worker"] for r in jobs if r["rule"] == "call"}
    assert align_vms and call_vms and not align_vms & call_vms, worker_of
    for name, body in created.items():
        labels = body["labels"]
        assert labels["expocloud-workflow"] == "sweep-demo"
        assert labels["expocloud-machine"] == "e2-standard-2"
        assert labels["cost-center"] == "lab-7" and labels["expocloud-run"]
        assert body["disks"][0]["initializeParams"]["labels"] == labels
    for name in align_vms:
        assert {k: created[name]["labels"][k] for k in ("team", "project", "expocloud-rule")} \
            == {"team": "ml", "project": "x", "expocloud-rule": "align"}
    for name in call_vms:
        assert "expocloud-rule" not in created[name]["labels"]
        assert "team" not in created[name]["labels"]
    # Google's discovery document and label rules found nothing wrong in any request
    assert [r["problems"] for r in fake_compute.requests if r["problems"]] == []
    assert not fake_compute.instances()

    cost = json.loads((run_dir / "cost.json").read_text())
    split: dict[str, float] = {}
    counted: dict[str, int] = {}
    for row in cost["by_rule"]:
        split[row["rule"]] = split.get(row["rule"], 0.0) + row["cost_usd"]
        counted[row["rule"]] = counted.get(row["rule"], 0) + row["jobs"]
    assert set(split) == {"align", "call"}, cost["by_rule"]
    assert sum(split.values()) == pytest.approx(cost["cost_usd"])
    assert counted == {"align": len([r for r in jobs if r["rule"] == "align"]),
                       "call": len([r for r in jobs if r["rule"] == "call"])}
    report = subprocess.run([EXPOCLOUD, "report", "--state-dir", str(workdir / ".expocloud")],
                            cwd=workdir, capture_output=True, text=True, timeout=120)
    assert report.returncode == 0, report.stderr
    assert "cost by rule" in report.stdout and "| align | " in report.stdout


LABELLED_TOOL = """cwlVersion: v1.2
class: CommandLineTool
$namespaces: {expo: "https://expocloud.dev/cwl#"}
hints:
  expo:Labels: {labels: "team=ml,project=x"}
inputs:
  size: {type: int, inputBinding: {position: 1}}
baseCommand: [echo]
outputs: []
"""


def test_a_cwl_tools_labels_hint_gives_its_jobs_labelled_vms(
        tmp_path: Path, fake_compute: FakeCompute, gcs_emulator: str) -> None:  # noqa: F811
    (tmp_path / "tool.cwl").write_text(LABELLED_TOOL)
    result = subprocess.run(
        [str(Path(sys.executable).parent / "expocloud-cwl"), "--outdir", str(tmp_path / "out"),
         "--expocloud-state-dir", str(tmp_path / "state"),
         "--expocloud-profile", str(REPO / "profiles" / "gce-emulated"),
         "--expocloud-gce-endpoint", fake_compute.endpoint,
         "--default-storage-prefix", f"gs://{fresh_bucket(gcs_emulator)}/cwl",
         "tool.cwl", "--size", "3"], cwd=tmp_path, capture_output=True, text=True,
        timeout=300, env=emulated_env(gcs_emulator))
    assert result.returncode == 0, result.stderr[-4000:]
    created = created_bodies(fake_compute)
    assert created
    for body in created.values():
        assert {k: body["labels"].get(k) for k in ("team", "project", "expocloud-rule")} \
            == {"team": "ml", "project": "x", "expocloud-rule": "tool-cwl"}
        assert body["disks"][0]["initializeParams"]["labels"] == body["labels"]
    assert [r["problems"] for r in fake_compute.requests if r["problems"]] == []
    run_dir, = (tmp_path / "state" / "runs").glob("*")
    cost = json.loads((run_dir / "cost.json").read_text())
    assert {row["rule"] for row in cost["by_rule"]} == {"tool.cwl"}


def test_a_rules_bad_label_stops_the_run_before_any_vm(
        tmp_path: Path, fake_compute: FakeCompute, gcs_emulator: str) -> None:  # noqa: F811
    workdir = tmp_path / "wf"
    workdir.mkdir()
    (workdir / "Snakefile").write_text(SNAKEFILE)
    args = emulated_args(fake_compute, gcs_emulator, None, *FAST,
                         "--set-resources", "align:gce_labels=Team=ml")
    proc = run_snakemake(workdir, *args, env=emulated_env(gcs_emulator), timeout=300)
    assert proc.returncode != 0
    assert "resource 'gce_labels' of rule 'align': not a valid label" in proc.stderr
    assert [r for r in fake_compute.requests if r["op"] in ("insert", "bulkInsert")] == []
