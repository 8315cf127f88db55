"""The local engine: each "VM" is an ``expocloud-worker`` process in its own session.

Created and deleted like a cloud VM: it boots (an optional delay), talks to the coordinator
only through the bucket, and deleting it kills the worker and every job session it started,
as powering off a VM would. Its "local disk" is a scratch directory of its own.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from ..procs import power_off
from ..scheduler import Pool
from ..worker import RUN_KEY_ENV
from .base import CreateFailed, Instance


@dataclass
class LocalEngineConfig:
    bucket_root: Path
    scratch_root: Path
    run_key: bytes
    poll: float = 0.2
    grace: float = 60.0
    heartbeat: float = 10.0
    boot_delay: float = 0.0


@dataclass
class _Vm:
    name: str
    pool: Pool
    slots: int
    proc: subprocess.Popen
    scratch: Path
    log: Path


class LocalEngine:
    """Worker processes standing in for VMs (thread-safe: teardown may come from a signal)."""

    def __init__(self, config: LocalEngineConfig) -> None:
        self.config = config
        self._vms: dict[str, _Vm] = {}
        self._lock = threading.Lock()
        self._closed = False

    def create(self, names: list[str], pool: Pool, slots: int) -> None:
        for name in names:
            self._create(name, pool, slots)

    def _create(self, name: str, pool: Pool, slots: int) -> None:
        if self._closed:
            raise RuntimeError("the engine is closed: the run is ending")
        scratch = self.config.scratch_root / name
        scratch.mkdir(parents=True, exist_ok=True)
        log = scratch / "worker.log"
        argv = [
            sys.executable, "-m", "expo_executor.worker",
            "--bucket", str(self.config.bucket_root), "--worker-id", name,
            "--slots", str(slots), "--scratch", str(scratch),
            "--poll", str(self.config.poll), "--grace", str(self.config.grace),
            "--heartbeat", str(self.config.heartbeat),
            "--boot-delay", str(self.config.boot_delay),
        ]
        env = {**os.environ, RUN_KEY_ENV: self.config.run_key.hex()}
        with open(log, "ab") as out:
            proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        with self._lock:
            self._vms[name] = _Vm(name, pool, slots, proc, scratch, log)

    def delete(self, name: str) -> None:
        with self._lock:
            vm = self._vms.pop(name, None)
        if vm is None:
            return
        if vm.proc.poll() is None:
            vm.proc.terminate()  # the worker kills its jobs and reports them
            try:
                vm.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        power_off(vm.proc, vm.scratch)  # whatever the worker left behind dies with the VM

    def list(self) -> list[Instance]:
        with self._lock:
            vms = list(self._vms.values())
        return [Instance(vm.name, vm.pool, vm.slots,
                         "RUNNING" if vm.proc.poll() is None else "TERMINATED") for vm in vms]

    def failures(self) -> list[CreateFailed]:
        return []  # a process starts or raises at once

    def preempted(self) -> set[str]:
        return set()  # local processes are never preempted; a killed one is simply lost

    def close(self) -> None:
        with self._lock:
            self._closed = True
            vms = list(self._vms.values())
        for vm in vms:  # power every VM off at once, then wait for each
            if vm.proc.poll() is None:
                vm.proc.terminate()
        for vm in vms:
            self.delete(vm.name)

