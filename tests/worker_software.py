"""A worker's software description (startup.WorkerSoftware) with test values, and a wheel of a
package only a test has, for both tiers of the startup-script tests."""

from __future__ import annotations

import re
import sys
import zipfile
from pathlib import Path

from expo_executor.engines.gce import startup, worker_wheel

PY_MINOR = f"{sys.version_info[0]}.{sys.version_info[1]}"  # this host's Python, as a VM needs it


def software(**changes: object) -> startup.WorkerSoftware:
    """Valid pip-mode software, with ``changes`` applied."""
    base: dict[str, object] = {
        "mode": "pip", "pins": ("snakemake==9.0.0", "pyyaml==6.0"),
        "wheel_object": "runs/r1/software/0123/pkg-0.1.0-py3-none-any.whl",
        "wheel_sha256": "a" * 64, "wheel_bucket": "bkt", "package_version": "0.1.0",
        "python_version": PY_MINOR, "run_bucket": "bkt", "run_prefix": "runs/r1/"}
    base.update(changes)
    return startup.WorkerSoftware(**base)  # type: ignore[arg-type]


def make_wheel(dest_dir: Path, name: str, version: str, modules: dict[str, str]) -> Path:
    """A pure-Python wheel of ``modules`` (archive path -> source), packed by hand: a package
    that exists only in this test, installable offline, with no build backend needed."""
    dist = re.sub(r"[-_.]+", "_", name).lower()
    info = f"{dist}-{version}.dist-info"
    entries = {path: text.encode() for path, text in modules.items()}
    entries[f"{info}/METADATA"] = (f"Metadata-Version: 2.1\nName: {name}\n"
                                   f"Version: {version}\n").encode()
    entries[f"{info}/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: tests\n"
                                b"Root-Is-Purelib: true\nTag: py3-none-any\n")
    entries[f"{info}/RECORD"] = "".join(
        f"{path},{worker_wheel.record_hash(data)},{len(data)}\n" for path, data in entries.items()
    ).encode() + f"{info}/RECORD,,\n".encode()
    dest_dir.mkdir(parents=True, exist_ok=True)
    wheel = dest_dir / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, data in entries.items():
            archive.writestr(zipfile.ZipInfo(path, date_time=(1980, 1, 1, 0, 0, 0)), data)
    return wheel
