"""compute_lib: the engine's part of google-cloud-compute without the package's hundred other
clients, and the whole package still there for whoever asks for it. Each case runs in a fresh
interpreter: this one may have imported the package whole already."""

from __future__ import annotations

import subprocess
import sys
import textwrap

PROBE = """
import sys
from expo_executor.engines.gce.compute_lib import client_classes, compute_types

compute = compute_types()
instances, operations = client_classes()
services = {m.split(".")[4] for m in sys.modules
            if m.startswith("google.cloud.compute_v1.services.")}
print("services", sorted(services))
"""


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_engine_loads_only_the_clients_it_uses() -> None:
    """A plain ``from google.cloud import compute_v1`` imports every service's client; the
    engine's messages and its two clients need two (the instances client polls through the
    zone operations one)."""
    assert _run(PROBE).splitlines() == ["services ['instances', 'zone_operations']"]


def test_whoever_imports_the_package_whole_gets_all_of_it_and_the_same_classes() -> None:
    out = _run(PROBE + """
from google.cloud import compute_v1
import google.cloud.compute_v1 as again
from google.cloud.compute_v1 import FirewallsClient, InstancesClient

assert again is compute_v1 and InstancesClient is instances
assert compute_v1.ZoneOperationsClient is operations and compute_v1.Instance is compute.Instance
assert FirewallsClient.__name__ == "FirewallsClient" and compute_v1.__version__
try:
    compute_v1.NoSuchName
except AttributeError as exc:
    print("missing:", exc)
""")
    assert "missing: module 'google.cloud.compute_v1' has no attribute 'NoSuchName'" in out


def test_after_a_whole_import_it_takes_the_package_as_it_is() -> None:
    out = _run("""
import sys
from google.cloud import compute_v1
from expo_executor.engines.gce.compute_lib import client_classes, compute_types
assert client_classes()[0] is compute_v1.InstancesClient
assert compute_types().Instance is compute_v1.Instance
print(len([m for m in sys.modules if m.startswith("google.cloud.compute_v1.services.")]) > 50)
""")
    assert out.strip() == "True"
