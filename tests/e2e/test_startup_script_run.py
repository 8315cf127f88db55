"""The worker VM's software for real: the wheel built, reproducible and installable, and the
startup script that installs it, run by bash (with fake curl/apt-get for its failure path).

The slow test runs the script as a fresh GCE debian-12 VM would, in a clean minimal Debian root
prepared by ``tests/debian_root.sh`` (``EXPOCLOUD_DEBIAN_ROOT``), against the fake metadata
server and the GCS emulator on loopback, and has the worker it installed run a job. (Pins,
staging and the values' checks, in process: tests/unit/engines/gce/test_startup.py.)
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import signal
import threading
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import psutil
import pytest

from expo_executor.emulator.identity import IdentityIssuer
from expo_executor.emulator.metadata import FakeMetadata
from expo_executor.engines.gce import startup, worker_wheel
from expo_executor.protocol import messages
from expo_executor.protocol.keys import boot_log_key, key_request_key
from expo_executor.protocol.records import JobSpec
from expo_executor.protocol.worker_keys import grant_verify_key, worker_key
from tests.helpers import require, write_inbox
from tests.worker_software import PY_MINOR, software

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
                assert worker_wheel.record_hash(archive.read(name)) == digest
                assert int(size) == len(archive.read(name))
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    "--target", str(target), str(first)], check=True)
    assert (target / "expo_executor" / "worker" / "agent.py").read_bytes() == \
        (Path(startup.__file__).parents[2] / "worker" / "agent.py").read_bytes()
    # From that regular (non-editable) install, the wheel is packed from the installed files
    # (RECORD) and comes out the same, byte for byte.
    again = subprocess.run(
        [sys.executable, "-c", ("import sys; from pathlib import Path; "
                                "from expo_executor.engines.gce import startup; print(startup.__file__); "
                                "print(startup.build_wheel(Path(sys.argv[1])))"),
         str(tmp_path / "c")], env={**os.environ, "PYTHONPATH": str(target)}, cwd=tmp_path,
        capture_output=True, text=True, check=True).stdout.split()
    assert again[0] == str(target / "expo_executor" / "engines" / "gce" / "startup.py")
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


def test_the_script_passes_shellcheck(tmp_path: Path) -> None:
    """startup.sh as shipped (the template), and a rendered script in each mode: no warning
    of any severity (a check is disabled only in the file, with a comment saying why)."""
    shellcheck = shutil.which("shellcheck")
    require(shellcheck is not None, "needs shellcheck (Debian: apt-get install shellcheck)")
    rendered = []
    for mode, sw in (("pip", software()), ("image", software(
            mode="image", wheel_object=None, wheel_sha256=None, wheel_bucket=None))):
        path = tmp_path / f"{mode}.sh"
        path.write_text(startup.render(sw))
        rendered.append(str(path))
    template = Path(startup.__file__).with_name(startup.SCRIPT_FILE)
    found = subprocess.run([str(shellcheck), "--shell=bash", str(template), *rendered],
                           capture_output=True, text=True)
    assert found.returncode == 0, found.stdout + found.stderr


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
# Fake curl: metadata answers, a corrupt wheel, an upload kept in boot.log (refused with
# FAKE_UPLOAD_FAILS set), and a record of each call's argv and stdin.
printf '%s\n' "$*" >>"$FAKE_LOG/argv"
out= url= data=
while [ $# -gt 0 ]; do
  case "$1" in
    -o) out=$2; shift ;;
    -H) [ "$2" = @- ] && cat >>"$FAKE_LOG/stdin"; shift ;;
    --data-binary) data=${2#@}; shift ;;
    http*) url=$1 ;;
  esac
  shift
done
case "$url" in
  */instance/service-accounts/default/token) echo '{"access_token": "SECRET-TOKEN"}' ;;
  */instance/name) printf 'expo-r1-w1' ;;
  */instance/attributes/expocloud-halt) printf 'fake-halt' ;;
  */upload/storage/v1/b/*) [ -z "${FAKE_UPLOAD_FAILS:-}" ] || exit 22; cat "$data" >"$FAKE_LOG/boot.log" ;;
  */storage/v1/b/*) echo "not the wheel" >"$out" ;;
  *) exit 22 ;;
esac
"""
# The halt command (expocloud-halt): recorded in the same sequence as curl's calls.
FAKE_HALT = '#!/bin/bash\necho HALT >>"$FAKE_LOG/argv"\ntouch "$FAKE_LOG/halted"\n'


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
        "fake-halt": FAKE_HALT,
    }
    for name, text in scripts.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (bin_dir / "python3").symlink_to(sys.executable)
    return bin_dir


