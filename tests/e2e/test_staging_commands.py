"""Staged jobs (CWL) run for real: inputs up through the bucket, the command run under the
worker's own root with its streams and time limit, outputs back with every path rebased; a time
limit kills the whole process group; a missing command is named. (The staging's checks, in
process: tests/unit/frontends/cwl/test_staging.py.)"""

from __future__ import annotations

import json
import os
from pathlib import Path

from expo_executor.worker.staged_job import main as staged_main
from expo_executor.worker.staged_job import STAGED_SPEC, run, verdict_path

from tests.cwl_job import laid_out_job
from tests.helpers import processes_under


def test_round_trip_rebases_every_path_and_brings_outputs_back(tmp_path: Path) -> None:
    root, spec, bucket, staging = laid_out_job(tmp_path)
    # relative to the root, links followed; an unstaged file outside the root is not shipped
    assert [rel for rel, _, _ in spec["stage"]["inputs"]] == ["out0/step0.txt", "stg1/data.txt"]
    here = tmp_path / "worker" / "jobs" / "c1"
    outcome, code, reason = run(spec, here)
    assert (outcome, code, reason) == ("solved", 3, None)  # 3 is a success code of this tool
    worker_out = here / "root" / "out1"
    assert (worker_out / "copy.txt").read_text() == "42\nfrom step 0\n"
    assert (worker_out / "empty").is_dir()
    # the command saw the worker's paths, never the runner's
    assert (worker_out / "sub" / "home.txt").read_text().strip() == str(worker_out)
    assert str(root) not in (worker_out / "sub" / "home.txt").read_text()
    outdir = root / "out1"
    (outdir / "stale.txt").write_text("left over from staging")
    staging.fetch(spec["stage"]["upload"], "w-1", str(outdir))
    assert (outdir / "copy.txt").read_text() == "42\nfrom step 0\n"
    assert (outdir / "err.log").read_text() == "err\n"
    assert (outdir / "empty").is_dir()
    # the tool's own output record names the runner's paths again
    assert json.loads((outdir / "cwl.output.json").read_text())["o"]["path"] == \
        str(outdir / "copy.txt")
    assert os.readlink(outdir / "link.txt") == "copy.txt"
    assert (outdir / "sub" / "home.txt").exists()
    assert not (outdir / "stale.txt").exists()  # the outdir is what the worker left, exactly


def test_time_limit_kills_the_whole_process_group(tmp_path: Path) -> None:
    _, spec, _, _ = laid_out_job(tmp_path)
    spec["argv"] = ["/bin/sh", "-c", "sleep 60 & sleep 60; wait"]
    spec["stage"]["timelimit"] = 0.5
    spec_path = tmp_path / "worker" / "jobs" / "c1" / STAGED_SPEC
    spec_path.parent.mkdir(parents=True)
    spec_path.write_text(json.dumps(spec))
    assert staged_main([str(spec_path)]) == 124
    verdict = json.loads(verdict_path(spec_path).read_text())
    assert verdict["outcome"] == "timeout" and verdict["returncode"] is None
    assert "time limit of 0.5 s" in verdict["reason"]
    assert not processes_under(tmp_path / "worker"), "a child of the command survived"


def test_a_missing_command_fails_with_its_name(tmp_path: Path) -> None:
    _, spec, _, _ = laid_out_job(tmp_path)
    spec["argv"] = ["no-such-program-here"]
    outcome, code, reason = run(spec, tmp_path / "worker" / "c1")
    assert outcome == "failed" and code is None and "no-such-program-here" in reason
