"""``workdir:`` on the emulated GCE path. Snakemake ships remote jobs only the sources below
the working directory (frontends/snakemake/shipped_sources.py): a working directory below the
Snakefile is refused in one line before any VM is asked for, where before every job failed on
its VM with ``Snakefile "../Snakefile" not found``; the layout that line advises runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import snakemake_suite_gcs as gcs
from tests.emulated_gce import created_bodies, emulated_args, emulated_env, fake_compute  # noqa: F401
from tests.gcs_emulator import gcs_emulator  # noqa: F401
from tests.helpers import run_snakemake

pytestmark = pytest.mark.slow

SNAKEFILE = """
workdir: "sub"

rule all:
    input: "out.txt"

rule make:
    output: "out.txt"
    run:
        with open(output[0], "w") as f:
            f.write("made\\n")
"""


def _run(folder: Path, fake, storage: str, *extra: str):  # noqa: ANN001, ANN202
    """snakemake in ``folder`` (its sources in git, as shipped) on the emulated GCE path; the
    process, and the run's bucket and prefix."""
    gcs.git_init(folder)
    args = emulated_args(fake, storage, None, *gcs.FAST_POLLS)
    bucket, prefix = gcs.bucket(storage, args[args.index("--default-storage-prefix") + 1])
    proc = run_snakemake(folder, *extra, *args, env=emulated_env(storage), timeout=600)
    return proc, bucket, prefix


def test_a_workdir_below_the_snakefile_is_refused_before_any_vm(
        tmp_path: Path, fake_compute, gcs_emulator) -> None:  # noqa: F811
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    proc, _, _ = _run(tmp_path, fake_compute, gcs_emulator)
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if "workdir: / --directory:" in line]
    assert len(lines) == 1 and "(../Snakefile)" in lines[0] and "fix:" in lines[0], \
        proc.stderr[-3000:]
    assert created_bodies(fake_compute) == {}


def test_the_layout_it_advises_runs(tmp_path: Path, fake_compute, gcs_emulator) -> None:  # noqa: F811
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "Snakefile").write_text(SNAKEFILE)
    proc, bucket, prefix = _run(tmp_path, fake_compute, gcs_emulator, "-s", "sub/Snakefile")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert bucket.blob(f"{prefix}/out.txt").download_as_text() == "made\n"
