"""Direct jobs on the emulated GCE path (frontends/snakemake/staged_direct.py,
worker/direct_staged.py): a plain ``shell:`` job's worker runs its shell line alone, with its
storage files moved by the worker. Its outputs and log land in the bucket where Snakemake's
GCS storage plugin writes them, a downstream direct job reads them, a script from the
workflow's sources runs, a failing one reports its error and saves its log, and a ``run:`` job
still runs in its own snakemake. One run (``keep-going``, as the profile sets) shows all."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import snakemake_suite_gcs as gcs
from tests.emulated_gce import emulated_args, emulated_env, fake_compute  # noqa: F401
from tests.gcs_emulator import gcs_emulator  # noqa: F401
from tests.helpers import run_snakemake

pytestmark = pytest.mark.slow

SNAKEFILE = """
rule all:
    input: expand("out/{n}.txt", n=[1, 2]), "down.txt", "ran.txt", "who/direct.txt", "never.txt"

rule make:
    input: "in.txt"
    output: "out/{n}.txt"
    log: "logs/{n}.log"
    shell: "sh scripts/say.sh {wildcards.n} $(cat {input}) > {output}; echo logged {rule} > {log}"

rule down:
    input: "out/1.txt", "out/2.txt"
    output: "down.txt"
    shell: "cat {input} > {output}"

rule who:  # where the line ran: a direct job's root, or its own snakemake's work directory
    output: "who/direct.txt"
    shell: "pwd > {output}"

rule fail:
    output: "never.txt"
    log: "logs/fail.log"
    shell: "echo doomed-log > {log}; echo doomed-stderr >&2; exit 3"

rule ran:
    output: "ran.txt"
    run:
        with open(output[0], "w") as f:
            f.write("ran\\n")
"""


def test_direct_jobs_move_their_own_files_on_the_gce_path(
        tmp_path: Path, fake_compute, gcs_emulator) -> None:  # noqa: F811
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "say.sh").write_text('echo "said $1 $2"\n')
    gcs.git_init(tmp_path)  # the sources Snakemake ships: the script among them
    args = emulated_args(fake_compute, gcs_emulator, None, *gcs.FAST_POLLS)
    bucket, prefix = gcs.bucket(gcs_emulator, args[args.index("--default-storage-prefix") + 1])
    bucket.blob(f"{prefix}/in.txt").upload_from_string("input\n")
    proc = run_snakemake(tmp_path, *args, env=emulated_env(gcs_emulator), timeout=600)
    assert proc.returncode != 0, proc.stderr[-3000:]  # the failing job
    text = {name: bucket.blob(f"{prefix}/{name}").download_as_text() for name in
            ("out/1.txt", "out/2.txt", "logs/1.log", "down.txt", "ran.txt", "who/direct.txt")}
    assert text["out/1.txt"] == "said 1 input\n" and text["out/2.txt"] == "said 2 input\n"
    assert text["logs/1.log"] == "logged make\n"
    assert text["down.txt"] == "said 1 input\nsaid 2 input\n"
    assert text["ran.txt"] == "ran\n"
    assert text["who/direct.txt"].rstrip().endswith("/root")  # worker/job_starts.py
    # the failure: its exit code and stderr in the error block, its log stored, no output
    assert "doomed-stderr" in proc.stderr and "exit code 3" in proc.stderr, proc.stderr[-3000:]
    assert bucket.blob(f"{prefix}/logs/fail.log").download_as_text() == "doomed-log\n"
    assert not bucket.blob(f"{prefix}/never.txt").exists()
    # make x2, down, who, fail: direct; ran: its own snakemake
    assert "expocloud: 5 jobs ran directly" in proc.stderr, proc.stderr[-3000:]
