"""This package as a wheel, for the worker VMs: it is not on PyPI, so the submitting host packs
the copy it runs (editable source tree or installed files) and stages it in the run's bucket
(``startup.stage``), and the startup script installs it next to the host's exact pins.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import sys
import zipfile
from pathlib import Path
from urllib.parse import unquote, urlsplit

from expo_executor.core.errors import ExpoError

DIST = "snakemake-executor-plugin-expocloud"
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # fixed timestamps: the same tree gives the same sha256


def own_distribution() -> importlib.metadata.Distribution:
    """The installed metadata of this package.

    A source tree on ``sys.path`` (editable install, or the current directory) may also carry a
    stale ``*.egg-info``; the first ``*.dist-info`` that pip wrote (it has a RECORD, an
    egg-info has not) describes what is installed, so it wins.
    """
    found = list(importlib.metadata.distributions(name=DIST))
    if not found:
        raise ExpoError("worker software", f"{DIST} is not installed in {sys.prefix}",
                        "install it with pip install '.[gce]' (or pip install -e '.[gce]')")
    for dist in found:
        if dist.read_text("RECORD") is not None:
            return dist
    return found[0]


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _wanted(rel: str) -> bool:
    parts = rel.split("/")
    return not (any(p == "__pycache__" or p.startswith(".") for p in parts)
                or rel.endswith((".pyc", ".pyo", "~")))


def _editable_root(dist: importlib.metadata.Distribution) -> Path | None:
    """The source tree of an editable install (from PEP 610's direct_url.json), else None."""
    raw = dist.read_text("direct_url.json")
    if not raw:
        return None
    info = json.loads(raw)
    if not info.get("dir_info", {}).get("editable"):
        return None
    url = urlsplit(info.get("url", ""))
    if url.scheme != "file":
        return None
    root = Path(unquote(url.path))
    if not root.is_dir():
        raise ExpoError("worker software",
                        f"the editable install of {DIST} points at {root}, which is gone",
                        "reinstall from the source tree: pip install -e '.[gce]'")
    return root


def _package_files(dist: importlib.metadata.Distribution) -> dict[str, Path]:
    """Archive name -> file for the modules this host imports.

    Editable install: the top-level packages as Python finds them, which must lie in the source
    tree that direct_url.json names. Regular install: the files pip recorded (RECORD), that is
    the installed copy, which is what runs here even if a source checkout has moved on.
    """
    files: dict[str, Path] = {}
    root = _editable_root(dist)
    if root is not None:
        tops = (dist.read_text("top_level.txt") or "").split()
        if not tops:
            raise ExpoError("worker software", f"the editable install of {DIST} has no "
                            "top_level.txt", "reinstall: pip install -e '.[gce]'")
        for top in tops:
            spec = importlib.util.find_spec(top)
            locations = list(spec.submodule_search_locations or []) if spec else []
            if not locations and spec and spec.origin:
                locations = [spec.origin]
            if not locations:
                raise ExpoError("worker software", f"package {top} of {DIST} is not importable",
                                f"reinstall from {root}: pip install -e '.[gce]'")
            path = Path(locations[0]).resolve()
            if not path.is_relative_to(root.resolve()):
                raise ExpoError("worker software",
                                f"Python imports {top} from {path}, not from the editable "
                                f"source {root}", "run from elsewhere or reinstall")
            if path.is_file():
                files[path.name] = path
                continue
            for file in sorted(path.rglob("*")):
                rel = f"{top}/{file.relative_to(path).as_posix()}"
                if file.is_file() and _wanted(rel):
                    files[rel] = file
        return files
    recorded = dist.files
    if not recorded:
        raise ExpoError("worker software", f"{DIST} has no RECORD and no editable source, so "
                        "there is nothing to ship to the workers",
                        "install it with pip (pip install '.[gce]' or pip install -e '.[gce]')")
    tops = set((dist.read_text("top_level.txt") or "").split())
    for entry in recorded:
        rel = entry.as_posix()
        first = rel.split("/")[0]
        if tops and first not in tops and first.removesuffix(".py") not in tops:
            continue  # console scripts (pip regenerates them), metadata (below)
        if rel.startswith("../") or first.endswith(".dist-info") or not _wanted(rel):
            continue
        path = Path(str(entry.locate()))
        if not path.is_file():
            raise ExpoError("worker software", f"the installed file {path} of {DIST} is missing",
                            "reinstall: pip install --force-reinstall '.[gce]'")
        files[rel] = path
    return files


def build_wheel(dest_dir: Path) -> Path:
    """A wheel of this package as the host runs it, in ``dest_dir``; returns its path.

    Packed directly from the imported modules and the installed metadata rather than by a
    PEP 517 backend: no build backend or index is needed at submit time, the source tree is not
    written to, and the wheel's metadata is the one the pins were computed from. Reproducible:
    the same files give the same bytes, so the same sha256 and bucket key.
    """
    dist = own_distribution()
    name = re.sub(r"[-_.]+", "_", dist.metadata["Name"]).lower()
    version = dist.version.replace("-", "_")
    info_dir = f"{name}-{version}.dist-info"
    entries: dict[str, bytes] = {rel: path.read_bytes()
                                 for rel, path in sorted(_package_files(dist).items())}
    for meta in ("METADATA", "entry_points.txt", "top_level.txt"):
        text = dist.read_text(meta)
        if text is not None:
            entries[f"{info_dir}/{meta}"] = text.encode()
    if f"{info_dir}/METADATA" not in entries:
        raise ExpoError("worker software", f"{DIST} has no METADATA", "reinstall it with pip")
    entries[f"{info_dir}/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: expo_executor.engines.gce.worker_wheel\n"
                                    b"Root-Is-Purelib: true\nTag: py3-none-any\n")
    record = "".join(f"{rel},{record_hash(data)},{len(data)}\n" for rel, data in entries.items())
    entries[f"{info_dir}/RECORD"] = (record + f"{info_dir}/RECORD,,\n").encode()
    dest_dir = Path(dest_dir)
    dest_dir.mkdir(parents=True, exist_ok=True)
    wheel = dest_dir / f"{name}-{version}-py3-none-any.whl"
    tmp = wheel.with_name(wheel.name + ".part")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as archive:
        for rel, data in entries.items():
            info = zipfile.ZipInfo(rel, date_time=_ZIP_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    os.replace(tmp, wheel)
    return wheel
