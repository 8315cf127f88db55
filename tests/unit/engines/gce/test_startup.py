"""The worker VM's software, in process: exact pins covering the GCE stack, the wheel and the
user's requirements file staged under the bucket prefix, and the checks on WorkerSoftware's
values. (The wheel built and
installed, the startup script run, and a clean Debian root booted as a VM:
tests/e2e/test_startup_script_run.py.)
"""

from __future__ import annotations

import ast
import hashlib
import importlib.metadata
import importlib.util
import re
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from expo_executor.core.errors import ExpoError
from expo_executor.engines.gce import startup
from expo_executor.protocol.bucket import LocalBucket

from tests.worker_software import PY_MINOR, software

GCE_STACK = ("snakemake", "snakemake-storage-plugin-gcs", "google-cloud-storage",
             "google-cloud-compute")


class FakeGcsBucket(LocalBucket):
    """A LocalBucket that names itself like a GcsBucket (bucket name + object prefix)."""

    def __init__(self, root: Path, bucket_name: str = "bkt", prefix: str = "runs/r1/") -> None:
        super().__init__(root)
        self.bucket_name = bucket_name
        self.prefix = prefix


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
    # the host's reports, fits and prices: not installed on workers
    assert not HOST_ONLY & set(names), HOST_ONLY & set(names)


HOST_ONLY = {"matplotlib", "numpy", "pandas", "scipy", "pillow", "cwltool",
             "google-cloud-billing"}
# What runs on a worker: the agent, what it starts for a staged (CWL) job, the VM side, and the
# plugin package, which Snakemake imports in every job's own snakemake process.
WORKER_ROOTS = ("expo_executor.worker.agent", "expo_executor.worker.staged_job",
                "expo_executor.engines.gce.guest", "snakemake_executor_plugin_expocloud")
# Modules whose lazy imports run on a worker too. Elsewhere a lazy import serves the host
# (coordinator.settings reaches cost.preemption, whose fit imports numpy, only when it fits).
WORKER_SIDE = ("expo_executor.worker", "expo_executor.protocol", "expo_executor.engines.gce.guest",
               "expo_executor.engines.gce.clients", "expo_executor.engines.gce.compute_lib",
               "expo_executor.gcp.errors",
               "expo_executor.gcp.retry")
REPO = Path(startup.__file__).resolve().parents[3]


def _module_file(module: str) -> Path | None:
    base = REPO.joinpath(*module.split("."))
    for path in (base / "__init__.py", base.with_suffix(".py")):
        if path.is_file():
            return path
    return None


