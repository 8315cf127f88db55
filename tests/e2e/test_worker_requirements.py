"""--expocloud-worker-requirements through both front ends on the local engine: the flag (and
the profile key) is accepted, the run says in one line that nothing is installed, and the jobs
run in this machine's environment. (Installing on a VM: tests/e2e/test_startup_script_run.py; bad
files before any VM: tests/bad_input_cases.py.)
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

from tests.helpers import processes_under, run_snakemake

EXPOCLOUD_CWL = str(Path(sys.executable).parent / "expocloud-cwl")
NOTE = "the local engine installs nothing from --expocloud-worker-requirements (2 pins)"
SNAKEFILE = """
rule all:
    input: "out.txt"

rule work:
    output: "out.txt"
    shell: "python -c 'import yaml; print(yaml.__version__)' > {output}"
"""
TOOL = """cwlVersion: v1.2
class: CommandLineTool
baseCommand: [python, -c, "import yaml; print(yaml.__version__)"]
stdout: out.txt
inputs: []
outputs:
  out: {type: stdout}
"""


def _requirements(tmp_path: Path) -> Path:
    path = tmp_path / "requirements.txt"
    path.write_text(f"pyyaml=={importlib.metadata.version('pyyaml')}\n"
                    "expocloud_testpkg==0.1.0  # only a GCE worker would get it\n")
    return path


def test_snakemake_local_run_notes_the_requirements_once_and_runs(tmp_path: Path) -> None:
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    _requirements(tmp_path)
    (tmp_path / "prof").mkdir()
    (tmp_path / "prof/config.yaml").write_text(
        "executor: expocloud\nexpocloud-worker-requirements: requirements.txt\n")
    result = run_snakemake(tmp_path, "--workflow-profile", "prof", "-j", "1")
    assert result.returncode == 0, result.stderr[-3000:]
    log = result.stdout + result.stderr
    assert log.count(NOTE) == 1, log[-3000:]
    assert "expocloud_testpkg (pinned 0.1.0, here missing)" in log
    assert (tmp_path / "out.txt").read_text() == importlib.metadata.version("pyyaml") + "\n"
    assert not processes_under(tmp_path)


def test_cwl_local_run_notes_the_requirements_once_and_runs(tmp_path: Path) -> None:
    (tmp_path / "tool.cwl").write_text(TOOL)
    requirements = _requirements(tmp_path)
    result = subprocess.run(
        [EXPOCLOUD_CWL, "--outdir", str(tmp_path / "out"), "--expocloud-state-dir",
         str(tmp_path / ".expocloud"), "--expocloud-worker-requirements", str(requirements),
         "tool.cwl"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (result.stdout + result.stderr).count(NOTE) == 1, result.stderr[-3000:]
    assert (tmp_path / "out/out.txt").read_text() == importlib.metadata.version("pyyaml") + "\n"
    assert not processes_under(tmp_path)
