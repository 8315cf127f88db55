"""Bad input: one table of malformed settings, profiles, hardness specs, CWL hints, credentials
and bucket names. Each case must exit non-zero with one line that names the setting and carries
a fix, before any worker starts, any job runs or any VM is asked for.

GCE cases point at a real fake Compute server (expo_executor/emulator/compute.py) and assert
that its request log holds no insert. Credentials cases take the real GCE path (no endpoint,
no storage emulator) with every route out pointed at a closed loopback port: failing must need
no network call. The table is tests/bad_input_cases.py (its own checks: tests/unit/
test_bad_input.py). More CWL hint cases live in tests/e2e/test_cwl.py
(test_bad_hints_are_rejected_before_any_job); the CWL rows here cover the same checks through
this table's stricter one-line-with-a-fix assertion.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from expo_executor.emulator.compute import FakeCompute

from tests.bad_input_cases import ARGPARSE, CASES, COMPUTE, TMP, Case
from tests.helpers import SNAKEMAKE, processes_under

EXPOCLOUD_CWL = str(Path(sys.executable).parent / "expocloud-cwl")

SNAKEFILE = """
rule all:
    input: expand("out/{a}/{n}.txt", a=["x", "y"], n=[1, 2])

rule work:
    output: "out/{a}/{n}.txt"
    threads: 1
    shell: "echo > {output}"
"""

# cases on the fake Compute find "GCS" at a closed loopback port: anything that got as far as
# the bucket would fail there, not reach out
DEAD_STORAGE = "http://127.0.0.1:9"


def _fill(text: str, tmp_path: Path, endpoint: str) -> str:
    return text.replace(TMP, str(tmp_path)).replace(COMPUTE, endpoint)


def _run(case: Case, tmp_path: Path, endpoint: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        env.pop(var, None)
    if any(COMPUTE in a for a in case.args):
        env["STORAGE_EMULATOR_HOST"] = DEAD_STORAGE
    for name, value in case.env.items():
        if value == "":
            env.pop(name, None)
        else:
            env[name] = _fill(value, tmp_path, endpoint)
    args = [_fill(a, tmp_path, endpoint) for a in case.args]
    if case.front == "cwl":
        argv = [EXPOCLOUD_CWL, "--outdir", str(tmp_path / "out"), "--expocloud-state-dir",
                str(tmp_path / ".expocloud"), *args]
    else:
        argv = [SNAKEMAKE, "--executor", "expocloud", "-j", "10", *args]
    return subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env=env)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_is_refused_before_anything_starts(tmp_path: Path, case: Case) -> None:
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    for rel, text in case.files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
        if rel.startswith("bin/"):  # a stand-in for a tool on this machine
            (tmp_path / rel).chmod(0o755)
    fake = FakeCompute(tmp_path / "fake-vms").start()
    try:
        result = _run(case, tmp_path, fake.endpoint)
        requests = fake.requests
    finally:
        fake.stop()
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-2000:]
    lines = [line for line in output.splitlines()
             if case.setting in line and case.problem in line]
    assert len(lines) == 1, f"want one line naming {case.setting!r} and {case.problem!r}:\n" \
                            f"{output[-3000:]}"
    if case.fix == ARGPARSE:
        assert ARGPARSE in output, output[-2000:]
    else:
        assert case.fix in lines[0], lines[0]
    assert "Traceback" not in output, output[-3000:]
    assert [r["op"] for r in requests if r["op"] in ("insert", "bulkInsert")] == [], \
        "a VM was asked for"
    assert not list(tmp_path.glob(".expocloud/runs/*/vms")), "a worker was started"
    assert not list(tmp_path.glob(".expocloud/runs/*/jobs.jsonl")), "a job ran"
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").rglob("*")), \
        "a job ran"
    assert not list(tmp_path.rglob("ran")), "a command ran"
    assert not list((tmp_path / "fake-vms").glob("*")), "a VM booted"
    assert not processes_under(tmp_path), "something of the run is still alive"
