"""The software of a worker VM: pins, this package's wheel, and the GCE startup script.

A worker must run exactly the code the submitting host runs, or a sweep silently mixes
versions. So the host computes the transitive closure of what a worker needs of this
distribution's requirements (``WORKER_NEEDS``: not the plotting, fitting and CWL-parsing
libraries only the host uses) as ``name==version`` pins of what it has installed, ships its own copy of this package (which is
not on PyPI) as a wheel (``worker_wheel``) in the run's bucket, and renders a startup script that installs exactly
that closure with ``pip install --no-deps`` into a venv: no resolver runs on the VM, so nothing
can drift. In "image" mode the user's image already holds the venv and the script only checks
the versions. The user's own packages (``--expocloud-worker-requirements``, exact pins parsed
by ``core.requirements``) follow the same rules: their requirements file is staged next to the
wheel, checked by sha256 on the VM and installed with ``--no-deps`` (``--require-hashes`` when
hashed) into the same venv; image mode checks their versions.

The script (metadata key ``startup-script``; its bash is ``startup.sh`` beside this module, which
render() fills in) re-runs on every boot. It installs once (a stamp
in the venv records what was installed, the user's packages included, so a reboot of the same
VM reinstalls nothing), starts ``expocloud-worker --from-metadata`` as the unprivileged user
``expocloud`` (in a systemd unit of its own where systemd runs, so that a shutdown stops it
before the network and its output does not hang on the script's), waits for it, and halts the VM with the metadata attribute ``expocloud-halt`` (default
``poweroff``) when the worker exits or the setup fails, so that a broken VM does not keep
billing. A VM whose setup failed first leaves the last lines of its log in the run's bucket
(``protocol.keys.boot_log_key``), so that the coordinator can say why a pool's VMs never came
up instead of replacing them blindly. It holds no secret: the worker reads the run key from
metadata itself, and the script's access token never reaches its log.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import re
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from expo_executor.core.errors import ExpoError
from expo_executor.core.requirements import SETTING as REQUIREMENTS_SETTING
from expo_executor.core.requirements import UserPin, requirements_text, worker_clashes
from expo_executor.protocol.bucket import Bucket, PreconditionFailed
from expo_executor.engines.gce.worker_wheel import DIST, build_wheel, own_distribution
from expo_executor.protocol.keys import boot_log_key

DEFAULT_STORAGE_HOST = "https://storage.googleapis.com"
SOFTWARE_PREFIX = "software"  # bucket keys of staged wheels: software/<sha256[:16]>/<wheel>
MODES = ("pip", "image")
VENV = "/opt/expocloud/venv"  # image mode: the image must hold the venv here
HOME_DIR = "/var/lib/expocloud"  # the worker user's home
SCRATCH = "/var/lib/expocloud/scratch"
LOG = "/var/log/expocloud-startup.log"
LOCK = "/run/expocloud-startup.lock"
BOOT_LOG_LINES = 60  # what a failed boot leaves in the bucket: the end of its log
SYSTEMD_DIR = "/run/systemd/system"  # exists when systemd is PID 1 (sd_booted(3))
WORKER_UNIT = "expocloud-worker"  # the transient service the worker runs in under systemd
# A Spot VM is powered off hard 30 s after its preemption notice, which starts the shutdown:
# the worker, stopped first, has this long to report its jobs before systemd kills it.
WORKER_STOP_TIMEOUT_S = 25
# What a worker runs, of this package's own requirements: the worker (its bucket, sealed CWL
# secrets, deleting its own VM), Snakemake's jobs (snakemake, which loads this plugin in every
# job, and its GCS storage plugin) and staged CWL jobs (this package alone). The rest serves
# only the machine that drives the run: matplotlib (and numpy) draw reports, scipy fits
# preemption models, cwltool evaluates CWL jobs before they reach a worker, the Cloud Billing
# client refreshes prices. tests/unit/engines/gce/test_startup.py checks this against the imports
# the worker's code can reach.
WORKER_NEEDS = frozenset({
    "snakemake", "snakemake-interface-executor-plugins", "snakemake-interface-common",
    "cryptography", "google-cloud-compute", "google-cloud-storage", "snakemake-storage-plugin-gcs",
})
_PIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9][A-Za-z0-9.+!_-]*$")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def host_pins(extra: str | None = "gce") -> list[str]:
    """``name==version`` for every distribution a worker needs: the closure of this package's
    requirements (with ``extra``) named in ``WORKER_NEEDS``, as installed here, sorted; this
    package itself is left out (workers get it as a wheel).

    Markers are evaluated for this host; the VM runs the same Python major.minor, and the
    script checks that. A requirement that is not installed here is an error: pinning
    something the host does not run would defeat the purpose.
    """
    from packaging.requirements import Requirement  # a dependency of snakemake

    own = own_distribution()
    provided = {_canonical(e) for e in (own.metadata.get_all("Provides-Extra") or [])}
    if extra is not None and _canonical(extra) not in provided:
        raise ExpoError(
            "worker software",
            f"the installed metadata of {DIST} {own.version} declares no extra {extra!r} "
            f"(it declares {sorted(provided) or 'none'}); an install older than setup.cfg?",
            f"reinstall: pip install -e '.[{extra}]' (or without -e for a regular install)",
        )
    versions: dict[str, str] = {}
    done: dict[str, set[str]] = {}
    todo: list[tuple[str, set[str], str]] = [(DIST, {extra} if extra else set(), "")]
    while todo:
        name, extras, wanted_by = todo.pop()
        key = _canonical(name)
        if key in done and extras <= done[key]:
            continue
        if key == _canonical(DIST):
            dist = own
        else:
            try:
                dist = importlib.metadata.distribution(name)
            except importlib.metadata.PackageNotFoundError:
                raise ExpoError(
                    "worker software",
                    f"{name} (required by {wanted_by}) is not installed on this host, so there "
                    "is no version to pin for the workers",
                    f"install it here, e.g. pip install -e '.[{extra or ''}]'",
                ) from None
        metadata = dist.metadata  # parsed on each access: once per distribution here
        versions[key] = metadata["Version"]
        done[key] = done.get(key, set()) | extras
        environments = [{"extra": e} for e in ("", *sorted(extras))]
        label = f"{metadata['Name']} {metadata['Version']}"
        for line in metadata.get_all("Requires-Dist") or dist.requires or []:  # or requires.txt
            req = Requirement(line)
            if key == _canonical(DIST) and _canonical(req.name) not in WORKER_NEEDS:
                continue  # the host's alone
            if req.marker is None or any(req.marker.evaluate(env) for env in environments):
                todo.append((req.name, set(req.extras), label))
    versions.pop(_canonical(DIST), None)
    return [f"{name}=={version}" for name, version in sorted(versions.items())]


# -- the wheel ---------------------------------------------------------------------------------


# -- staging -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkerSoftware:
    """Everything the startup script needs to give a VM the host's software.

    ``wheel_bucket``/``wheel_object`` name the staged wheel in GCS (the full object name,
    including the run's prefix); image mode has no wheel. ``find_links`` (a directory or URL
    of wheels, used with ``--no-index``) and ``index_url`` are alternatives to PyPI; the
    user's packages come from the same source.

    ``requirements`` are the user's own ``name==version`` pins
    (``--expocloud-worker-requirements``). In pip mode their requirements file (with any
    hashes) is staged next to the wheel as ``requirements_object`` in the same bucket, and the
    VM checks it against ``requirements_sha256``; image mode only checks their versions.

    ``run_bucket`` and ``run_prefix`` (``""`` or ending in ``/``) name the run's bucket and
    object prefix, where a VM whose setup failed leaves its log's last lines; without a
    bucket (a local one in tests) nothing is uploaded.
    """

    mode: str
    pins: tuple[str, ...]
    wheel_object: str | None
    wheel_sha256: str | None
    index_url: str | None = None
    find_links: str | None = None
    storage_host: str = DEFAULT_STORAGE_HOST
    python_version: str = f"{sys.version_info[0]}.{sys.version_info[1]}"
    wheel_bucket: str | None = None
    package_version: str = ""
    requirements: tuple[str, ...] = ()
    requirements_object: str | None = None
    requirements_sha256: str | None = None
    requirements_hashed: bool = False
    run_bucket: str | None = None
    run_prefix: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "pins", tuple(self.pins))
        object.__setattr__(self, "requirements", tuple(self.requirements))
        self._check_requirements()
        if self.mode not in MODES:
            raise ExpoError("worker software", f"unknown mode {self.mode!r}",
                            f"use one of {', '.join(MODES)}")
        bad = [pin for pin in self.pins if not _PIN.match(pin)]
        if bad:
            raise ExpoError("worker software", f"pins must be exact name==version, not {bad}",
                            "compute them with host_pins()")
        if not re.fullmatch(r"\d+\.\d+", self.python_version):
            raise ExpoError("worker software", f"python_version {self.python_version!r} is not "
                            "major.minor", "use e.g. 3.11")
        if self.index_url and self.find_links:
            raise ExpoError("worker software", "both index_url and find_links are set",
                            "choose one: find_links installs with --no-index")
        if self.run_prefix and not self.run_prefix.endswith("/"):
            raise ExpoError("worker software", f"run_prefix {self.run_prefix!r} must end in /",
                            "use stage(), which takes it from the run's bucket")
        if self.mode == "pip":
            if not (self.wheel_bucket and self.wheel_object):
                raise ExpoError("worker software", "pip mode needs the staged wheel's bucket and "
                                "object", "use stage()")
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._+-]*\.whl", self.wheel_file):
                raise ExpoError("worker software", f"{self.wheel_object!r} does not name a wheel",
                                "use stage()")
            if not re.fullmatch(r"[0-9a-f]{64}", self.wheel_sha256 or ""):
                raise ExpoError("worker software", "wheel_sha256 must be 64 hex digits",
                                "use stage()")

    def _check_requirements(self) -> None:
        bad = [pin for pin in self.requirements if not _PIN.match(pin)]
        if bad:
            raise ExpoError("worker software", f"requirements must be exact name==version, "
                            f"not {bad}", "parse them with core.requirements")
        staged = self.requirements_object is not None
        if self.mode == "pip" and bool(self.requirements) != staged:
            raise ExpoError("worker software", "pip mode stages the requirements file exactly "
                            "when there are requirements", "use stage()")
        if staged and not re.fullmatch(r"[0-9a-f]{64}", self.requirements_sha256 or ""):
            raise ExpoError("worker software", "requirements_sha256 must be 64 hex digits",
                            "use stage()")

    @property
    def wheel_file(self) -> str:
        return (self.wheel_object or "").rsplit("/", 1)[-1]


def _stage_object(bucket: Bucket, name: str, data: bytes) -> tuple[str, str]:
    """Upload ``data`` to ``software/<sha256[:16]>/<name>`` (content-addressed: a re-run finds
    it there); returns the full object name and the sha256."""
    digest = hashlib.sha256(data).hexdigest()
    key = f"{SOFTWARE_PREFIX}/{digest[:16]}/{name}"
    try:
        bucket.write(key, data, if_generation_match=0)
    except PreconditionFailed:
        pass  # already staged by an earlier attempt; the VM checks sha256
    return getattr(bucket, "prefix", "") + key, digest


def check_clashes(requirements: Sequence[UserPin], pins: Sequence[str] | None = None) -> None:
    """Refuse a user's pin of a distribution the workers run at another version (``pins``,
    default this host's): pip would break the worker's own software, or the image check fail.
    Called by the settings' checks, before any VM, and again before anything is staged."""
    if not requirements:
        return
    clashes = worker_clashes(requirements, host_pins() if pins is None else pins, DIST)
    if clashes:
        raise ExpoError(REQUIREMENTS_SETTING, "it pins what the workers' own software pins "
                        "differently: " + "; ".join(clashes),
                        "pin the version the workers run, or drop the line")