def sandboxed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Point the script's absolute paths into ``tmp_path`` (so the systemd marker is absent
    unless a test makes it)."""
    for name in ("VENV", "HOME_DIR", "SCRATCH", "LOG", "LOCK", "SYSTEMD_DIR"):
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
    # The end of the log went to the run's bucket, at boot/<vm>.log, before the halt.
    upload = f"https://storage.example/upload/storage/v1/b/bkt/o?uploadType=media&name=" \
        f"{startup.quote('runs/r1/' + boot_log_key('expo-r1-w1'), safe='')}"
    calls = argv.splitlines()
    assert [c for c in calls if "/upload/" in c] == [
        f"-fsS --connect-timeout 5 --max-time 20 --retry 2 --retry-max-time 20 -H @- "
        f"-H Content-Type: text/plain; charset=utf-8 --data-binary @{_tmp_of(calls)} "
        f"-o /dev/null {upload}"]
    assert calls[-1] == "HALT" and upload in calls[-2]
    uploaded = (logs / "boot.log").read_text()
    assert "wheel checksum mismatch" in uploaded and "SECRET-TOKEN" not in uploaded
    assert uploaded.endswith("exit status 1\n")
    assert len(uploaded.splitlines()) <= startup.BOOT_LOG_LINES
    assert f"left the last {startup.BOOT_LOG_LINES} log lines in the run's bucket: {upload}" \
        in Path(startup.LOG).read_text()


def _tmp_of(calls: list[str]) -> str:
    """The temporary file the upload's body came from (it is removed afterwards)."""
    upload = next(c for c in calls if "/upload/" in c)
    return upload.split("--data-binary @", 1)[1].split(" ", 1)[0]


def _fail_setup(tmp_path: Path, path: str, sw: startup.WorkerSoftware | None = None,
                **env: str) -> subprocess.CompletedProcess[str]:
    logs = tmp_path / "logs"
    logs.mkdir()
    script = tmp_path / "startup.sh"
    script.write_text(startup.render(sw or software(storage_host="https://storage.example")))
    return subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60,
                          check=False, env={"PATH": path, "FAKE_LOG": str(logs),
                                            "GCE_METADATA_HOST": "metadata.invalid", **env})


def test_a_failed_upload_of_the_boot_log_still_halts(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    sandboxed(monkeypatch, tmp_path)
    run = _fail_setup(tmp_path, f"{fake_bin(tmp_path)}:/usr/bin:/bin", FAKE_UPLOAD_FAILS="1")
    assert run.returncode == 1, run.stdout + run.stderr
    assert (tmp_path / "logs/halted").exists() and not (tmp_path / "logs/boot.log").exists()
    assert "could not upload the boot log to https://storage.example/upload/" in \
        Path(startup.LOG).read_text()
    # without a bucket to write to (a local run), nothing is tried
    (tmp_path / "logs").rename(tmp_path / "logs-1")
    run = _fail_setup(tmp_path, f"{tmp_path / 'bin'}:/usr/bin:/bin",
                      software(storage_host="https://storage.example", run_bucket=None))
    assert run.returncode == 1 and (tmp_path / "logs/halted").exists()
    assert "/upload/" not in (tmp_path / "logs/argv").read_text()


# What the script needs besides python3: the boot log must reach the bucket without it.
BASE_TOOLS = ("bash", "cat", "cut", "date", "dirname", "flock", "mkdir", "mktemp", "rm", "sed",
              "sha256sum", "sync", "tail", "tee", "touch")


def test_the_boot_log_needs_no_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """python3 missing and apt-get failing (no network, say): the log still reaches the bucket."""
    sandboxed(monkeypatch, tmp_path)
    bin_dir = fake_bin(tmp_path)
    (bin_dir / "python3").unlink()
    (bin_dir / "apt-get").write_text('#!/bin/bash\necho "E: no network for apt-get $*"; exit 100\n')
    for tool in BASE_TOOLS:
        found = shutil.which(tool)
        assert found, tool
        (bin_dir / tool).symlink_to(found)
    run = _fail_setup(tmp_path, str(bin_dir))
    assert run.returncode == 100, run.stdout + run.stderr
    uploaded = (tmp_path / "logs/boot.log").read_text()
    assert "E: no network for apt-get -o DPkg::Lock::Timeout=300 update\n" in uploaded, uploaded
    assert "SECRET-TOKEN" not in uploaded and (tmp_path / "logs/halted").exists()


# -- the worker under systemd, or as the script's child ---------------------------------------

# Fake systemd-run and runuser: each records its argv, one argument a line, and exits with
# FAKE_WORKER_STATUS (the worker's exit status, as systemd-run --wait passes it on).
FAKE_LAUNCHER = ('#!/bin/bash\nprintf "%s\\n" "$@" >"$FAKE_LOG/$(basename "$0")"\n'
                 'exit "${FAKE_WORKER_STATUS:-0}"\n')


def _up_to_the_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                      systemd: bool) -> tuple[Path, dict[str, str]]:
    """A sandboxed VM whose image-mode venv matches this host, so the script reaches the
    worker's start (faked, as are the user's creation and systemd); the script and its env."""
    sandboxed(monkeypatch, tmp_path)
    bin_dir = fake_bin(tmp_path)
    for name, text in (("systemd-run", FAKE_LAUNCHER), ("runuser", FAKE_LAUNCHER),
                       ("install", '#!/bin/bash\necho "install $*" >>"$FAKE_LOG/touched"\n')):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    venv_bin = Path(startup.VENV) / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "python").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    (venv_bin / "expocloud-worker").write_text("#!/bin/sh\nexit 99\n")  # never run here
    for path in venv_bin.iterdir():
        path.chmod(0o755)
    if systemd:
        Path(startup.SYSTEMD_DIR).mkdir(parents=True)
    logs = tmp_path / "logs"
    logs.mkdir()
    script = tmp_path / "startup.sh"
    script.write_text(startup.render(software(
        mode="image", pins=(), wheel_object=None, wheel_sha256=None, wheel_bucket=None,
        package_version=importlib.metadata.version(startup.DIST))))
    return script, {"PATH": f"{bin_dir}:/usr/bin:/bin", "FAKE_LOG": str(logs),
                    "GCE_METADATA_HOST": "metadata.invalid"}


