"""``expocloud emulator``: the fake Compute Engine and the faithful GCS emulator, together.

``profiles/gce-emulated`` points the executor (and, through ``STORAGE_EMULATOR_HOST``,
Snakemake's GCS storage plugin) at these ports, so the whole GCE path runs offline: VMs are
worker processes on this machine, booted from the metadata they were created with.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path

from expo_executor.emulator.compute import FakeCompute
from expo_executor.emulator.faulty_proxy import FaultyProxy
from expo_executor.emulator.gcs import EmulatorProcess, fresh_bucket


def serve(compute_port: int, storage_port: int, scratch: Path, boot_delay: float,
          spot_mean_life: float | None, seed: int, bucket: str = "expocloud-emulated",
          storage_fault_rate: float = 0.0) -> int:
    """Serve until SIGINT/SIGTERM. With ``storage_fault_rate`` the emulator listens on a free
    port and a :class:`FaultyProxy` on ``storage_port``: clients see only the faulty one."""
    proxy: FaultyProxy | None = None
    try:
        storage = EmulatorProcess(port=0 if storage_fault_rate else storage_port)
    except RuntimeError as exc:
        print(f"expocloud emulator: cannot serve on port {storage_port}: {exc}; fix: stop what "
              "uses it or pass --storage-port", flush=True)
        return 2
    if storage_fault_rate:
        try:
            proxy = FaultyProxy(storage.endpoint, rate=storage_fault_rate, seed=seed,
                                port=storage_port).start()
        except OSError as exc:
            storage.stop()
            print(f"expocloud emulator: cannot serve on port {storage_port}: {exc}; fix: stop "
                  "what uses it or pass --storage-port", flush=True)
            return 2
    storage_endpoint = proxy.endpoint if proxy else storage.endpoint
    try:
        compute = FakeCompute(scratch.resolve(), port=compute_port, boot_delay=boot_delay).start()
    except OSError as exc:
        if proxy:
            proxy.stop()
        storage.stop()
        print(f"expocloud emulator: cannot serve on port {compute_port}: {exc}; fix: stop what "
              "uses it or pass --compute-port", flush=True)
        return 2
    if spot_mean_life:
        compute.chaos(spot_mean_life, seed)
    # the bucket the emulated profiles name (Snakemake's storage plugin would create it, a CWL
    # run expects it, as on GCS)
    fresh_bucket(storage.endpoint, bucket)
    print(f"fake Compute Engine: {compute.endpoint} (VM disks in {scratch})", flush=True)
    print(f"GCS emulator:        {storage_endpoint} (bucket gs://{bucket})", flush=True)
    if proxy:
        print(f"storage faults:      {storage_fault_rate:.0%} of the calls (503, 429, dropped "
              f"connections; seed {seed}) in front of {storage.endpoint}", flush=True)
    print(f"export STORAGE_EMULATOR_HOST={storage_endpoint}", flush=True)
    if spot_mean_life:
        print(f"Spot VMs are preempted after {spot_mean_life:g} s on average (seed {seed})",
              flush=True)
    print("Ctrl-C stops both and powers off every fake VM.", flush=True)
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    try:
        done.wait()
    finally:
        compute.stop()
        if proxy:
            proxy.stop()
            print(f"storage faults injected: {proxy.total_injected} of {proxy.requests} calls "
                  f"({dict(sorted(proxy.injected.items()))})", flush=True)
        storage.stop()
    return 0
