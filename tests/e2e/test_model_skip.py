"""End to end through ``snakemake --executor expocloud`` on the local engine: a runtime model
(the test double of ``tests/runtime_model_double.py``, named by ``--expocloud-hardness-model``
as a user's own model would be) judges n >= 3 hopeless, and with ``--expocloud-skip-above``
those jobs never run: each is ``model-skipped`` with its probability in ``jobs.jsonl``, in the
run page's data (``status.json``) and page, and in Snakemake's error for the job; while a job
is left (n=2 waits for the test to release it), the page and the log show the estimate of what
is left. The model is saved beside the frontier; a rerun without the setting runs the skipped
jobs. The real learned model (``--expocloud-hardness-model learned``) skips too: a first run
teaches it which instances never finish, and the rerun it starts informed skips their next
repetition, while its live page shows those skips and the estimate drawn from the model."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from expo_executor.cli import main
from expo_executor.runs.files import RunFiles

from tests.helpers import REPO, SNAKEMAKE, job_records, run_dirs, run_snakemake, wait_for_estimate
from tests.runtime_model_double import HOPELESS

SNAKEFILE = """
rule all:
    input: expand("out/{n}.txt", n=[0, 1, 2, 3, 4])

rule work:
    output: "out/{n}.txt"
    shell: "if [ {wildcards.n} = 2 ]; then while [ ! -e release ]; do sleep 0.1; done; fi; echo solved > {output}"
"""

MODEL = "tests.runtime_model_double:factory"


def _args(*extra: str) -> list[str]:
    return ["--executor", "expocloud", "-j", "4", "--keep-going",
            "--expocloud-model-trust-after", "0",  # the double needs no learning
            "--set-resources", 'work:hardness="n"', "work:deadline=30s",
            "--expocloud-max-workers", "1", "--expocloud-slots-per-worker", "2",
            "--expocloud-poll-interval", "0.1", "--expocloud-status-interval", "1", *extra]


def _env() -> dict[str, str]:
    """The test double must be importable in snakemake's process: the repository's root on
    its path, ahead of whatever the caller set."""
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{path}" if path else str(REPO)}


@pytest.fixture(scope="module")
def skipped_run(tmp_path_factory: pytest.TempPathFactory):
    """The run, and its status and page as they were while job n=2 waited for the test (so
    the estimate of what is left is on them): the test releases it once it has seen them."""
    workdir = tmp_path_factory.mktemp("model-skip")
    (workdir / "Snakefile").write_text(SNAKEFILE)
    process = subprocess.Popen([SNAKEMAKE, *_args("--expocloud-hardness-model", MODEL,
                                                  "--expocloud-skip-above", "0.99")],
                               cwd=workdir, env=_env(), text=True, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    try:
        live, page = wait_for_estimate(workdir, timeout=120)
    finally:
        (workdir / "release").touch()
        stdout, stderr = process.communicate(timeout=300)
    return workdir, subprocess.CompletedProcess(process.args, process.returncode, stdout,
                                                stderr), live, page


def test_a_model_skip_is_its_own_outcome_with_its_probability(skipped_run) -> None:
    workdir, result, _, _ = skipped_run
    assert result.returncode != 0  # the skipped jobs are errors to Snakemake
    records = job_records(run_dirs(workdir)[0])
    assert {n: records[n]["outcome"] for n in "01234"} == {
        "0": "solved", "1": "solved", "2": "solved", "3": "model-skipped", "4": "model-skipped"}
    for n in "34":
        assert records[n]["p_exceed"] == HOPELESS and records[n]["runtime_s"] is None
        assert records[n]["dominator"] is None  # not a domino skip
        assert "--expocloud-skip-above 0.99" in records[n]["reason"]
    assert not (workdir / "out" / "3.txt").exists()
    assert records["0"]["predicted_s"] == 0.1  # the double's median for n=0


def test_snakemake_s_error_says_why_and_how_to_run_it(skipped_run) -> None:
    _, result, _, _ = skipped_run
    assert result.stderr.count("model-skipped: 99.5% likely to run past its deadline of 30 s") \
        == 2, result.stderr[-3000:]
    assert "a rerun with a higher --expocloud-skip-above, or without it, runs it" in result.stderr


def test_the_run_page_shows_the_model_skips(skipped_run) -> None:
    workdir, _, _, _ = skipped_run
    run_dir = run_dirs(workdir)[0]  # the skipping run, whatever ran since
    status = json.loads((run_dir / "status.json").read_text())
    assert status["model-skipped"] == 2 and status["solved"] == 3
    assert sorted(note["label"] for note in status["model_skips"]) == ["work {n=3}", "work {n=4}"]
    assert all(note["probability"] == HOPELESS for note in status["model_skips"])
    page = (run_dir / "run.html").read_text()
    assert '<table id="model-skips">' in page and "99.5%" in page


def test_the_run_page_shows_the_estimate_while_jobs_are_left(skipped_run) -> None:
    _, _, live, page = skipped_run
    assert live["estimate"]["jobs"] >= 1 and live["estimate"]["wall_s"] > 0
    assert '<p id="estimate">estimate for ' in page
    assert "| estimate for " in skipped_run[1].stderr  # the log's progress line


def test_the_report_counts_the_model_skips_and_sets_predictions_against_runtimes(
        skipped_run, capsys) -> None:
    workdir, _, _, _ = skipped_run
    assert main(["report", str(run_dirs(workdir)[0])]) == 0
    out = capsys.readouterr().out
    assert "runtime model, predicted against actual:" in out
    assert "| work | 3 |" in out and out.count("model-skipped") >= 2


def test_the_model_is_saved_and_a_rerun_without_the_setting_runs_the_skipped(
        skipped_run) -> None:
    workdir, _, _, _ = skipped_run
    saved = [json.loads(p.read_text()) for p in (workdir / ".expocloud" / "frontiers")
             .glob("*.model.json")]
    assert [s["model"]["observed"] for s in saved] == [3]  # its three solved jobs
    rerun = run_snakemake(workdir, *_args("--expocloud-hardness-model", MODEL), env=_env())
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    records = RunFiles(run_dirs(workdir)[-1]).jobs()
    assert sorted(r["wildcards"]["n"] for r in records if r["outcome"] == "solved") == ["3", "4"]


CWL_TOOL = """cwlVersion: v1.2
class: CommandLineTool
$namespaces: {expo: "https://expocloud.dev/cwl#"}
hints:
  expo:Hardness: {dimensions: [n], noise: [seed], deadline: 30s}