def _requirements_fields(bucket: Bucket | None, requirements: Sequence[UserPin]) -> dict:
    """The WorkerSoftware fields of the user's pins, their file staged to ``bucket`` (None:
    image mode, nothing to stage)."""
    fields: dict = {"requirements": tuple(p.pin for p in requirements),
                    "requirements_hashed": any(p.hashes for p in requirements)}
    if requirements and bucket is not None:
        fields["requirements_object"], fields["requirements_sha256"] = _stage_object(
            bucket, "requirements.txt", requirements_text(requirements).encode())
    return fields


def stage(bucket: Bucket, software_dir: Path, *, mode: str = "pip", extra: str | None = "gce",
          index_url: str | None = None, find_links: str | None = None,
          storage_host: str | None = None,
          requirements: Sequence[UserPin] = ()) -> WorkerSoftware:
    """Pin the host's software and, in pip mode, build the wheel in ``software_dir`` and upload
    it, and the user's ``requirements`` file, to ``software/<sha256[:16]>/`` in the run's
    bucket. ``storage_host`` defaults to ``STORAGE_EMULATOR_HOST`` when that is set (the
    coordinator then talks to an emulator, so must the VMs), else to GCS.
    """
    if mode not in MODES:
        raise ExpoError("worker software", f"unknown mode {mode!r}",
                        f"use one of {', '.join(MODES)}")
    pins = tuple(host_pins(extra))
    check_clashes(requirements, pins)
    version = own_distribution().version
    host = storage_host or os.environ.get("STORAGE_EMULATOR_HOST") or DEFAULT_STORAGE_HOST
    common = {"index_url": index_url, "find_links": find_links,
              "storage_host": host.rstrip("/"), "package_version": version,
              "run_bucket": getattr(bucket, "bucket_name", None),
              "run_prefix": getattr(bucket, "prefix", "")}
    if mode == "image":
        return WorkerSoftware(mode="image", pins=pins, wheel_object=None, wheel_sha256=None,
                              **common, **_requirements_fields(None, requirements))
    bucket_name = getattr(bucket, "bucket_name", None)
    if not bucket_name:
        raise ExpoError("worker software", "VMs download the wheel from GCS, but the run's bucket "
                        f"is {type(bucket).__name__}", "use a gs:// bucket for VM engines")
    wheel = build_wheel(Path(software_dir))
    wheel_object, digest = _stage_object(bucket, wheel.name, wheel.read_bytes())
    return WorkerSoftware(mode="pip", pins=pins, wheel_object=wheel_object, wheel_sha256=digest,
                          wheel_bucket=bucket_name, **common,
                          **_requirements_fields(bucket, requirements))


