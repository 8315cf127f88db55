"""A checkpoint's directory read by an input function, on the emulated GCE path.

Snakemake's documented way to aggregate over what a checkpoint made (``glob_wildcards`` of its
output directory) reads the storage file's local copy. The checkpoint ran on a worker, so
neither the main process (its DAG update) nor the aggregating job's own snakemake (which
evaluates the input function again) has one unless it is fetched (worker/checkpoint_copies.py).
Without that, the aggregating job ran with none of the files: an empty result where plain
Snakemake on the same storage writes every line (measured side by side:
docs/snakemake-on-gce.md).
"""

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
    input: "aggregated/a.txt", "aggregated/b.txt"

checkpoint clustering:
    output: clusters=directory("clustering/{sample}")
    shell: "mkdir -p {output.clusters}; for i in 1 2 3; do echo {wildcards.sample}$i > {output.clusters}/$i.txt; done"

rule intermediate:
    input: "clustering/{sample}/{i}.txt"
    output: "post/{sample}/{i}.txt"
    shell: "cp {input} {output}"

def aggregate_input(wildcards):
    found = checkpoints.clustering.get(**wildcards).output.clusters
    return sorted(expand("post/{sample}/{i}.txt", sample=wildcards.sample,
                         i=glob_wildcards(os.path.join(found, "{i}.txt")).i))

rule aggregate:
    input: aggregate_input
    output: "aggregated/{sample}.txt"
    shell: "cat {input} > {output}"
"""


def test_an_input_function_globs_a_checkpoint_directory_made_on_a_worker(
        tmp_path: Path, fake_compute, gcs_emulator) -> None:  # noqa: F811
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    gcs.git_init(tmp_path)
    args = emulated_args(fake_compute, gcs_emulator, None, *gcs.FAST_POLLS)
    proc = run_snakemake(tmp_path, *args, env=emulated_env(gcs_emulator), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    bucket, prefix = gcs.bucket(gcs_emulator, args[args.index("--default-storage-prefix") + 1])
    for sample in "ab":
        text = bucket.blob(f"{prefix}/aggregated/{sample}.txt").download_as_text()
        assert text.split() == [f"{sample}{i}" for i in (1, 2, 3)]
