"""The real learned model on the emulated GCE path (the fake Compute Engine, files through the
GCS emulator): a first run teaches it which instances never finish, and the rerun, which starts
from the model saved beside the frontier, skips their next repetition. The rerun shows the
model skips in ``jobs.jsonl``, on the run page's data (``status.json``) and in Snakemake's
error, and the estimate of what is left, drawn from the model (``coordinator/estimates.py``)
and priced, since GCE VMs cost money.

No test double here: a model of the user's own (``module:attribute``) and the per-job estimate
it gets are wired the same way on both engines, and tests/e2e/test_model_skip.py covers them on
the local engine, where a run is cheaper. The rerun holds one job of another rule (``hold``,
outside the model's family) until the test has seen the live page, so the page is read while
the run is live."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.emulated_gce import emulated_args, emulated_env, fake_compute  # noqa: F401
from tests.gcs_emulator import gcs_emulator  # noqa: F401
from tests.helpers import (REPO, SNAKEMAKE, job_records, run_dirs, run_snakemake,
                           wait_for_estimate)

SNAKEFILE = """
rule all:
    input:
        expand("out/{{n}}/{{inst}}/{{rep}}.txt", n=[1], inst=range(24), rep=range(config["reps"])),
        f"hold{{config['reps']}}.txt"

rule work:
    output: "out/{{n}}/{{inst}}/{{rep}}.txt"
    shell: "if [ $(( {{wildcards.inst}} % 4 )) = 0 ]; then sleep 60; else sleep 1; fi; echo solved > {{output}}"

rule hold:
    output: "hold{{reps}}.txt"
    shell: "while [ ! -e {release}{{wildcards.reps}} ]; do sleep 0.1; done; echo held > {{output}}"
"""


def _skipped_with_jobs_left(status: dict) -> bool:
    """The rerun's status once it shows a model skip and a priced estimate of jobs still left.
    The quick jobs take a second each (in both runs, so the rerun's model meets what it
    learned): jobs of milliseconds leave a drawn estimate that the running jobs' time soon
    brings to $0 (CI once saw that), or a family that ends before its first draw."""
    return bool(status.get("model-skipped")) and status["estimate"].get("jobs", 0) >= 1 \
        and status["estimate"].get("cost_high_usd", 0) > 0


def test_the_learned_model_skips_and_estimates_on_the_emulated_gce_path(
        tmp_path: Path, fake_compute, gcs_emulator) -> None:  # noqa: F811
    """Every fourth instance never finishes (past their 3 s deadline); the rest take a second.
    The scope keeps a timeout from dominating anything but itself, so every skip is the
    model's. The saved model has seen 24 jobs (it fits at 20), and may skip once it has seen 20."""
    workdir, release = tmp_path / "wf", tmp_path / "release"
    workdir.mkdir()
    (workdir / "Snakefile").write_text(SNAKEFILE.format(release=release))
    for git in (["init", "-q"], ["add", "."]):
        subprocess.run(["git", *git], cwd=workdir, check=True, capture_output=True)
    args = emulated_args(fake_compute, gcs_emulator, None,
                         "--set-resources", 'work:hardness="n; scope: inst, rep"',
                         "work:deadline=3s", "--expocloud-hardness-model", "learned",
                         "--expocloud-hardness-noise", "inst,rep",
                         "--expocloud-model-trust-after", "20",
                         "--expocloud-status-interval", "1", "--expocloud-poll-interval", "0.2",
                         flag="--profile")
    env = emulated_env(gcs_emulator)
    env["PYTHONPATH"] = f"{REPO}:{env['PYTHONPATH']}" if env.get("PYTHONPATH") else str(REPO)
    Path(f"{release}1").touch()
    first = run_snakemake(workdir, *args, "--config", "reps=1", env=env)
    assert first.returncode != 0  # the hopeless instances timed out
    assert {k: r["outcome"] for k, r in job_records(run_dirs(workdir)[0]).items()
            if r["rule"] == "work"} == {f"1/{i}/0": "timeout" if i % 4 == 0 else "solved"
                                        for i in range(24)}
    rerun = subprocess.Popen([SNAKEMAKE, *args, "--config", "reps=2",
                              "--expocloud-skip-above", "0.99"], cwd=workdir, env=env,
                             text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        live, _ = wait_for_estimate(workdir, 240, _skipped_with_jobs_left)
    finally:
        Path(f"{release}2").touch()
        _, stderr = rerun.communicate(timeout=300)
    assert live["estimate"]["cost_high_usd"] > 0  # GCE prices what is left
    assert live["estimate"]["wall_low_s"] <= live["estimate"]["wall_s"] \
        <= live["estimate"]["wall_high_s"]
    records = job_records(run_dirs(workdir)[-1])
    skipped = {k for k, r in records.items() if r["outcome"] == "model-skipped"}
    assert skipped == {f"1/{i}/1" for i in range(0, 24, 4)}  # each hopeless one's next rep
    assert all(records[f"1/{i}/1"]["outcome"] == "solved" for i in range(24) if i % 4)
    assert all(records[k]["p_exceed"] >= 0.99 and records[k]["runtime_s"] is None
               for k in skipped)
    status = json.loads((run_dirs(workdir)[-1] / "status.json").read_text())
    assert status["model-skipped"] == 6 and len(status["model_skips"]) == 6
    assert stderr.count("model-skipped: ") == 6, stderr[-3000:]
    assert "likely to run past its deadline of 3 s" in stderr