# -- the script --------------------------------------------------------------------------------

SCRIPT_FILE = "startup.sh"  # the script's body, a package file beside this module
_BODY_MARKER = "\n# -- body --\n"  # what precedes it in the file is for its readers alone


def script_body() -> str:
    """The startup script's body (startup.sh below its header), its ``__NAME__`` paths not yet
    replaced. A file of its own so that shellcheck reads it; setup.cfg ships it with the
    package."""
    text = (Path(__file__).parent / SCRIPT_FILE).read_text(encoding="utf-8")
    return text.split(_BODY_MARKER, 1)[1]


def _q(value: str | None) -> str:
    return shlex.quote(value or "")


def worker_unit_properties() -> list[str]:
    """The systemd properties of the worker's service (``systemd-run --property``): stopped
    before the network at shutdown, SIGTERM to the worker only, a stop timeout within Spot's
    notice, and its output appended to the startup log by systemd, not through a pipe."""
    return ["After=network-online.target", "Wants=network-online.target", "KillMode=mixed",
            f"TimeoutStopSec={WORKER_STOP_TIMEOUT_S}s", f"StandardOutput=append:{LOG}",
            f"StandardError=append:{LOG}"]


def _boot_log_config(software: WorkerSoftware) -> list[str]:
    """Where a failed boot leaves its log: the bucket, and the URL-encoded object name around
    the VM's name, which only the VM knows (from its metadata)."""
    head, tail = (software.run_prefix + boot_log_key("{vm}")).split("{vm}")
    return [f"readonly BOOT_LOG_BUCKET={_q(quote(software.run_bucket or '', safe=''))}",
            f"readonly BOOT_LOG_PREFIX={_q(quote(head, safe=''))}"
            f" BOOT_LOG_SUFFIX={_q(quote(tail, safe=''))} BOOT_LOG_LINES={BOOT_LOG_LINES}"]


