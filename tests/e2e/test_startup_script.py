"""The worker VM's software: pins, the wheel, and the startup script that installs them.

The fast tests check the pieces on this host (with fake curl/apt-get for the script's failure
path). The slow test runs the script as a fresh GCE debian-12 VM would, in a clean minimal
Debian root prepared by ``tests/debian_root.sh`` (``EXPOCLOUD_DEBIAN_ROOT``), against the fake
metadata server and the GCS emulator on loopback, and has the worker it installed run a job.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from expo_executor.engines.gce import startup

PY_MINOR = f"{sys.version_info[0]}.{sys.version_info[1]}"


def software(**changes: object) -> startup.WorkerSoftware:
    base: dict[str, object] = {
        "mode": "pip", "pins": ("snakemake==9.0.0", "pyyaml==6.0"),
        "wheel_object": "runs/r1/software/0123/pkg-0.1.0-py3-none-any.whl",
        "wheel_sha256": "a" * 64, "wheel_bucket": "bkt", "package_version": "0.1.0",
        "python_version": PY_MINOR}
    base.update(changes)
    return startup.WorkerSoftware(**base)  # type: ignore[arg-type]


# -- pins and the wheel ------------------------------------------------------------------------


def test_wheel_is_installable_and_reproducible(tmp_path: Path) -> None:
    first = startup.build_wheel(tmp_path / "a")
    second = startup.build_wheel(tmp_path / "b")
    assert first.read_bytes() == second.read_bytes()
    version = importlib.metadata.version(startup.DIST)
    assert first.name == f"snakemake_executor_plugin_expocloud-{version}-py3-none-any.whl"
    with zipfile.ZipFile(first) as archive:
        names = set(archive.namelist())
        assert {"expo_executor/worker/agent.py", "expo_executor/engines/gce/startup.py",
                "snakemake_executor_plugin_expocloud/__init__.py"} <= names
        assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
        info = f"snakemake_executor_plugin_expocloud-{version}.dist-info"
        assert "expocloud-worker" in archive.read(f"{info}/entry_points.txt").decode()
        # RECORD must hold: pip verifies nothing, but the VM and auditors may.
        for line in archive.read(f"{info}/RECORD").decode().splitlines():
            name, digest, size = line.rsplit(",", 2)
            if digest:
                assert startup._record_hash(archive.read(name)) == digest
                assert int(size) == len(archive.read(name))
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    "--target", str(target), str(first)], check=True)
    assert (target / "expo_executor" / "worker.py").read_bytes() == \
        Path(startup.__file__).with_name("worker.py").read_bytes()
    # From that regular (non-editable) install, the wheel is packed from the installed files
    # (RECORD) and comes out the same, byte for byte.
    again = subprocess.run(
        [sys.executable, "-c", ("import sys; from pathlib import Path; "
                                "from expo_executor import startup; print(startup.__file__); "
                                "print(startup.build_wheel(Path(sys.argv[1])))"),
         str(tmp_path / "c")], env={**os.environ, "PYTHONPATH": str(target)}, cwd=tmp_path,
        capture_output=True, text=True, check=True).stdout.split()
    assert again[0] == str(target / "expo_executor" / "startup.py")
    assert Path(again[1]).read_bytes() == first.read_bytes()


# -- the script --------------------------------------------------------------------------------


def test_script_is_valid_bash_in_both_modes(tmp_path: Path) -> None:
    for sw in (software(), software(mode="image", wheel_object=None, wheel_sha256=None,
                                    wheel_bucket=None)):
        script = startup.render(sw)
        assert script.startswith("#!/bin/bash\n") and "set -euo pipefail" in script
        path = tmp_path / "s.sh"
        path.write_text(script)
        subprocess.run(["bash", "-n", str(path)], check=True)
        assert "expocloud-run-key" not in script  # the worker reads the key; not the script


HOSTILE = "x'; touch PWNED; echo '$(touch PWNED)`touch PWNED`\"\n\\ $HOME *"


def test_hostile_values_stay_data(tmp_path: Path) -> None:
    sw = software(index_url=HOSTILE, storage_host=HOSTILE, package_version=HOSTILE,
                  wheel_bucket=HOSTILE, wheel_object="p/" + HOSTILE.replace("/", "") + "/w.whl")
    script = startup.render(sw)
    config = script.split("# -- rendered configuration --\n", 1)[1].split("\nreadonly VENV=")[0]
    probe = config + '\nprintf "%s\\0" "$INDEX_URL" "$STORAGE_HOST" "$PACKAGE_VERSION" ' \
        '"$WHEEL_BUCKET" "$WHEEL_OBJECT" "$WHEEL_FILE" "${PINS[@]}"\n'
    out = subprocess.run(["bash", "-c", probe], cwd=tmp_path, capture_output=True,
                         check=True).stdout.decode()
    from urllib.parse import quote
    assert out.split("\0")[:-1] == [
        HOSTILE, HOSTILE.rstrip("/"), HOSTILE, quote(HOSTILE, safe=""),
        quote(sw.wheel_object, safe=""), "w.whl", *sw.pins]
    assert not (tmp_path / "PWNED").exists()


FAKE_CURL = r"""#!/bin/bash
# Fake curl: metadata answers, a corrupt wheel, and a record of each call's argv and stdin.
printf '%s\n' "$*" >>"$FAKE_LOG/argv"
out= url=
while [ $# -gt 0 ]; do
  case "$1" in
    -o) out=$2; shift ;;
    -H) [ "$2" = @- ] && cat >>"$FAKE_LOG/stdin"; shift ;;
    http*) url=$1 ;;
  esac
  shift
