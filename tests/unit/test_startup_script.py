"""The worker VM's software: pins, the wheel, and the startup script that installs them.

The fast tests check the pieces on this host (with fake curl/apt-get for the script's failure
path). The slow test runs the script as a fresh GCE debian-12 VM would, in a clean minimal
Debian root prepared by ``tests/debian_root.sh`` (``EXPOCLOUD_DEBIAN_ROOT``), against the fake
metadata server and the GCS emulator on loopback, and has the worker it installed run a job.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from expo_executor.protocol import messages
from expo_executor.engines.gce import startup
from expo_executor.protocol.bucket import LocalBucket
from expo_executor.core.errors import ExpoError

GCE_STACK = ("snakemake", "snakemake-storage-plugin-gcs", "google-cloud-storage",
             "google-cloud-compute")
PY_MINOR = f"{sys.version_info[0]}.{sys.version_info[1]}"


class FakeGcsBucket(LocalBucket):
    """A LocalBucket that names itself like a GcsBucket (bucket name + object prefix)."""

    def __init__(self, root: Path, bucket_name: str = "bkt", prefix: str = "runs/r1/") -> None:
        super().__init__(root)
        self.bucket_name = bucket_name
        self.prefix = prefix


def software(**changes: object) -> startup.WorkerSoftware:
    base: dict[str, object] = {
        "mode": "pip", "pins": ("snakemake==9.0.0", "pyyaml==6.0"),
        "wheel_object": "runs/r1/software/0123/pkg-0.1.0-py3-none-any.whl",
        "wheel_sha256": "a" * 64, "wheel_bucket": "bkt", "package_version": "0.1.0",
        "python_version": PY_MINOR}
    base.update(changes)
    return startup.WorkerSoftware(**base)  # type: ignore[arg-type]


# -- pins and the wheel ------------------------------------------------------------------------


def test_pins_are_exact_and_cover_the_gce_stack() -> None:
    pins = startup.host_pins()
    assert [p.split("==")[0] for p in pins] == sorted({p.split("==")[0] for p in pins})
    names = {}
    for pin in pins:
        assert re.fullmatch(r"[a-z0-9][a-z0-9-]*==[^=\s]+", pin), pin
        name, _, version = pin.partition("==")
        assert importlib.metadata.version(name) == version  # what this host runs
        names[name] = version
    assert set(GCE_STACK) <= set(names)
    assert startup.DIST not in names  # shipped as a wheel instead
    assert "packaging" in names and "google-auth" in names  # transitive, not just direct
    assert "cwltool" not in names and "rdflib" not in names  # the CWL runner's, not workers'


def test_unknown_extra_fails_clearly() -> None:
    with pytest.raises(ExpoError, match="no extra 'nope'"):
        startup.host_pins("nope")


def test_stage_uploads_the_wheel_under_the_bucket_prefix(tmp_path: Path) -> None:
    bucket = FakeGcsBucket(tmp_path / "bucket")
    staged = startup.stage(bucket, tmp_path / "software", find_links="/srv/wheelhouse",
                           storage_host="http://127.0.0.1:9/")
    wheel = next((tmp_path / "software").glob("*.whl"))
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert staged.wheel_sha256 == digest
    assert staged.wheel_bucket == "bkt"
    assert staged.wheel_object == f"runs/r1/software/{digest[:16]}/{wheel.name}"
    stored = bucket.read(staged.wheel_object[len(bucket.prefix):])
    assert stored is not None and stored.data == wheel.read_bytes()
    assert staged.storage_host == "http://127.0.0.1:9"
    assert staged.pins == tuple(startup.host_pins())
    assert staged.python_version == PY_MINOR
    # Staging again (a retried submit) finds the content-addressed object and is fine.
    assert startup.stage(bucket, tmp_path / "software", find_links="/srv/wheelhouse",
                         storage_host="http://127.0.0.1:9") == staged


def test_stage_needs_gcs_except_in_image_mode(tmp_path: Path) -> None:
    with pytest.raises(ExpoError, match="gs://"):
        startup.stage(LocalBucket(tmp_path / "b"), tmp_path / "software")
    image = startup.stage(LocalBucket(tmp_path / "b"), tmp_path / "software", mode="image")
    assert image.mode == "image" and image.wheel_object is None
    assert not (tmp_path / "b").joinpath("software").exists()
    assert "readonly MODE=image" in startup.render(image)


@pytest.mark.parametrize("changes, problem", [
    ({"mode": "conda"}, "unknown mode"),
    ({"pins": ("snakemake>=9",)}, "exact name==version"),
    ({"pins": ("x==1; rm -rf /",)}, "exact name==version"),
    ({"wheel_sha256": "abc"}, "64 hex"),
    ({"wheel_object": "runs/r1/software/x/../evil"}, "does not name a wheel"),
    ({"index_url": "https://i", "find_links": "/w"}, "both index_url and find_links"),
    ({"python_version": "3"}, "major.minor"),
])
def test_worker_software_rejects_bad_values(changes: dict, problem: str) -> None:
    with pytest.raises(ExpoError, match=problem):
        software(**changes)


# -- the script --------------------------------------------------------------------------------


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
    if not value:
        pytest.skip("EXPOCLOUD_DEBIAN_ROOT is unset: prepare a root with "
                    "tests/debian_root.sh ROOT (as .ci/run does) and export it")
    root = Path(value)
    if os.geteuid() != 0:
        pytest.skip("needs root (mount, chroot)")
    for tool in ("unshare", "chroot", "mount"):
        if shutil.which(tool) is None:
            pytest.skip(f"needs {tool}")
    if not (root / f"usr/bin/python{PY_MINOR}").exists():
        pytest.skip(f"the Debian root has no python{PY_MINOR}, which this host runs")
    wheelhouse = root / "srv/wheelhouse"
    have = {p.name.split("-")[0].lower() + "==" + p.name.split("-")[1]
            for p in wheelhouse.glob("*.whl")}
    missing = [pin for pin in startup.host_pins()
               if re.sub(r"[-_.]+", "_", pin.split("==")[0]) + "==" + pin.split("==")[1]
               not in have]
    assert not missing, f"{wheelhouse} lacks {missing}: re-run tests/debian_root.sh {root}"
    return root


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


@pytest.mark.slow
def test_startup_script_installs_and_runs_the_worker_in_clean_debian(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _debian_root()
    from expo_executor.protocol.bucket import open_bucket
    from expo_executor.emulator.gcs import EmulatorProcess, fresh_bucket
    from expo_executor.emulator.metadata import FakeMetadata
    from expo_executor.protocol.keys import inbox_key, result_key, status_key

    emulator = EmulatorProcess()
    metadata = None
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
        metadata = FakeMetadata(project="p", zone="europe-west1-b", name=name, attributes={
            "startup-script": startup.render(staged),
            "expocloud-worker": json.dumps({
                "v": 1, "bucket": url, "slots": 1, "poll": 0.2, "grace": 120,
                "heartbeat": 10, "storage_emulator_host": emulator.endpoint,
                "compute_endpoint": None, "self_delete": False}),
            "expocloud-run-key": run_key.hex(),
            "expocloud-halt": "touch /var/lib/expocloud-halted",
        }).start()
        vm = Vm(root, tmp_path / "vm", metadata.host)

        started = time.monotonic()
        vm.boot(metadata.attributes["startup-script"])
        wait_for("worker status", lambda: bucket.read(status_key(name)), vm, timeout=420)
        first_boot = time.monotonic() - started
        print(f"first boot: worker ready after {first_boot:.1f} s")

        # Plain "python" must be the pinned venv's, as Snakemake's remote command expects.
        # cwd null: a directory of its own on the worker's disk (work/j1, removed after the
        # job), so the report goes one level up, where it outlives the job
        job = {"argv": ["/bin/sh", "-c",
                        ("{ id -un; python -c 'import snakemake, google.cloud.compute_v1; "
                         "print(\"snakemake\", snakemake.__version__)'; pwd; } > ../out.txt")],
               "cwd": None, "env": {}, "deadline_s": 120, "cpus": 1}
        bucket.write(inbox_key(name), messages.encode(
            "inbox", {"seq": 1, "jobs": {"j1": job}, "cancel": []}, run_key))
        blob = wait_for("job result", lambda: bucket.read(result_key("j1", name)), vm,
                        timeout=120)
        result = messages.decode("result", blob.data)
        assert result["outcome"] == "solved", result

        bucket.write(inbox_key(name), messages.encode(
            "inbox", {"seq": 2, "jobs": {}, "cancel": [], "drain": True}, run_key))
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
        vm.boot(metadata.attributes["startup-script"])
        assert vm.wait(120) == 0, vm.tail()
        second_boot = time.monotonic() - started
        print(f"second boot: {second_boot:.1f} s")
        log = vm.file(startup.LOG).read_text()
        assert log.count("pinned software already installed") == 1
        assert log.count("installing ") == 1
        assert vm.file("/var/lib/expocloud-halted").exists()

        # Image mode on that disk: the versions match, so the worker just starts...
        image = startup.stage(bucket, tmp_path / "software", mode="image")
        vm.boot(startup.render(image))
        assert vm.wait(120) == 0, vm.tail()
        assert "image software matches the host" in vm.file(startup.LOG).read_text()
        # ...and an image with other versions is refused before any worker starts; the VM
        # still halts.
        vm.file("/var/lib/expocloud-halted").unlink()
        other = startup.WorkerSoftware(**{**image.__dict__, "pins": (
            *[p for p in image.pins if not p.startswith("snakemake==")], "snakemake==0.0.1")})
        vm.boot(startup.render(other))
        assert vm.wait(120) == 1, vm.tail()
        log = vm.file(startup.LOG).read_text()
        assert f"snakemake: want 0.0.1, have {snakemake_version}" in log
        assert log.count("starting expocloud-worker") == 3
        assert vm.file("/var/lib/expocloud-halted").exists()
        passed = True
    finally:
        if vm is not None:
            vm.kill()
            if passed:  # the VM's disk is ~0.5 GB: keep it only to debug a failure
                shutil.rmtree(tmp_path / "vm", ignore_errors=True)
        if metadata is not None:
            metadata.stop()
        emulator.stop()
