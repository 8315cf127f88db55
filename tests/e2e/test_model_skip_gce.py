"""A model skip and the estimate on the emulated GCE path (the fake Compute Engine, files
through the GCS emulator): the same outcome, record, page and error as on the local engine
(tests/e2e/test_model_skip.py), and the estimate priced, since GCE VMs cost money. Job n=2 waits
for a file the test makes once it has seen the live estimate (the fake VMs are processes on
this machine, so the path reaches them)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.emulated_gce import emulated_args, emulated_env, fake_compute  # noqa: F401
from tests.gcs_emulator import gcs_emulator  # noqa: F401
from tests.helpers import REPO, SNAKEMAKE, job_records, run_dirs, wait_for_estimate
from tests.runtime_model_double import HOPELESS

SNAKEFILE = """
rule all:
    input: expand("out/{{n}}.txt", n=[0, 1, 2, 3, 4])

rule work:
    output: "out/{{n}}.txt"
    shell: "if [ {{wildcards.n}} = 2 ]; then while [ ! -e {release} ]; do sleep 0.1; done; fi; echo solved > {{output}}"
"""


def test_a_model_skip_and_the_estimate_on_the_emulated_gce_path(
        tmp_path: Path, fake_compute, gcs_emulator) -> None:  # noqa: F811
    workdir, release = tmp_path / "wf", tmp_path / "release"
    workdir.mkdir()
    (workdir / "Snakefile").write_text(SNAKEFILE.format(release=release))
    for git in (["init", "-q"], ["add", "."]):
        subprocess.run(["git", *git], cwd=workdir, check=True, capture_output=True)
    args = emulated_args(fake_compute, gcs_emulator, None,
                         "--set-resources", 'work:hardness="n"', "work:deadline=60s",
                         "--expocloud-hardness-model", "tests.runtime_model_double:factory",
                         "--expocloud-skip-above", "0.99", "--expocloud-status-interval", "1",
                         "--expocloud-model-trust-after", "0",
                         flag="--profile")
    env = emulated_env(gcs_emulator)
    env["PYTHONPATH"] = f"{REPO}:{env['PYTHONPATH']}" if env.get("PYTHONPATH") else str(REPO)
    process = subprocess.Popen([SNAKEMAKE, *args], cwd=workdir, env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        live, _ = wait_for_estimate(workdir, timeout=240)
    finally:
        release.touch()
        _, stderr = process.communicate(timeout=300)
    assert live["estimate"]["cost_high_usd"] > 0  # GCE prices what is left
    records = job_records(run_dirs(workdir)[-1])
    assert {n: records[n]["outcome"] for n in "01234"} == {
        "0": "solved", "1": "solved", "2": "solved", "3": "model-skipped", "4": "model-skipped"}
    assert records["3"]["p_exceed"] == HOPELESS
    status = json.loads((run_dirs(workdir)[-1] / "status.json").read_text())
    assert status["model-skipped"] == 2 and len(status["model_skips"]) == 2
    assert stderr.count("model-skipped: 99.5% likely to run past its deadline of 60 s") == 2