inputs:
  n: {type: int, inputBinding: {position: 1}}
  seed: {type: int, inputBinding: {position: 2}}
baseCommand: [echo]
outputs: []
"""
CWL_WORKFLOW = """cwlVersion: v1.2
class: Workflow
requirements: {ScatterFeatureRequirement: {}}
inputs: {ns: "int[]"}
outputs: []
steps:
"""


def _step(name: str, tool: str) -> str:
    """A workflow step scattering ``tool`` over ``ns``, its seed fixed."""
    return (f"  {name}:\n    run: {tool}\n    scatter: n\n"
            "    in: {n: ns, seed: {default: 7}}\n    out: []\n")


def test_the_cwl_runner_model_skips_too(tmp_path: Path) -> None:
    (tmp_path / "tool.cwl").write_text(CWL_TOOL)
    (tmp_path / "wf.cwl").write_text(CWL_WORKFLOW + _step("work", "tool.cwl"))
    result = subprocess.run(
        [str(Path(SNAKEMAKE).parent / "expocloud-cwl"), "--outdir", str(tmp_path / "out"),
         "--expocloud-state-dir", str(tmp_path / "state"), "--expocloud-hardness-model", MODEL,
         "--expocloud-skip-above", "0.99", "--expocloud-model-trust-after", "0", "wf.cwl",
         "--ns", "1", "--ns", "5"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env=_env())
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = (tmp_path / "state" / "runs").glob("*")
    outcome = {r["wildcards"]["n"]: (r["outcome"], r["p_exceed"]) for r in RunFiles(run_dir).jobs()}
    assert outcome == {"1": ("solved", 0.01), "5": ("model-skipped", HOPELESS)}
    saved = [json.loads(p.read_text()) for p in (tmp_path / "state" / "frontiers")
             .glob("*.model.json")]
    assert [s["model"]["noise"] for s in saved] == [["seed"]]  # the hint's noise reached it


def test_a_tools_skip_above_hint_alone_skips_its_jobs_and_no_others(tmp_path: Path) -> None:
    """No --expocloud-skip-above: the hinted tool's hopeless job is model-skipped, its record
    naming the hint; the same job of a tool without the hint runs in the same run."""
    (tmp_path / "tool.cwl").write_text(CWL_TOOL)
    (tmp_path / "hinted.cwl").write_text(CWL_TOOL.replace("deadline: 30s}",
                                                          "deadline: 30s, skipAbove: 0.99}"))
    (tmp_path / "wf.cwl").write_text(CWL_WORKFLOW + _step("hinted", "hinted.cwl")
                                     + _step("plain", "tool.cwl"))
    result = subprocess.run(
        [str(Path(SNAKEMAKE).parent / "expocloud-cwl"), "--outdir", str(tmp_path / "out"),
         "--expocloud-state-dir", str(tmp_path / "state"), "--expocloud-hardness-model", MODEL,
         "--expocloud-model-trust-after", "0", "wf.cwl", "--ns", "5"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env=_env())
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = (tmp_path / "state" / "runs").glob("*")
    records = {r["rule"]: r for r in RunFiles(run_dir).jobs()}
    assert {tool: r["outcome"] for tool, r in records.items()} == {
        "hinted.cwl": "model-skipped", "tool.cwl": "solved"}
    assert "at or above expo:Hardness skipAbove of hinted.cwl 0.99" in \
        records["hinted.cwl"]["reason"]
    assert "--expocloud-skip-above" not in records["hinted.cwl"]["reason"]


LEARNED_SNAKEFILE = """
rule all:
    input:
        expand("out/{n}/{inst}/{rep}.txt", n=[1], inst=range(24), rep=range(config["reps"])),
        f"hold{config['reps']}.txt"

