"""Bad input: a clear one-line error naming the setting and the fix, before any worker starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from .helpers import run_snakemake

SNAKEFILE = """
rule all:
    input: expand("out/{a}/{n}.txt", a=["x", "y"], n=[1, 2])

rule work:
    output: "out/{a}/{n}.txt"
    threads: 1
    shell: "echo > {output}"
"""

GCE = ["--expocloud-engine", "gce", "--expocloud-gce-project", "p", "--expocloud-gce-zones",
       "us-central1-a", "--expocloud-max-workers", "2", "--expocloud-gce-endpoint",
       "http://127.0.0.1:9"]

CASES = [
    ("malformed spec", ["--set-resources", 'work:hardness="a:x<x, n"'],
     "resource 'hardness' of rule 'work'", "repeated value"),
    ("spec syntax", ["--set-resources", 'work:hardness="a n"'],
     "resource 'hardness' of rule 'work'", "not a wildcard name"),
    ("unknown wildcard", ["--set-resources", 'work:hardness="n, m"'],
     "resource 'hardness' of rule 'work'", "unknown wildcard 'm'"),
    ("non-numeric without order", ["--set-resources", 'work:hardness="a, n"'],
     "resource 'hardness' of rule 'work'", "no declared order"),
    ("value missing from order", ["--set-resources", 'work:hardness="a:x<z, n"'],
     "resource 'hardness' of rule 'work'", "value 'y' of 'a' is missing from its declared order"),
    ("negative deadline", ["--set-resources", "work:deadline=-5s"],
     "resource 'deadline' of rule 'work'", "-5s"),
    ("unparsable deadline", ["--set-resources", "work:deadline=soon"],
     "resource 'deadline' of rule 'work'", "cannot read the duration 'soon'"),
    ("zero runtime", ["--set-resources", "work:runtime=0"],
     "resource 'runtime' of rule 'work'", "not positive"),
    ("unknown on-skip value", ["--expocloud-on-skip", "maybe"],
     "--expocloud-on-skip", "invalid choice: 'maybe'"),
    ("unknown engine", ["--expocloud-engine", "moon"], "--expocloud-engine", "invalid choice"),
    ("zero slots", ["--expocloud-slots-per-worker", "0"],
     "--expocloud-slots-per-worker", "is not valid"),
    ("oversubscription", ["--expocloud-max-workers", "64"],
     "--expocloud-max-workers", "exceed this machine's"),
    ("threads beyond slots", ["--set-threads", "work=2"],
     "threads of rule 'work'", "workers have 1 slots"),
    ("memory beyond a worker's", ["--set-resources", "work:mem_mb=99999999"],
     "resource 'mem_mb' of rule 'work'", "but workers have"),
    ("bad run id", ["--expocloud-run-id", "../escape"], "--expocloud-run-id", "not a valid run"),
    ("bad placeholder template", ["--expocloud-placeholder-text", "cost $"],
     "--expocloud-placeholder-text", "not a valid $-template"),
    # GCE: refused before any VM is asked for (no endpoint is reachable here anyway)
    ("gce without project", [*GCE, "--expocloud-gce-project", ""],
     "--expocloud-gce-project", "needs a project"),
    ("gce bad zone", [*GCE, "--expocloud-gce-zones", "us-central1"],
     "--expocloud-gce-zones", "'us-central1' is not a zone name"),
    ("gce zones of two regions", [*GCE, "--expocloud-gce-zones", "us-central1-a,europe-west1-b"],
     "--expocloud-gce-zones", "span several regions"),
    ("gce reserved label", [*GCE, "--expocloud-gce-labels", "expocloud-run=x"],
     "--expocloud-gce-labels", "not a valid label"),
    ("gce bad max run duration", [*GCE, "--expocloud-gce-max-run-duration", "forever"],
     "--expocloud-gce-max-run-duration", "cannot read the duration"),
    ("gce grace below slow poll", [*GCE, "--expocloud-heartbeat-grace", "30"],
     "--expocloud-heartbeat-grace", "too short for a slow poll interval"),
    ("gce with a shared file system", GCE, "shared-fs-usage", "share no file system"),
    ("gce bucket not on gcs", [*GCE, "--expocloud-bucket", "s3://b/p"],
     "--expocloud-bucket", "is not a gs:// URL"),
    ("budget on the local engine", ["--expocloud-budget", "5"],
     "--expocloud-budget", "local workers cost nothing"),
    ("negative budget", [*GCE, "--expocloud-budget", "-1"], "--expocloud-budget", "not valid"),
    ("unknown budget action", ["--expocloud-budget-action", "panic"],
     "--expocloud-budget-action", "invalid choice"),
]


@pytest.mark.parametrize("name,args,setting,problem", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_refused_before_anything_starts(tmp_path: Path, name: str, args: list[str],
                                                     setting: str, problem: str) -> None:
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    result = run_snakemake(tmp_path, "--executor", "expocloud", "-j", "10", *args, timeout=120)
    assert result.returncode != 0
    lines = [line for line in (result.stdout + result.stderr).splitlines()
             if setting in line and problem in line]
    assert lines, f"no line names {setting!r} and {problem!r}:\n{result.stderr[-2000:]}"
    assert "fix:" in lines[0] or "choose from" in lines[0], lines[0]
    assert not list(tmp_path.glob(".expocloud/runs/*/vms")), "a worker was started"
    assert not (tmp_path / "out").exists(), "a job ran"
