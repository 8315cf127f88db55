"""The fake Compute Engine's instances as machines: booting (a metadata server and the worker,
launched in its own session), powering off (``processes.sessions.power_off``: the worker and every job
session die), preemption (the metadata notice, an ACPI soft-off, ``notice_s`` of grace),
``maxRunDuration`` expiry, a worker's own exit (a guest poweroff), and chaos (seeded
exponential Spot lifetimes).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from expo_executor.emulator.compute_operations import Operations
from expo_executor.emulator.compute_vm import Vm
from expo_executor.emulator.identity import IdentityIssuer
from expo_executor.emulator.metadata import FakeMetadata
from expo_executor.emulator.timers import Timers, spawn
from expo_executor.processes.sessions import power_off

CommandFn = Callable[[str, str, Path], list[str]]


class VmPower:
    """The machine side of ``FakeCompute``'s instances (a mixin: its state is the fake's,
    declared here). Called with the fake's lock held unless a method says otherwise."""

    python: str
    command: CommandFn | None
    notice_s: float
    max_run_scale: float
    identity: IdentityIssuer
    operations: Operations
    _lock: threading.RLock
    _vms: dict[tuple[str, str, str], Vm]
    _timers: Timers
    _chaos: tuple[float, int, int] | None
    _meta_stoppers: list[threading.Thread]

    def _find(self, name: str, zone: str | None, project: str | None) -> Vm | None:
        for vm in self._vms.values():
            if vm.name == name and zone in (None, vm.zone) and project in (None, vm.project):
                return vm
        return None

    def _current(self, vm: Vm) -> bool:
        return self._vms.get(vm.key) is vm

    def _preempt_vm(self, vm: Vm, action: str | None) -> bool:
        """Called with the lock held; drops it while the notice runs."""
        if vm.stopping is not None or vm.status == "TERMINATED":
            return False
        action = (action or vm.termination_action()).upper()
        vm.stopping, vm.status = "preempt", "STOPPING"
        op = self.operations.new(vm.project, vm.zone, "compute.instances.preempted", vm.name,
                                 target_id=vm.id, done=False, user="system")
        meta, proc = vm.meta, vm.proc
        self._lock.release()
        try:
            if meta is not None:
                meta.preempt()
            if proc is not None and proc.poll() is None:
                # ACPI soft-off: the guest shuts down and its services get SIGTERM, then the
                # power goes ``notice_s`` later (about 30 s on GCE)
                proc.send_signal(signal.SIGTERM)
            time.sleep(self.notice_s)
            self._power_off(vm)
        finally:
            self._lock.acquire()
        if self._current(vm):
            if action == "DELETE":
                del self._vms[vm.key]
            else:
                vm.status = "TERMINATED"
        self.operations.finish(op)
        return True

    def _power_off(self, vm: Vm) -> None:
        """Pull the plug (idempotent): the worker and every job session die, metadata stops."""
        with vm.power_lock:
            if vm.powered_off:
                return
            vm.powered_off = True
            vm.ended_at = vm.ended_at or time.time()
            if vm.proc is not None:
                power_off(vm.proc, vm.scratch)
            if vm.meta is not None:  # its shutdown takes up to half a second: not in our way
                stopper = threading.Thread(target=vm.meta.stop, daemon=True)
                stopper.start()
                with self._lock:
                    self._meta_stoppers.append(stopper)

    def _argv(self, vm: Vm, host: str) -> list[str]:
        if vm.boot_fault in ("startup_fails", "startup_fails_silently"):
            # the real script leaves its log's end in the bucket, then powers the VM off
            return [self.python, "-m", "expo_executor.emulator.failing_startup",
                    *(["--silent"] if vm.boot_fault == "startup_fails_silently" else [])]
        if self.command is not None:
            return list(self.command(vm.name, host, vm.scratch))
        return [self.python, "-m", "expo_executor.worker.agent", "--from-metadata",
                "--scratch", str(vm.scratch)]

    def _boot(self, vm: Vm) -> None:
        """PROVISIONING -> RUNNING: metadata server up, worker launched (timer thread)."""
        with self._lock:
            if not self._current(vm) or vm.stopping is not None or vm.status != "PROVISIONING":
                return
            vm.scratch.mkdir(parents=True, exist_ok=True)
            (vm.scratch / "sessions").unlink(missing_ok=True)  # a new VM has a fresh disk
            if vm.boot_fault == "silent_worker":  # booted (and billed), but no worker runs
                vm.status, vm.running_at = "RUNNING", time.time()
                self._arm_expiry(vm)
                return
            vm.meta = FakeMetadata(project=vm.project, zone=vm.zone, name=vm.name,
                                   attributes=vm.attributes, instance_id=int(vm.id),
                                   service_account=vm.service_account,
                                   identity=self.identity).start()
            env = {**os.environ, "GCE_METADATA_HOST": vm.meta.host}
            with open(vm.scratch / "worker.log", "ab") as log:
                vm.proc = subprocess.Popen(self._argv(vm, vm.meta.host), env=env, stdout=log,
                                           stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                           start_new_session=True)
            vm.status, vm.running_at = "RUNNING", time.time()
            spawn(self._watch, vm)
            self._arm_expiry(vm)
            if self._chaos is not None and vm.spot:
                self._arm_chaos(vm)

    def _arm_expiry(self, vm: Vm) -> None:
        if "maxRunDuration" in vm.scheduling:
            seconds = int(vm.scheduling["maxRunDuration"].get("seconds", 0))
            self._timers.call_later(seconds * self.max_run_scale,
                                    lambda: spawn(self._expire, vm))

    def _watch(self, vm: Vm) -> None:
        """A worker that exits on its own leaves its instance TERMINATED (guest poweroff)."""
        assert vm.proc is not None
        vm.proc.wait()
        with self._lock:
            if vm.stopping is not None:
                return
            vm.stopping, vm.status = "guest", "STOPPING"
        self._power_off(vm)
        with self._lock:
            if self._current(vm):
                vm.status = "TERMINATED"

    def _expire(self, vm: Vm) -> None:
        """``scheduling.maxRunDuration`` reached: stop or delete per instanceTerminationAction."""
        with self._lock:
            if not self._current(vm) or vm.stopping is not None:
                return
            vm.stopping, vm.status = "max-run", "STOPPING"
        self._power_off(vm)
        with self._lock:
            if self._current(vm):
                if vm.termination_action() == "DELETE":
                    del self._vms[vm.key]
                else:
                    vm.status = "TERMINATED"

    def _arm_chaos(self, vm: Vm) -> None:
        assert self._chaos is not None
        mean, seed, gen = self._chaos
        life = random.Random(f"{seed}:{vm.name}").expovariate(1.0 / mean)

        def fire() -> None:
            with self._lock:
                if self._chaos is None or self._chaos[2] != gen or not self._current(vm):
                    return
                if vm.status == "RUNNING":
                    spawn(self._preempt_locked, vm)

        self._timers.call_later(life, fire)

    def _preempt_locked(self, vm: Vm) -> None:
        with self._lock:
            self._preempt_vm(vm, None)