def _imports(module: str, path: Path) -> list[tuple[str, bool]]:
    """(dotted name, lazy) of each name ``module`` imports; ``from a import b`` gives ``a.b``."""
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, lazy: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                found.extend((alias.name, lazy) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = module.split(".")[:len(module.split(".")) - child.level
                                                + (path.name == "__init__.py")]
                    base = ".".join(parts + ([base] if base else []))
                found.extend((f"{base}.{alias.name}", lazy) for alias in child.names)
            visit(child, lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    visit(ast.parse(path.read_text()), False)
    return found


def worker_imports() -> set[str]:
    """Every module outside this package that a worker can import: at module level from the
    roots on, lazily from the worker's side."""
    ours = ("expo_executor", "snakemake_executor_plugin_expocloud")
    seen: set[str] = set()
    todo, third = list(WORKER_ROOTS), set()
    while todo:
        module = todo.pop()
        path = _module_file(module)
        if module in seen or path is None:
            continue
        seen.add(module)
        for name, lazy in _imports(module, path):
            if lazy and not module.startswith(WORKER_SIDE):
                continue
            if name.split(".")[0] in ours:
                todo += [name, name.rsplit(".", 1)[0]]
            elif name.split(".")[0] not in sys.stdlib_module_names and name != "__future__":
                third.add(name)
    return third


def unpinned_imports(pins: list[str]) -> list[str]:
    """The worker's imports that no distribution among ``pins`` provides (by its RECORD)."""
    owner = {}
    for pin in pins:
        dist = importlib.metadata.distribution(pin.partition("==")[0])
        for file in dist.files or []:
            owner[Path(str(dist.locate_file(file))).resolve()] = pin
    missing = []
    for name in sorted(worker_imports()):
        spec = None
        for candidate in (name, name.rsplit(".", 1)[0]):  # a module, or a name in one
            try:
                spec = importlib.util.find_spec(candidate)
            except ModuleNotFoundError:
                continue
            if spec is not None:
                break
        if spec is None or spec.origin is None:  # unknown here, or a namespace package
            if spec is None:
                missing.append(name)
            continue
        if Path(spec.origin).resolve() not in owner:
            missing.append(name)
    return missing


def test_the_worker_pins_provide_every_import_a_worker_can_reach() -> None:
    imports = worker_imports()
    assert {"google.cloud.storage", "google.cloud.compute_v1.types.compute",
            "cryptography.hazmat.primitives.ciphers.aead.AESGCM"} <= imports
    assert not [i for i in imports if i.split(".")[0] in {"matplotlib", "numpy", "scipy",
                                                           "cwltool"}]
    assert unpinned_imports(startup.host_pins()) == []
    # the check can fail: without a distribution the worker imports, it says so
    pins = [p for p in startup.host_pins() if not p.startswith("google-cloud-storage==")]
    assert "google.cloud.storage" in unpinned_imports(pins)
    # and what the worker needs is among this package's requirements (no typo in the list)
    own = {startup._canonical(Requirement(r).name)
           for r in importlib.metadata.requires(startup.DIST) or []}
    assert startup.WORKER_NEEDS <= own


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
    # a failed boot's log goes next to the run's other objects: boot/<vm>.log
    assert (staged.run_bucket, staged.run_prefix) == ("bkt", "runs/r1/")
    script = startup.render(staged)
    assert "readonly BOOT_LOG_BUCKET=bkt\n" in script
    assert "readonly BOOT_LOG_PREFIX=runs%2Fr1%2Fboot%2F BOOT_LOG_SUFFIX=.log " \
        "BOOT_LOG_LINES=60\n" in script
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
    assert image.run_bucket is None and "readonly BOOT_LOG_BUCKET=''\n" in startup.render(image)


@pytest.mark.parametrize("changes, problem", [
    ({"mode": "conda"}, "unknown mode"),
    ({"pins": ("snakemake>=9",)}, "exact name==version"),
    ({"pins": ("x==1; rm -rf /",)}, "exact name==version"),
    ({"wheel_sha256": "abc"}, "64 hex"),
    ({"wheel_object": "runs/r1/software/x/../evil"}, "does not name a wheel"),
    ({"index_url": "https://i", "find_links": "/w"}, "both index_url and find_links"),
    ({"python_version": "3"}, "major.minor"),
    ({"run_prefix": "runs/r1"}, "must end in /"),
])
def test_worker_software_rejects_bad_values(changes: dict, problem: str) -> None:
    with pytest.raises(ExpoError, match=problem):
        software(**changes)


# -- the user's own packages (--expocloud-worker-requirements) ---------------------------------


def _pins(text: str) -> tuple:
    from expo_executor.core.requirements import parse_requirements

    return parse_requirements(text, "requirements.txt")


def test_stage_uploads_the_requirements_file_next_to_the_wheel(tmp_path: Path) -> None:
    bucket = FakeGcsBucket(tmp_path / "bucket")
    digest = "c" * 64
    staged = startup.stage(bucket, tmp_path / "software", find_links="/srv/wheelhouse",
                           requirements=_pins(f"# mine\nexpocloud_testpkg == 0.1.0 \\\n"
                                              f"  --hash=sha256:{digest}\n"))
    text = f"expocloud_testpkg==0.1.0 --hash=sha256:{digest}\n".encode()
    sha = hashlib.sha256(text).hexdigest()
    assert staged.requirements == ("expocloud_testpkg==0.1.0",)
    assert staged.requirements_hashed
    assert staged.requirements_sha256 == sha
    assert staged.requirements_object == f"runs/r1/software/{sha[:16]}/requirements.txt"
    assert bucket.read(staged.requirements_object[len(bucket.prefix):]).data == text
    plain = startup.stage(bucket, tmp_path / "software", requirements=_pins("a==1\n"))
    assert not plain.requirements_hashed and plain.requirements == ("a==1",)
    none = startup.stage(bucket, tmp_path / "software")
    assert none.requirements == () and none.requirements_object is None


def test_image_mode_checks_the_requirements_and_stages_nothing(tmp_path: Path) -> None:
    image = startup.stage(LocalBucket(tmp_path / "b"), tmp_path / "software", mode="image",
                          requirements=_pins("expocloud_testpkg==0.1.0\n"))
    assert image.requirements == ("expocloud_testpkg==0.1.0",)
    assert image.requirements_object is None
    assert not (tmp_path / "b" / "software").exists()
    assert "  expocloud_testpkg==0.1.0\n" in startup.render(image)


def test_a_clash_with_the_workers_own_pins_is_refused_before_any_upload(tmp_path: Path) -> None:
    bucket = FakeGcsBucket(tmp_path / "bucket")
    snakemake = importlib.metadata.version("snakemake")
    same = startup.stage(bucket, tmp_path / "software",
                         requirements=_pins(f"snakemake=={snakemake}\n"))
    assert same.requirements == (f"snakemake=={snakemake}",)  # the same version is fine
    bucket = FakeGcsBucket(tmp_path / "other")
    for line, problem in (("snakemake==0.0.1\n", f"the workers run snakemake=={snakemake}"),
                          ("snakemake-executor-plugin-expocloud==0.1\n", "their own copy")):
        with pytest.raises(ExpoError) as caught:
            startup.stage(bucket, tmp_path / "software", requirements=_pins(line))
        assert caught.value.setting == "--expocloud-worker-requirements"
        assert problem in caught.value.problem and "pin the version" in caught.value.fix
        assert not list((tmp_path / "other").rglob("*"))  # nothing staged


@pytest.mark.parametrize("changes, problem", [
    ({"requirements": ("numpy>=1",)}, "exact name==version"),
    ({"requirements": ("numpy==1",)}, "exactly when there are requirements"),
    ({"requirements_object": "runs/r1/software/x/requirements.txt",
      "requirements_sha256": "a" * 64}, "exactly when there are requirements"),
    ({"requirements": ("numpy==1",), "requirements_object": "o", "requirements_sha256": "x"},
     "64 hex"),
])
def test_worker_software_rejects_bad_requirements(changes: dict, problem: str) -> None:
    with pytest.raises(ExpoError, match=problem):
        software(**changes)


def test_a_gce_run_stages_the_setting_and_renders_it_into_the_startup_script(
        tmp_path: Path) -> None:
    """The setting's way from the settings to each VM's metadata (launch.build_engine)."""
    from expo_executor.coordinator.settings import ExecutorSettings
    from expo_executor.engines.gce.launch import build_engine

    (tmp_path / "r.txt").write_text("expocloud_testpkg==0.1.0\n")
    settings = ExecutorSettings(engine="gce", gce_project="p", gce_zones="us-central1-a",
                                max_workers=2, slots_per_worker=1,
                                gce_endpoint="http://127.0.0.1:9",
                                worker_requirements=str(tmp_path / "r.txt"))
    bucket = FakeGcsBucket(tmp_path / "bucket")
    engine = build_engine(settings, "r1", b"k" * 32, bucket, "gs://bkt/runs/r1", tmp_path)
    script = engine.config.metadata["startup-script"]
    assert "readonly REQUIREMENTS=(\n  expocloud_testpkg==0.1.0\n)" in script
    staged = list((tmp_path / "bucket").rglob("requirements.txt"))
    assert len(staged) == 1 and staged[0].read_text() == "expocloud_testpkg==0.1.0\n"
    assert "readonly REQUIREMENTS_HASHED=0" in script
    assert f"runs%2Fr1%2Fsoftware%2F{staged[0].parent.name}%2Frequirements.txt" in script


def test_the_worker_unit_is_stopped_before_the_network_within_spots_notice() -> None:
    props = dict(p.split("=", 1) for p in startup.worker_unit_properties())
    # at shutdown systemd stops units in the reverse order of their start: after the network
    # started means stopped before it goes
    assert props["After"] == props["Wants"] == "network-online.target"
    assert props["KillMode"] == "mixed"  # SIGTERM to the worker, which ends its own jobs
    assert int(props["TimeoutStopSec"].removesuffix("s")) < 30  # Spot: hard off after 30 s
    # appended by systemd itself: no pipe that dies before the worker does
    assert props["StandardOutput"] == props["StandardError"] == f"append:{startup.LOG}"
    script = startup.render(software())
    assert "readonly WORKER_UNIT=expocloud-worker\n" in script
    assert "readonly WORKER_UNIT_PROPERTIES=(\n  After=network-online.target\n" in script
    assert f"readonly VENV={startup.VENV} SYSTEMD_DIR=/run/systemd/system\n" in script