done
case "$url" in
  */instance/service-accounts/default/token) echo '{"access_token": "SECRET-TOKEN"}' ;;
  */instance/attributes/expocloud-halt) printf 'touch %s' "$FAKE_LOG/halted" ;;
  */storage/v1/b/*) echo "not the wheel" >"$out" ;;
  *) exit 22 ;;
esac
"""


def fake_bin(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scripts = {
        "curl": FAKE_CURL,
        "apt-get": '#!/bin/bash\necho "apt-get $*" >>"$FAKE_LOG/apt"\n',
        "id": ('#!/bin/bash\n[ "$1" = -u ] && [ $# = 1 ] && { echo 0; exit; }\n'
               'exec /usr/bin/id "$@"\n'),
        "useradd": '#!/bin/bash\necho "useradd $*" >>"$FAKE_LOG/touched"\n',
        "runuser": '#!/bin/bash\necho "runuser $*" >>"$FAKE_LOG/touched"\n',
    }
    for name, text in scripts.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (bin_dir / "python3").symlink_to(sys.executable)
    return bin_dir


def sandboxed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Point the script's absolute paths into ``tmp_path``."""
    for name in ("VENV", "HOME_DIR", "SCRATCH", "LOG", "LOCK"):
        path = str(tmp_path / "vm" / getattr(startup, name).lstrip("/"))
        monkeypatch.setattr(startup, name, path)


def test_wrong_wheel_checksum_fails_before_installing(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    sandboxed(monkeypatch, tmp_path)
    logs = tmp_path / "logs"
    logs.mkdir()
    script = tmp_path / "startup.sh"
    script.write_text(startup.render(software(storage_host="https://storage.example")))
    env = {"PATH": f"{fake_bin(tmp_path)}:/usr/bin:/bin", "FAKE_LOG": str(logs),
           "GCE_METADATA_HOST": "metadata.invalid"}
    run = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True,
                         timeout=60, check=False)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "wheel checksum mismatch" in run.stdout
    assert not Path(startup.VENV).exists()  # nothing installed
    assert not list(Path(startup.VENV).parent.joinpath("downloads").iterdir())  # removed
    assert not (logs / "touched").exists()  # no user, no worker
    assert (logs / "halted").exists()  # a failed VM halts rather than bills
    assert "wheel checksum mismatch" in Path(startup.LOG).read_text()
    argv = (logs / "argv").read_text()
    assert "https://storage.example/storage/v1/b/bkt/o/runs%2Fr1%2Fsoftware%2F0123%2F" in argv
    assert "SECRET-TOKEN" not in argv and "SECRET-TOKEN" in (logs / "stdin").read_text()


# -- the real thing in a clean Debian root -----------------------------------------------------
