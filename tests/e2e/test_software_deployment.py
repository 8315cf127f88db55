"""Snakemake's conda deployment on workers that share no software with this machine: each job's
snakemake builds environments in its worker's own directory (``$EXPOCLOUD_DEPLOY_DIR``), which
outlives the job's scratch directory, so a worker builds an environment once and its later jobs
reuse it. A stand-in ``conda`` records its calls (no conda channel is reachable here)."""

from __future__ import annotations

import os
from pathlib import Path

from tests.helpers import run_snakemake

# Answers what Snakemake asks of conda; "env create" makes the environment and is recorded.
CONDA = """#!/bin/sh
echo "$*" >> "{log}"
case "$*" in
  "--version") echo "conda 24.9.0" ;;
  "info --json") echo '{{"conda_prefix": "{root}", "platform": "linux-64"}}' ;;
  "config --get channel_priority --json") echo '{{"get": {{"channel_priority": "strict"}}}}' ;;
  env\\ create*)
    for arg; do case "$prev" in --prefix) mkdir -p "$arg/bin" "$arg/conda-meta" ;; esac; prev=$arg; done ;;
esac
"""
SNAKEFILE = """rule all:
    input: expand("out/{i}.txt", i=[1, 2])

rule work:
    output: "out/{i}.txt"
    conda: "env.yaml"
    shell: "echo $CONDA_PREFIX_STANDIN > {output}"
"""
# Every shared-file-system use but software deployment: the workers deploy it themselves.
SHARED = ["input-output", "persistence", "sources", "source-cache", "storage-local-copies"]


def _stand_in(tmp_path: Path) -> dict:
    root = tmp_path / "conda-root"
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "activate").write_text("CONDA_PREFIX_STANDIN=$1\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    conda = bin_dir / "conda"
    conda.write_text(CONDA.format(log=tmp_path / "conda.log", root=root))
    conda.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}"}


def test_two_jobs_on_one_worker_build_the_environment_once(tmp_path: Path) -> None:
    env = _stand_in(tmp_path)
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    (tmp_path / "env.yaml").write_text("channels: [conda-forge]\ndependencies: [python]\n")
    result = run_snakemake(tmp_path, "--executor", "expocloud", "--jobs", "2",
                           "--expocloud-max-workers", "1",
                           "--expocloud-state-dir", str(tmp_path / "state"),
                           "--software-deployment-method", "conda",
                           "--shared-fs-usage", *SHARED, env=env)
    assert result.returncode == 0, result.stderr
    creates = [line for line in (tmp_path / "conda.log").read_text().splitlines()
               if line.startswith("env create")]
    assert len(creates) == 1, creates
    prefix = creates[0].split("--prefix ")[1].strip('"')
    assert "/deploy/conda/" in prefix and not prefix.startswith(str(tmp_path / ".snakemake"))
    for i in (1, 2):  # both jobs ran in the environment the worker built
        assert (tmp_path / "out" / f"{i}.txt").read_text().strip() == prefix
