"""A CWL job laid out under the runner's root as cwltool lays it out, with its staging manifest
and the spec a worker gets: for both tiers of the staging tests."""

from __future__ import annotations

import os
from pathlib import Path

from expo_executor.frontends.cwl.staging import Staging
from expo_executor.protocol.bucket import LocalBucket


def laid_out_job(tmp_path: Path) -> tuple[Path, dict, LocalBucket, Staging]:
    """A job laid out as cwltool lays it out under the runner's root: a staged input (a link
    to the user's file, as cwltool stages it), an output and a temporary directory."""
    root = tmp_path / "runner" / "cwl"
    outdir, tmpdir, stagedir = root / "out1", root / "tmp1", root / "stg1"
    for d in (outdir, tmpdir, stagedir):
        d.mkdir(parents=True)
    source = tmp_path / "data.txt"
    source.write_text("42\n")
    (stagedir / "data.txt").symlink_to(source)
    (outdir / "empty").mkdir()  # a writable InitialWorkDir entry: an empty directory
    earlier = root / "out0" / "step0.txt"  # an earlier step's output, read where it lies
    earlier.parent.mkdir()
    earlier.write_text("from step 0\n")
    bucket = LocalBucket(tmp_path / "bucket")
    staging = Staging(bucket, root)
    stage = staging.manifest("c1", [(str(stagedir / "data.txt"), True), (str(earlier), False),
                                    (str(tmp_path / "elsewhere.txt"), False)],
                             str(outdir), str(tmpdir))
    script = ("cat {inp} {earlier} > copy.txt; ln -s copy.txt link.txt; mkdir sub; "
              "echo \"$HOME\" > sub/home.txt; echo err >&2; "
              "echo '{{\"o\": {{\"class\": \"File\", \"path\": \"'$HOME/copy.txt'\"}}}}' "
              "> cwl.output.json; exit 3")
    spec = {"argv": ["/bin/sh", "-c", script.format(inp=stagedir / "data.txt",
                                                     earlier=earlier)],
            "cwd": str(outdir), "env": {"HOME": str(outdir), "TMPDIR": str(tmpdir),
                                        "PATH": os.environ["PATH"]},
            "stage": {**stage, "stdout": str(outdir / "out.log"), "stderr": str(outdir / "err.log"),
                      "stdin": None, "outdir": str(outdir), "timelimit": None,
                      "success_codes": [0, 3]},
            "bucket": bucket.url, "worker": "w-1"}
    return root, spec, bucket, staging