def test_under_systemd_the_worker_runs_in_a_unit_of_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script, env = _up_to_the_worker(tmp_path, monkeypatch, systemd=True)
    run = subprocess.run(["bash", str(script)], env={**env, "FAKE_WORKER_STATUS": "3"},
                         capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 3, run.stdout + run.stderr
    logs = tmp_path / "logs"
    assert not (logs / "runuser").exists()
    argv = (logs / "systemd-run").read_text().splitlines()
    venv, log = startup.VENV, startup.LOG
    assert argv == [
        "--unit=expocloud-worker", "--description=expocloud worker", "--service-type=exec",
        "--collect", "--wait", "--uid=expocloud", "--gid=expocloud", "--working-directory=/",
        "--property=After=network-online.target", "--property=Wants=network-online.target",
        "--property=KillMode=mixed", "--property=TimeoutStopSec=25s",
        f"--property=StandardOutput=append:{log}", f"--property=StandardError=append:{log}",
        f"--setenv=PATH={venv}/bin:/usr/local/bin:/usr/bin:/bin",
        f"--setenv=HOME={startup.HOME_DIR}", "--setenv=LANG=C.UTF-8",
        "--setenv=GCE_METADATA_HOST=metadata.invalid",
        "--", f"{venv}/bin/expocloud-worker", "--from-metadata", "--scratch", startup.SCRATCH]
    text = Path(log).read_text()
    assert "starting expocloud-worker as expocloud in the systemd unit expocloud-worker.service" \
        in text
    assert "expocloud-worker exited with status 3" in text
    # the worker ran: its exit is no failed setup, so no boot log; the VM halts as ever
    assert (logs / "halted").exists() and "/upload/" not in (logs / "argv").read_text()


def test_without_systemd_the_worker_is_the_scripts_child(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script, env = _up_to_the_worker(tmp_path, monkeypatch, systemd=False)
    run = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True,
                         timeout=60, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    logs = tmp_path / "logs"
    assert not (logs / "systemd-run").exists()
    venv = startup.VENV
    assert (logs / "runuser").read_text().splitlines() == [
        "-u", "expocloud", "--", "env", "-i", f"PATH={venv}/bin:/usr/local/bin:/usr/bin:/bin",
        f"HOME={startup.HOME_DIR}", "LANG=C.UTF-8", "GCE_METADATA_HOST=metadata.invalid",
        f"{venv}/bin/expocloud-worker", "--from-metadata", "--scratch", startup.SCRATCH]
    assert "starting expocloud-worker as expocloud\n" in Path(startup.LOG).read_text()
    assert (logs / "halted").exists()


def _rendered(script: str, names: list[str]) -> list[str]:
    """What bash holds in ``names`` after the script's rendered configuration."""
    config = script.split("# -- rendered configuration --\n", 1)[1].split("\nreadonly VENV=")[0]
    probe = config + "\nprintf '%s\\0' " + " ".join(f'"${n}"' for n in names) + \
        ' "${#REQUIREMENTS[@]}" "${REQUIREMENTS[@]}"\n'
    out = subprocess.run(["bash", "-c", probe], capture_output=True, check=True).stdout
    return out.decode().split("\0")[:-1]


def test_the_script_renders_the_requirements_and_installs_them_after_the_worker() -> None:
    hostile = "runs/$(touch PWNED)'x/software/0123/requirements.txt"
    sw = software(requirements=("expocloud_testpkg==0.1.0", "numpy==1.26.4"),
                  requirements_object=hostile, requirements_sha256="d" * 64,
                  requirements_hashed=True)
    script = startup.render(sw)
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    names = ["REQUIREMENTS_OBJECT", "REQUIREMENTS_SHA256", "REQUIREMENTS_HASHED"]
    assert _rendered(script, names) == [startup.quote(hostile, safe=""), "d" * 64, "1", "2",
                                        "expocloud_testpkg==0.1.0", "numpy==1.26.4"]
    assert _rendered(startup.render(software()), names) == ["", "", "0", "0"]
    body = script.split("\nmain() {", 1)[0]
    # installed after the worker's pins, from the same source, hashed when the file is
    install = body.split("\ninstall_venv() {", 1)[1]
    assert install.index('"$wheel"') < install.index('install_requirements "${source[@]}"') \
        < install.index('check_versions "$VENV/bin/python" || die')
    assert "hashes=(--require-hashes)" in body and '--no-deps "${hashes[@]}" "$@" -r "$file"' \
        in body
    # checked (in the stamp and the versions) so a reboot reinstalls nothing, and so an image
    # without them is refused
    assert '"$REQUIREMENTS_SHA256" "${REQUIREMENTS[@]}" | sha256sum' in body
    assert '"${PINS[@]}" "${REQUIREMENTS[@]}" <<\'PY\'' in body


def test_the_stamp_changes_with_the_requirements(tmp_path: Path) -> None:
    """The stamp decides whether a boot reinstalls: the same software gives the same stamp,
    other requirements another one."""
    def stamp(sw: startup.WorkerSoftware) -> str:
        script = startup.render(sw)
        config = script.split("# -- rendered configuration --\n", 1)[1].split(
            "\nreadonly VENV=")[0]
        body = script.split("\nstamp() {", 1)[1].split("\n}\n", 1)[0]
        return subprocess.run(["bash", "-c", f"{config}\nstamp() {{{body}\n}}\nstamp"],
                              capture_output=True, text=True, check=True).stdout

    base = dict(requirements=("a==1",), requirements_object="o/requirements.txt",
                requirements_sha256="e" * 64)
    assert stamp(software(**base)) == stamp(software(**base))
    assert stamp(software(**base)) != stamp(software(**{**base, "requirements": ("a==2",)}))
    assert stamp(software(**base)) != stamp(software(**{**base, "requirements_sha256": "f" * 64}))
    assert stamp(software(**base)) != stamp(software())


# -- the real thing in a clean Debian root -----------------------------------------------------

RUNNER = r"""
set -euo pipefail
lower=$1 upper=$2 work=$3 merged=$4
shift 4
# Private mount and PID namespaces (unshare): everything below is gone when this shell, PID 1
# of the namespace, exits, whatever happened; the explicit unmount is for tidiness.
trap 'umount -R -l "$merged" 2>/dev/null || true' EXIT
mount -t overlay overlay -o "lowerdir=$lower,upperdir=$upper,workdir=$work" "$merged"
mount -t proc proc "$merged/proc"
mount --rbind /dev "$merged/dev"
mount -t tmpfs tmpfs "$merged/run"
mount -t tmpfs tmpfs "$merged/tmp"
set +e
chroot "$merged" "$@"
"""


def _debian_root() -> Path:
    value = os.environ.get("EXPOCLOUD_DEBIAN_ROOT")
    require(bool(value), "EXPOCLOUD_DEBIAN_ROOT is unset: prepare a root with "
            "tests/debian_root.sh ROOT (as .ci/run does) and export it")
    root = Path(str(value))
    require(os.geteuid() == 0, "needs root (mount, chroot)")
    for tool in ("unshare", "chroot", "mount"):
        require(shutil.which(tool) is not None, f"needs {tool}")
    require((root / f"usr/bin/python{PY_MINOR}").exists(),
            f"the Debian root has no python{PY_MINOR}, which this host runs")
    wheelhouse = root / "srv/wheelhouse"
    have = {p.name.split("-")[0].lower() + "==" + p.name.split("-")[1]
            for p in wheelhouse.glob("*.whl")}
    missing = [pin for pin in startup.host_pins()
               if re.sub(r"[-_.]+", "_", pin.split("==")[0]) + "==" + pin.split("==")[1]
               not in have]
    assert not missing, f"{wheelhouse} lacks {missing}: re-run tests/debian_root.sh {root}"
    return root


def _cmdline(process: psutil.Process) -> list[str]:
    """A process's argv, or [] once it has exited (a job's last processes may be ending)."""
    try:
        return process.cmdline()
    except psutil.Error:
        return []


class Vm:
    """One boot of the Debian root as a VM: an overlay over the shared root keeps it clean."""

    def __init__(self, root: Path, state: Path, metadata_host: str) -> None:
        self.root = root
        self.upper = state / "upper"
        self.work = state / "work"
        self.merged = state / "merged"
        for path in (self.upper, self.work, self.merged):
            path.mkdir(parents=True, exist_ok=True)
        self.metadata_host = metadata_host
        self.console = state / "console.log"
        self.proc: subprocess.Popen | None = None

    def boot(self, script: str) -> None:
        (self.upper / "root").mkdir(exist_ok=True)
        (self.upper / "root/startup-script").write_text(script)
        env = ["/usr/bin/env", "-i",
               "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               f"GCE_METADATA_HOST={self.metadata_host}",
               # Anything that tries the internet (apt, pip, curl) hits a closed port instead.
               "http_proxy=http://127.0.0.1:9", "https_proxy=http://127.0.0.1:9",
               "no_proxy=127.0.0.1,localhost"]
        with open(self.console, "ab") as console:
            self.proc = subprocess.Popen(
                ["unshare", "--mount", "--pid", "--fork", "--kill-child",
                 "--propagation", "private", "bash", "-c", RUNNER, "runner", str(self.root),
                 str(self.upper), str(self.work), str(self.merged),
                 *env, "bash", "/root/startup-script"],
                stdout=console, stderr=subprocess.STDOUT, start_new_session=True)

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the VM did not halt within {timeout} s:\n{self.tail()}") \
                from None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop_worker(self) -> None:
        """Stop the worker as deleting the VM does: GCE's ACPI shutdown has systemd send SIGTERM
        to the startup script's processes; the worker takes it as "terminated" and exits 0."""
        assert self.proc is not None
        # the venv's python running the entry-point script (runuser's argv names it too)
        workers = [p for p in psutil.Process(self.proc.pid).children(recursive=True)
                   if _cmdline(p)[1:2] and _cmdline(p)[1].endswith("/bin/expocloud-worker")]
        assert len(workers) == 1, f"expected one worker process, found {workers}:\n{self.tail()}"
        workers[0].send_signal(signal.SIGTERM)

    def kill(self) -> None:
        if self.running():
            assert self.proc is not None
            self.proc.terminate()  # unshare --kill-child: the namespace dies with it
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def tail(self, chars: int = 6000) -> str:
        return self.console.read_text(errors="replace")[-chars:] if self.console.exists() else ""

    def file(self, path: str) -> Path:
        """A file the VM wrote (it lands in the overlay's upper layer)."""
        return self.upper / path.lstrip("/")


ISSUER = IdentityIssuer()  # Google's signer of identity tokens, emulated
CERTS_URL = "https://www.googleapis.com/oauth2/v1/certs"


def _metadata(name: str, url: str, endpoint: str, run_key: bytes,
              extra: dict[str, str] | None = None) -> FakeMetadata:
    """The metadata server a worker VM of run r1 reads: its worker settings (with the public
    key that checks its key grant), halt command and identity tokens (plus ``extra``
    attributes, such as the startup script itself). No key: the worker asks for it."""
    return FakeMetadata(project="p", zone="europe-west1-b", name=name, identity=ISSUER,
                        attributes={
        **(extra or {}),
        "expocloud-worker": json.dumps({
            "v": 1, "bucket": url, "slots": 1, "poll": 0.2, "grace": 120,
            "heartbeat": 10, "storage_emulator_host": endpoint,
            "compute_endpoint": None, "self_delete": False,
            "grant_verify_key": grant_verify_key(run_key).hex()}),
        "expocloud-halt": "touch /var/lib/expocloud-halted",
    }).start()


def serve_keys(bucket, url: str, run_key: bytes, name: str):  # type: ignore[no-untyped-def]
    """The coordinator's side of the key channel for VM ``name``, in a thread (the channel
    with its grantor, one round every 0.2 s, as the coordinator's loop runs it); returns the
    function that stops it. A coordinator grants a VM its key once; this test reboots its VM,
    so each boot's request is answered by a channel of its own (as by a coordinator started
    afresh)."""
    from expo_executor.coordinator.channel import Channel
    from expo_executor.coordinator.vms import Vm as Tracked
    from expo_executor.core.scheduler import Pool
    from expo_executor.engines.gce.key_channel import KeyGrantor

    grantor = KeyGrantor(run_key, "p", url, lambda _: "europe-west1-b", CERTS_URL,
                         ISSUER.transport(CERTS_URL))
    tracked, stopped = Tracked(name, time.time(), Pool.SPOT), threading.Event()

    def serve() -> None:
        answered, channel = None, Channel(bucket, run_key, print, grantor)
        while not stopped.wait(0.2):
            try:
                request = bucket.read(key_request_key(name))
                if request is not None and request.generation != answered:
                    answered, channel = request.generation, Channel(bucket, run_key, print,
                                                                    grantor)
                channel.statuses([tracked])
            except Exception as exc:  # noqa: BLE001 - a storage hiccup: the next round
                print(f"key service: {exc}")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()

    def stop() -> None:
        stopped.set()
        thread.join(10)
    return stop


def wait_for(what: str, check, vm: Vm, timeout: float):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        if not vm.running():
            raise AssertionError(f"the VM stopped before {what}:\n{vm.tail()}")
        time.sleep(0.5)
    raise AssertionError(f"no {what} within {timeout} s:\n{vm.tail()}")


def wait_for_new_status(bucket, key: str, generation: int, vm: Vm) -> None:  # type: ignore[no-untyped-def]
    """Wait for a status written after ``generation``: this boot's worker is up (it installs
    its signal handlers before it writes one)."""
    def newer() -> int | None:
        blob = bucket.read(key)
        return blob.generation if blob and blob.generation != generation else None
    wait_for("a new worker status", newer, vm, timeout=120)


@pytest.mark.slow
def test_startup_script_installs_and_runs_the_worker_in_clean_debian(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _debian_root()
    from expo_executor.emulator.gcs import EmulatorProcess, fresh_bucket
    from expo_executor.protocol.bucket import open_bucket
    from expo_executor.protocol.keys import result_key, status_key

    emulator = EmulatorProcess()
    metadata = None
    stop_keys = None
    vm = None
    passed = False
    try:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", emulator.endpoint)
        url = f"gs://{fresh_bucket(emulator.endpoint)}/runs/r1"
        bucket = open_bucket(url)
        staged = startup.stage(bucket, tmp_path / "software", find_links="/srv/wheelhouse",
                               storage_host=emulator.endpoint)
        run_key = os.urandom(32)
        name = "expo-r1-w1"
        metadata = _metadata(name, url, emulator.endpoint, run_key,
                             {"startup-script": startup.render(staged)})
        stop_keys = serve_keys(bucket, url, run_key, name)
        vm = Vm(root, tmp_path / "vm", metadata.host)

        started = time.monotonic()
        vm.boot(metadata.attributes["startup-script"])
        wait_for("worker status", lambda: bucket.read(status_key(name)), vm, timeout=420)
        first_boot = time.monotonic() - started
        print(f"first boot: worker ready after {first_boot:.1f} s")

        # Plain "python" must be the pinned venv's, as Snakemake's remote command expects.
        # cwd null: a directory of its own on the worker's disk (work/j1, removed after the
        # job), so the report goes one level up, where it outlives the job
        job = JobSpec(
            ["/bin/sh", "-c",
             ("{ id -un; python -c 'import snakemake, google.cloud.compute_v1; "
              "print(\"snakemake\", snakemake.__version__)'; pwd; } > ../out.txt")],
            None, {}, 120)
        write_inbox(bucket, name, 1, {"j1": job}, key=worker_key(run_key, name))
        blob = wait_for("job result", lambda: bucket.read(result_key("j1", name)), vm,
                        timeout=120)
        result = messages.decode("result", blob.data)
        assert result["outcome"] == "solved", result
        _run_snakemake_and_cwl_jobs(bucket, url, name, run_key, tmp_path, vm)

        vm.stop_worker()
        assert vm.wait(60) == 0, vm.tail()
        assert vm.file("/var/lib/expocloud-halted").exists()  # halted with expocloud-halt
        log = vm.file(startup.LOG).read_text()
        assert "expocloud-startup: installed\n" in log
        assert "expocloud-worker exited with status 0" in log
        out = vm.file(startup.SCRATCH + "/work/out.txt")
        snakemake_version = importlib.metadata.version("snakemake")
        assert out.read_text() == \
            f"expocloud\nsnakemake {snakemake_version}\n{startup.SCRATCH}/work/j1\n"
        assert not vm.file(startup.SCRATCH + "/work/j1").exists()  # removed after the job
        assert out.stat().st_uid != 0  # the unprivileged user, not root

        # A reboot: the venv is there with the right versions, so no reinstall.
        vm.file("/var/lib/expocloud-halted").unlink()
        started = time.monotonic()
        before = bucket.read(status_key(name)).generation
        vm.boot(metadata.attributes["startup-script"])
        wait_for_new_status(bucket, status_key(name), before, vm)
        vm.stop_worker()
        assert vm.wait(120) == 0, vm.tail()
        second_boot = time.monotonic() - started
        print(f"second boot: {second_boot:.1f} s")
        log = vm.file(startup.LOG).read_text()
        assert log.count("pinned software already installed") == 1
        assert log.count("installing ") == 1
        assert vm.file("/var/lib/expocloud-halted").exists()

        # Image mode on that disk: the versions match, so the worker just starts...
        image = startup.stage(bucket, tmp_path / "software", mode="image")
        _boot_image_mode(vm, bucket, status_key(name), image)
        # ...and an image with other versions is refused before any worker starts; the VM
        # still halts.
        other = startup.WorkerSoftware(**{**image.__dict__, "pins": (
            *[p for p in image.pins if not p.startswith("snakemake==")], "snakemake==0.0.1")})
        uploaded = _boot_and_fail(vm, startup.render(other), bucket, name)
        assert f"snakemake: want 0.0.1, have {snakemake_version}" in uploaded
        # A wheel that is not the one staged: refused before pip runs; the bucket says why.
        tampered = startup.WorkerSoftware(**{**staged.__dict__, "wheel_sha256": "c" * 64})
        uploaded = _boot_and_fail(vm, startup.render(tampered), bucket, name)
        assert "wheel checksum mismatch: want " + "c" * 64 in uploaded
        assert vm.file(startup.LOG).read_text().count("starting expocloud-worker") == 3
        passed = True
    finally:
        if vm is not None:
            vm.kill()
            if passed:  # the VM's disk is ~0.5 GB: keep it only to debug a failure
                shutil.rmtree(tmp_path / "vm", ignore_errors=True)
        if stop_keys is not None:
            stop_keys()
        if metadata is not None:
            metadata.stop()
        emulator.stop()


# A Snakemake job as a worker runs one: its own snakemake process (which loads every installed
# executor plugin, this one included) with the workflow's files in GCS; and first, proof that
# the host's plotting, fitting and CWL libraries are not on the VM.
SNAKEMAKE_JOB = """
import importlib.util, pathlib, subprocess, sys
import snakemake_executor_plugin_expocloud
present = [m for m in ("matplotlib", "numpy", "scipy", "cwltool") if importlib.util.find_spec(m)]
assert not present, f"the host's packages are on the worker: {present}"
pathlib.Path("Snakefile").write_text(
    'rule make:\\n    output: "made.txt"\\n    shell: "echo made by snakemake > {output}"\\n')
subprocess.run([sys.executable, "-m", "snakemake", "--snakefile", "Snakefile", "--cores", "1",
                "--default-storage-provider", "gcs", "--default-storage-prefix", sys.argv[1],
                "--storage-gcs-project", "p", "--shared-fs-usage", "none"], check=True)
"""


def _run_snakemake_and_cwl_jobs(bucket, url: str, name: str, run_key: bytes,  # type: ignore[no-untyped-def]
                                tmp_path: Path, vm: Vm) -> None:
    """The two kinds of job a worker runs, on the VM's pinned software (no host-only package):
    a Snakemake job writing its output to GCS, and a staged CWL job with a sealed secret (the
    worker opens it with cryptography), its input and output moved through the bucket."""
    from expo_executor.frontends.cwl.staging import Staging
    from expo_executor.protocol.bucket import open_bucket
    from expo_executor.protocol.keys import result_key

    workflow = f"gs://{url.split('/')[2]}/wf"
    root = tmp_path / "cwl-root"
    outdir, tmpdir, stagedir = root / "out1", root / "tmp1", root / "stg1"
    for directory in (outdir, tmpdir, stagedir):
        directory.mkdir(parents=True)
    (stagedir / "in.txt").write_text("staged input\n")
    staging = Staging(bucket, root)
    stage = staging.manifest("c1", [(str(stagedir / "in.txt"), True)], str(outdir), str(tmpdir))
    argv = ["/bin/sh", "-c", f'tr a-z A-Z < {stagedir}/in.txt > upper.txt; '
            'printf %s "$SECRET" | wc -c > secret-length.txt']
    env = {"HOME": str(outdir), "TMPDIR": str(tmpdir), "PATH": "/usr/bin:/bin",
           "SECRET": "hunter2"}
    stage.update(stdin=None, stdout=None, stderr=None, outdir=str(outdir), timelimit=None,
                 success_codes=[0], host_env=False)
    key = worker_key(run_key, name)
    jobs = {"j2": JobSpec(["python", "-c", SNAKEMAKE_JOB, workflow], None, {}, 300),
            "c1": JobSpec(argv, str(outdir), env, 120, stage=stage, redact=("hunter2",))}
    write_inbox(bucket, name, 2, jobs, key=key)  # sealed for the worker, as the coordinator does
    for key in jobs:
        blob = wait_for(f"result of {key}", lambda: bucket.read(result_key(key, name)), vm,
                        timeout=300)
        result = messages.decode("result", blob.data)
        assert result["outcome"] == "solved", result
    made = open_bucket(workflow).read("made.txt")
    assert made is not None and made.data == b"made by snakemake\n"
    staging.fetch(stage["upload"], name, str(outdir))
    assert (outdir / "upper.txt").read_text() == "STAGED INPUT\n"
    assert (outdir / "secret-length.txt").read_text().strip() == "7"


# -- the user's own packages (--expocloud-worker-requirements) ---------------------------------

TESTPKG = {"expocloud_testpkg/__init__.py": (
    '"""A package no index has: only the worker requirements can put it on a VM."""\n'
    "def greet(who):\n    return f'expocloud_testpkg greets {who}'\n")}


def _requirements_software(bucket, tmp_path: Path, endpoint: str, text: str):  # type: ignore[no-untyped-def]
    """Stage the worker software with the requirements file ``text`` read as the setting
    reads it (settings.worker_requirements), from the Debian root's wheelhouse."""
    from expo_executor.coordinator.settings import ExecutorSettings
    from expo_executor.settings.values import worker_requirements

    path = tmp_path / "requirements.txt"
    path.write_text(text)
    pins = worker_requirements(ExecutorSettings(worker_requirements=str(path)))
    return startup.stage(bucket, tmp_path / "software", find_links="/srv/wheelhouse",
                         storage_host=endpoint, requirements=pins)


def _boot_image_mode(vm: Vm, bucket, key: str, image) -> None:  # type: ignore[no-untyped-def]
    """Boot ``vm`` with image-mode software whose versions the disk has: a worker starts (a new
    status), stops cleanly, and the log says the image matched."""
    before = bucket.read(key).generation
    vm.boot(startup.render(image))
    wait_for_new_status(bucket, key, before, vm)
    vm.stop_worker()
    assert vm.wait(120) == 0, vm.tail()
    assert "image software matches the host" in vm.file(startup.LOG).read_text()


def _boot_and_fail(vm: Vm, script: str, bucket, name: str) -> str:  # type: ignore[no-untyped-def]
    """Boot ``script``, which must fail before any worker starts; the VM halts anyway, and
    leaves the end of its log (this boot's failure) in the bucket at boot/<vm>.log."""
    halted = vm.file("/var/lib/expocloud-halted")
    halted.unlink(missing_ok=True)
    bucket.delete(boot_log_key(name))
    vm.boot(script)
    assert vm.wait(180) == 1, vm.tail()
    assert halted.exists()
    log = vm.file(startup.LOG).read_text()
    blob = bucket.read(boot_log_key(name))
    assert blob is not None, log[-3000:]
    uploaded = blob.data.decode()
    assert uploaded.endswith("expocloud-startup: exit status 1\n")
    assert uploaded in log and len(uploaded.splitlines()) == startup.BOOT_LOG_LINES
    assert "fake-token" not in uploaded and "fake-token" not in log
    assert "left the last 60 log lines in the run's bucket" in log.split(uploaded, 1)[1]
    return uploaded


@pytest.mark.slow
def test_worker_requirements_are_installed_once_and_imported_by_a_job(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A job imports a package that only --expocloud-worker-requirements provides: a wheel made
    here, found by the VM's pip in the local wheelhouse (no index), pinned with its sha256 and
    installed with --require-hashes by the real startup script in the clean Debian root. A
    reboot does not reinstall; image mode checks the pin; a wrong hash and a tampered
    requirements file stop the VM before any worker starts."""
    import importlib.util

    from expo_executor.emulator.gcs import EmulatorProcess, fresh_bucket
    from expo_executor.protocol.bucket import open_bucket
    from expo_executor.protocol.keys import result_key, status_key
    from tests.worker_software import make_wheel

    root = _debian_root()
    assert importlib.util.find_spec("expocloud_testpkg") is None  # not on this host either
    assert not list((root / "srv/wheelhouse").glob("expocloud_testpkg*"))
    emulator = EmulatorProcess()
    metadata = vm = stop_keys = None
    passed = False
    try:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", emulator.endpoint)
        url = f"gs://{fresh_bucket(emulator.endpoint)}/runs/r1"
        bucket = open_bucket(url)
        wheel = make_wheel(tmp_path / "wheels", "expocloud-testpkg", "0.1.0", TESTPKG)
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        staged = _requirements_software(
            bucket, tmp_path, emulator.endpoint,
            f"# pip-compile --generate-hashes style\nexpocloud_testpkg==0.1.0 \\\n"
            f"    --hash=sha256:{digest}\n    # via the test\n")
        assert staged.requirements == ("expocloud_testpkg==0.1.0",)
        assert staged.requirements_hashed and staged.requirements_object
        stored = bucket.read(staged.requirements_object[len("runs/r1/"):])
        assert stored.data.decode() == f"expocloud_testpkg==0.1.0 --hash=sha256:{digest}\n"
        assert hashlib.sha256(stored.data).hexdigest() == staged.requirements_sha256
        run_key = os.urandom(32)
        name = "expo-r1-w1"
        metadata = _metadata(name, url, emulator.endpoint, run_key)
        stop_keys = serve_keys(bucket, url, run_key, name)
        vm = Vm(root, tmp_path / "vm", metadata.host)
        # The local package source: the wheel joins the VM's wheelhouse (--find-links).
        (vm.upper / "srv/wheelhouse").mkdir(parents=True)
        shutil.copy2(wheel, vm.upper / "srv/wheelhouse")

        vm.boot(startup.render(staged))
        wait_for("worker status", lambda: bucket.read(status_key(name)), vm, timeout=420)
        job = JobSpec(["/bin/sh", "-c", "python -c 'import expocloud_testpkg as t; "
                       "print(t.greet(\"the job\"))' > ../out.txt"], None, {}, 120)
        write_inbox(bucket, name, 1, {"j1": job}, key=worker_key(run_key, name))
        blob = wait_for("job result", lambda: bucket.read(result_key("j1", name)), vm,
                        timeout=120)
        assert messages.decode("result", blob.data)["outcome"] == "solved"
        assert vm.file(startup.SCRATCH + "/work/out.txt").read_text() == \
            "expocloud_testpkg greets the job\n"
        vm.stop_worker()
        assert vm.wait(60) == 0, vm.tail()
        log = vm.file(startup.LOG).read_text()
        assert "1 worker requirements" in log
        assert "installing 1 pinned distributions of yours" in log
        assert "--require-hashes" in vm.file("/root/startup-script").read_text()

        # A reboot of the same VM: the stamp covers the requirements, nothing is reinstalled.
        before = bucket.read(status_key(name)).generation
        vm.boot(startup.render(staged))
        wait_for_new_status(bucket, status_key(name), before, vm)
        vm.stop_worker()
        assert vm.wait(120) == 0, vm.tail()
        log = vm.file(startup.LOG).read_text()
        assert log.count("installing 1 pinned distributions of yours") == 1
        assert log.count("pinned software already installed") == 1

        # Image mode: the disk's venv has the pin, so the worker starts...
        image = startup.stage(bucket, tmp_path / "software", mode="image",
                              requirements=startup_pins("expocloud_testpkg==0.1.0"))
        _boot_image_mode(vm, bucket, status_key(name), image)
        # ...and refuses an image without the pinned version.
        other = startup.stage(bucket, tmp_path / "software", mode="image",
                              requirements=startup_pins("expocloud_testpkg==0.2.0"))
        log = _boot_and_fail(vm, startup.render(other), bucket, name)
        assert "expocloud_testpkg: want 0.2.0, have 0.1.0" in log

        # A hash that is not the wheel's: pip refuses it and the VM halts without a worker.
        wrong = _requirements_software(bucket, tmp_path, emulator.endpoint,
                                       f"expocloud_testpkg==0.1.0 --hash=sha256:{'0' * 64}\n")
        log = _boot_and_fail(vm, startup.render(wrong), bucket, name)
        assert "DO NOT MATCH THE HASHES" in log
        assert "could not install your worker requirements" in log
        # A requirements file that is not the one staged: refused before pip reads it.
        tampered = startup.WorkerSoftware(**{**staged.__dict__, "requirements_sha256": "b" * 64})
        log = _boot_and_fail(vm, startup.render(tampered), bucket, name)
        assert "requirements file checksum mismatch: want " + "b" * 64 in log
        assert vm.file(startup.LOG).read_text().count("starting expocloud-worker") == 3
        passed = True
    finally:
        if vm is not None:
            vm.kill()
            if passed:
                shutil.rmtree(tmp_path / "vm", ignore_errors=True)
        if stop_keys is not None:
            stop_keys()
        if metadata is not None:
            metadata.stop()
        emulator.stop()


def startup_pins(text: str):  # type: ignore[no-untyped-def]
    """The pins of a requirements ``text``, as the setting parses them."""
    from expo_executor.core.requirements import parse_requirements

    return parse_requirements(text, "requirements.txt")
