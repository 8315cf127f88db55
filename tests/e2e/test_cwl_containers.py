"""expocloud-cwl runs a DockerRequirement step in a container (podman on this machine, with a
locally imported image: no registry is reachable), and refuses one before any job when the
workers have no container runtime."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.helpers import require

EXPOCLOUD_CWL = str(Path(sys.executable).parent / "expocloud-cwl")
MARKER = "only-inside-the-expocloud-test-image"
IMAGE = "localhost/expocloud-cwl-test:1"
# the settings podman needs on this kind of machine (see the notes on containers)
CONTAINERS_CONF = """[containers]
default_ulimits = []
[engine]
cgroup_manager = "cgroupfs"
runtime = "runc"
"""
TOOL = f"""cwlVersion: v1.2
class: CommandLineTool
requirements:
  DockerRequirement:
    dockerPull: {IMAGE}
baseCommand: [/bin/sh, -c, 'read line < /etc/expocloud-marker; echo "$line" > found.txt']
inputs: []
outputs:
  found:
    type: File
    outputBinding: {{glob: found.txt}}
"""
WORKFLOW = """cwlVersion: v1.2
class: Workflow
inputs: []
outputs:
  found: {type: File, outputSource: look/found}
steps:
  look:
    run: tool.cwl
    in: {}
    out: [found]
"""


def _image_root(root: Path) -> None:
    """The smallest image that runs a shell: the host's /bin/sh, its libraries, a marker."""
    (root / "etc").mkdir(parents=True)
    (root / "tmp").mkdir()
    (root / "etc" / "expocloud-marker").write_text(MARKER + "\n")
    libs = subprocess.run(["ldd", "/bin/sh"], capture_output=True, text=True, check=True).stdout
    for path in ["/bin/sh", *(w for w in libs.split() if w.startswith("/"))]:
        target = root / path.lstrip("/")  # under the name the binary asks for: a copy
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(os.path.realpath(path), target)


@pytest.fixture
def podman_env(tmp_path: Path) -> dict:
    """podman with this machine's settings, and the test image imported."""
    require(shutil.which("podman") is not None, "podman is not installed "
            "(apt-get install -y podman runc)")
    conf = tmp_path / "containers.conf"
    conf.write_text(CONTAINERS_CONF)
    env = {**os.environ, "CONTAINERS_CONF": str(conf)}
    root = tmp_path / "image-root"
    _image_root(root)
    with tarfile.open(tmp_path / "root.tar", "w") as tar:
        tar.add(root, arcname=".")
    subprocess.run(["podman", "import", "-q", str(tmp_path / "root.tar"), IMAGE], env=env,
                   check=True, capture_output=True, timeout=120)
    return env


def _run(tmp_path: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "tool.cwl").write_text(TOOL)
    (tmp_path / "wf.cwl").write_text(WORKFLOW)
    return subprocess.run([EXPOCLOUD_CWL, "--outdir", str(tmp_path / "out"),
                           "--expocloud-state-dir", str(tmp_path / "state"), *args, "wf.cwl"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)


def test_a_docker_requirement_runs_in_podman_on_the_local_engine(tmp_path: Path,
                                                                  podman_env: dict) -> None:
    result = _run(tmp_path, podman_env)
    assert result.returncode == 0, result.stderr
    assert "podman run" in result.stderr  # cwltool's command, as the job log shows it
    assert (tmp_path / "out" / "found.txt").read_text() == MARKER + "\n"
    assert not Path("/etc/expocloud-marker").exists()  # the marker is the image's alone


def test_a_docker_requirement_without_a_runtime_fails_before_any_job(tmp_path: Path) -> None:
    result = _run(tmp_path, dict(os.environ), "--expocloud-container-runtime", "none")
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if "DockerRequirement of" in line]
    assert len(lines) == 1, result.stderr
    assert "tool" in lines[0] and "--expocloud-container-runtime podman" in lines[0]
    assert not list((tmp_path / "state").glob("runs/*/jobs.jsonl"))  # no job ran


def test_no_container_keeps_cwltools_own_refusal(tmp_path: Path) -> None:
    """cwltool's --no-container wins over any runtime found: its message, no job run."""
    result = _run(tmp_path, dict(os.environ), "--no-container")
    assert result.returncode != 0
    assert "--no-container, but this CommandLineTool has DockerRequirement" in result.stderr
    assert not list((tmp_path / "state").glob("runs/*/jobs.jsonl"))


STAGED_TOOL = f"""cwlVersion: v1.2
class: CommandLineTool
requirements:
  DockerRequirement:
    dockerPull: {IMAGE}
  InitialWorkDirRequirement:
    listing:
      - entryname: note.txt
        entry: "from the listing"
baseCommand: [/bin/sh, -c, 'read a < "$0"; read b < note.txt; read m < /etc/expocloud-marker;
  echo "$a|$b|$m" > both.txt']
inputs:
  data: {{type: File, inputBinding: {{position: 1}}}}
outputs:
  both:
    type: File
    outputBinding: {{glob: both.txt}}
"""


def test_a_docker_requirement_runs_with_its_files_through_the_bucket(
        tmp_path: Path, podman_env: dict) -> None:
    """Bucket staging, the GCE path's, on the local engine: an input outside the run's job root
    and a file the tool's listing makes reach the container from the worker's own copies,
    and its output comes back."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "in.txt").write_text("the input\n")
    (tmp_path / "staged.cwl").write_text(STAGED_TOOL)
    result = subprocess.run(
        [EXPOCLOUD_CWL, "--outdir", str(tmp_path / "out"), "--expocloud-state-dir",
         str(tmp_path / "state"), "--expocloud-staging", "bucket",
         "--expocloud-keep-bucket",  # kept, to see what was staged through it
         "staged.cwl", "--data",
         str(elsewhere / "in.txt")],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env=podman_env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "out" / "both.txt").read_text() == \
        f"the input|from the listing|{MARKER}\n"
    # the worker ran the container on its own copies: the bucket held the input's bytes
    staged = list((tmp_path / "state").glob("runs/*/bucket/stage/in/*"))
    assert any(path.read_bytes() == b"the input\n" for path in staged), staged