rule hold:
    output: "hold{reps}.txt"
    shell: "while [ ! -e release{wildcards.reps} ]; do sleep 0.1; done; echo held > {output}"

rule work:
    output: "out/{n}/{inst}/{rep}.txt"
    shell: "if [ $(( {wildcards.inst} % 4 )) = 0 ]; then sleep 60; else sleep 1; fi; echo solved > {output}"
"""


def _learned_args(reps: int, *extra: str) -> list[str]:
    """Every instance with a multiple of 4 never finishes (past its 3 s deadline); the others
    take a second each, so that the rerun's model family is still at work when its estimate
    is first drawn (with one slot of the two held by ``hold``, about 18 s: jobs of a few
    milliseconds let the family end first on a loaded machine, and the page then shows an
    estimate of no jobs). Both runs' jobs take the same time: the rerun's model must meet the
    runtimes it learned. The declared order is one
    size, n=1, and the scope keeps a timeout from dominating anything but itself, so what is
    skipped is the model's doing. The model may skip once it has seen 20 jobs (the default,
    50, would need a bigger sweep)."""
    return ["--executor", "expocloud", "-j", "8", "--keep-going", "--config", f"reps={reps}",
            "--set-resources", 'work:hardness="n; scope: inst, rep"', "work:deadline=3s",
            "--expocloud-hardness-model", "learned", "--expocloud-hardness-noise", "inst,rep",
            "--expocloud-model-trust-after", "20", "--expocloud-max-workers", "1",
            "--expocloud-slots-per-worker", "2", "--expocloud-poll-interval", "0.1",
            "--expocloud-status-interval", "1", *extra]


def test_the_learned_model_learns_the_hopeless_instances_and_a_rerun_skips_them(
        tmp_path: Path) -> None:
    """The rerun holds a job of another rule (``hold``, outside the model's family) until the
    test has seen its live page show a model skip and the estimate drawn from the model."""
    (tmp_path / "Snakefile").write_text(LEARNED_SNAKEFILE)
    (tmp_path / "release1").touch()
    first = run_snakemake(tmp_path, *_learned_args(1))
    assert first.returncode != 0  # the hopeless instances timed out
    learned = job_records(run_dirs(tmp_path)[0])
    assert {k: r["outcome"] for k, r in learned.items() if r["rule"] == "work"} == {
        f"1/{i}/0": "timeout" if i % 4 == 0 else "solved" for i in range(24)}
    process = subprocess.Popen([SNAKEMAKE, *_learned_args(2, "--expocloud-skip-above", "0.99")],
                               cwd=tmp_path, text=True, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    try:
        live, page = wait_for_estimate(tmp_path, 120, lambda status: bool(
            status.get("model-skipped")) and status["estimate"]["jobs"] >= 1)
    finally:
        (tmp_path / "release2").touch()
        _, stderr = process.communicate(timeout=300)
    rerun = subprocess.CompletedProcess(process.args, process.returncode, "", stderr)
    assert live["estimate"]["wall_low_s"] <= live["estimate"]["wall_s"] \
        <= live["estimate"]["wall_high_s"]
    assert '<p id="estimate">estimate for ' in page and '<table id="model-skips">' in page
    records = job_records(run_dirs(tmp_path)[-1])
    skipped = {k for k, r in records.items() if r["outcome"] == "model-skipped"}
    assert skipped == {f"1/{i}/1" for i in range(0, 24, 4)}  # each hopeless one's next repetition
    assert all(records[f"1/{i}/1"]["outcome"] == "solved" for i in range(24) if i % 4)
    for key in skipped:
        assert records[key]["p_exceed"] >= 0.99 and records[key]["runtime_s"] is None
    status = json.loads((run_dirs(tmp_path)[-1] / "status.json").read_text(),
                        parse_constant=_no_infinity)  # what a browser's JSON.parse reads
    assert status["model-skipped"] == 6
    assert all(note["probability"] >= 0.99 for note in status["model_skips"])
    assert rerun.stderr.count("model-skipped: ") == 6, rerun.stderr[-3000:]
    assert "likely to run past its deadline of 3 s (predicted unbounded" in rerun.stderr


def _no_infinity(constant: str) -> None:
    raise AssertionError(f"status.json holds {constant}, which is not JSON")
