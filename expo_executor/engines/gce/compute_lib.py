"""google-cloud-compute, loaded as far as the engine uses it: its messages and two of its
clients, not the hundred others.

The package's ``__init__`` imports the client of every Compute Engine service: 1.2-1.9 s on
a 2-core machine, of which the engine needs about 0.6 s (the messages, ``InstancesClient``
and ``ZoneOperationsClient``). A run's first VM waits for that import, after Snakemake has
built the DAG. The package lists those submodules in ``__lazy_modules__`` for Python 3.15's
explicit lazy imports (PEP 810); on the Pythons we run, this module gives the one package the
same effect, by the import system's documented parts:

- the package's module object is made from its spec and registered without running its
  ``__init__`` (``importlib.util.module_from_spec``), so that its submodules import alone;
- the first time anyone asks the package for a name that is not one of its submodules (a
  ``compute_v1.FirewallsClient`` elsewhere), its ``__init__`` runs then, in that module
  object, and the name is there (PEP 562's module ``__getattr__``).

So code that imports ``google.cloud.compute_v1`` whole gets the whole package as before, a
moment later. Without a spec to split the package by, it is imported whole.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import sys
import threading
from types import ModuleType
from typing import Any

PACKAGE = "google.cloud.compute_v1"

_lock = threading.RLock()  # one thread registers the package; its __init__ runs once


def compute_types() -> ModuleType:
    """``google.cloud.compute_v1.types.compute``: every request and resource message, under
    the names the package exports them by (``compute_types().Instance``)."""
    _register_package()
    from google.cloud.compute_v1.types import compute

    return compute


def client_classes() -> tuple[Any, Any]:
    """``InstancesClient`` and ``ZoneOperationsClient``."""
    _register_package()
    from google.cloud.compute_v1.services.instances import InstancesClient
    from google.cloud.compute_v1.services.zone_operations import ZoneOperationsClient

    return InstancesClient, ZoneOperationsClient


def warm_up() -> threading.Thread:
    """Import the engine's part of the package in a daemon thread: started before the
    project's checks, whose calls wait on the network, so that the import overlaps them.
    Whoever needs the package meanwhile waits for the import system's module lock."""
    thread = threading.Thread(target=_import_quietly, name="compute-import", daemon=True)
    thread.start()
    return thread


def _import_quietly() -> None:
    try:
        compute_types()
        client_classes()
    except Exception:  # noqa: BLE001 - the caller's own import says what is wrong
        pass


def _register_package() -> None:
    """The package's module object without its ``__init__`` run, once, unless it is loaded."""
    with _lock:
        if PACKAGE in sys.modules:
            return
        spec = importlib.util.find_spec(PACKAGE)
        if spec is None or spec.loader is None or not spec.submodule_search_locations:
            importlib.import_module(PACKAGE)  # not a package we know how to split
            return
        package = importlib.util.module_from_spec(spec)
        submodules = {m.name for m in pkgutil.iter_modules(spec.submodule_search_locations)}
        package.__getattr__ = _completer(package, spec, submodules)  # type: ignore[attr-defined]
        sys.modules[PACKAGE] = package
        parent, _, child = PACKAGE.rpartition(".")
        setattr(sys.modules[parent], child, package)


def _completer(package: ModuleType, spec: Any, submodules: set[str]) -> Any:
    """The package's ``__getattr__``: a submodule's name is left to the import system (which
    imports it and sets it on the package); any other name runs the package's ``__init__``
    first, once."""
    ran = []

    def __getattr__(name: str) -> Any:
        if name not in submodules:
            with _lock:
                if not ran:
                    ran.append(True)
                    spec.loader.exec_module(package)
            if name in package.__dict__:
                return package.__dict__[name]
        raise AttributeError(f"module {PACKAGE!r} has no attribute {name!r}")

    return __getattr__