def render(software: WorkerSoftware) -> str:
    """The bash startup script for ``software``; every rendered value is shell-quoted."""
    config = "\n".join([
        f"readonly MODE={_q(software.mode)}",
        f"readonly PYTHON_VERSION={_q(software.python_version)}",
        f"readonly PACKAGE={_q(DIST)} PACKAGE_VERSION={_q(software.package_version)}",
        "readonly PINS=(\n" + "".join(f"  {_q(pin)}\n" for pin in software.pins) + ")",
        f"readonly WHEEL_BUCKET={_q(quote(software.wheel_bucket or '', safe=''))}",
        f"readonly WHEEL_OBJECT={_q(quote(software.wheel_object or '', safe=''))}",
        f"readonly WHEEL_FILE={_q(software.wheel_file)}",
        f"readonly WHEEL_SHA256={_q(software.wheel_sha256)}",
        f"readonly INDEX_URL={_q(software.index_url)} FIND_LINKS={_q(software.find_links)}",
        f"readonly STORAGE_HOST={_q(software.storage_host.rstrip('/'))}",
        "readonly REQUIREMENTS=(\n" + "".join(f"  {_q(pin)}\n" for pin in software.requirements)
        + ")",
        f"readonly REQUIREMENTS_OBJECT={_q(quote(software.requirements_object or '', safe=''))}",
        f"readonly REQUIREMENTS_SHA256={_q(software.requirements_sha256)}",
        f"readonly REQUIREMENTS_HASHED={int(software.requirements_hashed)}",
        *_boot_log_config(software),
        f"readonly WORKER_UNIT={_q(WORKER_UNIT)}",
        "readonly WORKER_UNIT_PROPERTIES=(\n"
        + "".join(f"  {_q(prop)}\n" for prop in worker_unit_properties()) + ")",
    ])
    body = script_body()
    paths = {"VENV": VENV, "SCRATCH": SCRATCH, "HOME_DIR": HOME_DIR, "LOG": LOG, "LOCK": LOCK,
             "SYSTEMD_DIR": SYSTEMD_DIR}
    for name, path in paths.items():  # module globals, read now: tests point them elsewhere
        body = body.replace(f"__{name}__", _q(path))
    return ("#!/bin/bash\n"
            "# expocloud worker startup script, generated by expo_executor.engines.gce.startup: installs the\n"
            "# submitting host's pinned software once, runs expocloud-worker as user expocloud,\n"
            "# then halts the VM (metadata attribute expocloud-halt, default poweroff).\n"
            "set -euo pipefail\n\n"
            "# -- rendered configuration --\n" + config + "\n" + body)
