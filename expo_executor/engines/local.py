"""The local engine: each "VM" is an ``expocloud-worker`` process in its own session.

Created and deleted like a cloud VM: it boots (an optional delay), talks to the coordinator
only through the bucket, and deleting it kills the worker and every job session it started,
as powering off a VM would. Its "local disk" is a scratch directory of its own.

Preemptions can be injected (``preempt``: VM name -> seconds after its creation), so that a
real run and the simulator can be given the same preemption schedule.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from expo_executor.core.scheduler import Pool
from expo_executor.core.shapes import Shape
from expo_executor.engines.base import CreateFailed, Instance
from expo_executor.protocol.keys import WORKER_KEY_ENV
from expo_executor.protocol.worker_keys import worker_key
from expo_executor.processes.private_files import private_dir
from expo_executor.processes.sessions import power_off, power_off_pid, session_members

#: In each "VM"'s scratch directory: the worker's pid, so that a rerun can stop the workers
#: of a run whose coordinator was killed (they are no child of the rerun's process).
PID_FILE = "worker.pid"


@dataclass
class LocalEngineConfig:
    bucket_root: Path
    scratch_root: Path
    run_key: bytes
    poll: float = 0.2
    grace: float = 60.0
    # the run's heartbeat: the coordinator's pulse interval, and its workers' status interval
    heartbeat: float = 10.0
    boot_delay: float = 0.0
    report_delay: float | None = None  # the workers' (worker/result_reports.py); None: the heartbeat
    # VM name -> seconds after its creation at which it is preempted (empty: never)
    preempt: dict[str, float] = field(default_factory=dict)


@dataclass
class _Vm:
    name: str
    pool: Pool
    slots: int
    proc: subprocess.Popen
    scratch: Path
    log: Path
    preempt_at: float | None = None  # monotonic time of its injected preemption


class LocalEngine:
    """Worker processes standing in for VMs (thread-safe: teardown may come from a signal)."""

    def __init__(self, config: LocalEngineConfig) -> None:
        self.config = config
        self._vms: dict[str, _Vm] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._preempted: set[str] = set()  # preempted, not yet reported

    def create(self, names: list[str], pool: Pool, slots: int,
               shape: Shape | None = None) -> None:
        if shape is not None:  # the front ends give local jobs no machine of their own
            raise ValueError(f"local workers have no machine type ({shape.describe()})")
        for name in names:
            self._create(name, pool, slots)

    def _create(self, name: str, pool: Pool, slots: int) -> None:
        if self._closed:
            raise RuntimeError("the engine is closed: the run is ending")
        # its "local disk": its jobs' logs and staged specs are only this user's to read
        scratch = private_dir(self.config.scratch_root / name)
        log = scratch / "worker.log"
        argv = [
            sys.executable, "-m", "expo_executor.worker.agent",
            "--bucket", str(self.config.bucket_root), "--worker-id", name,
            "--slots", str(slots), "--scratch", str(scratch),
            "--poll", str(self.config.poll), "--grace", str(self.config.grace),
            "--heartbeat", str(self.config.heartbeat), "--pulse", str(self.config.heartbeat),
            "--boot-delay", str(self.config.boot_delay),
        ]
        if self.config.report_delay is not None:
            argv += ["--report-delay", str(self.config.report_delay)]
        env = {k: v for k, v in os.environ.items() if k != WORKER_KEY_ENV}
        delay = self.config.preempt.get(name)
        created = time.monotonic()
        key_fd = _key_pipe(worker_key(self.config.run_key, name))
        try:
            with open(log, "ab") as out:
                proc = subprocess.Popen([*argv, "--key-fd", str(key_fd)], env=env, stdout=out,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        start_new_session=True, pass_fds=(key_fd,))
        finally:
            os.close(key_fd)
        (scratch / PID_FILE).write_text(str(proc.pid))  # for a rerun, should we die first
        with self._lock:
            self._vms[name] = _Vm(name, pool, slots, proc, scratch, log,
                                  None if delay is None else created + delay)

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
        self._preempt_due()
        with self._lock:
            vms = list(self._vms.values())
        return [Instance(vm.name, vm.pool, vm.slots,
                         "RUNNING" if vm.proc.poll() is None else "TERMINATED") for vm in vms]

    def failures(self) -> list[CreateFailed]:
        return []  # a process starts or raises at once

    def preempted(self) -> set[str]:
        """Injected preemptions that came due (drained); nothing else preempts a process."""
        self._preempt_due()
        with self._lock:
            names, self._preempted = self._preempted, set()
        return names

    def _preempt_due(self) -> None:
        """Power off the VMs whose injected preemption is due (checked lazily: the coordinator
        asks every round), as ``delete`` would, but with no last word from the worker: it is
        killed before its jobs, as a preempted VM vanishes. (Were it told to stop first, it
        would report its jobs cancelled, and they would be re-queued without counting the
        preemption, before the coordinator hears of it.)"""
        now = time.monotonic()
        with self._lock:
            due = [vm for vm in self._vms.values()
                   if vm.preempt_at is not None and now >= vm.preempt_at]
            for vm in due:
                del self._vms[vm.name]
                self._preempted.add(vm.name)
        for vm in due:
            if vm.proc.poll() is None:
                vm.proc.send_signal(signal.SIGKILL)
            power_off(vm.proc, vm.scratch)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            vms = list(self._vms.values())
        for vm in vms:  # power every VM off at once, then wait for each
            if vm.proc.poll() is None:
                vm.proc.terminate()
        for vm in vms:
            self.delete(vm.name)



def _key_pipe(key: bytes) -> int:
    """The read end of a pipe holding the worker's key (hex), its write end closed: the worker
    reads it once (``--key-fd``). An environment variable would stay in the worker's
    ``/proc/<pid>/environ`` for its whole life, whatever the worker unsets."""
    read, write = os.pipe()
    try:
        os.write(write, key.hex().encode())  # far below a pipe's buffer: it never blocks
    except OSError:
        os.close(read)
        raise
    finally:
        os.close(write)
    return read


def live_workers(scratch_root: Path) -> dict[str, int]:
    """The live worker agents under ``scratch_root`` (a crashed run's ``vms/``), by name
    (their "VM"'s directory): pid. A pid is taken only if its command line is a worker of
    that very scratch directory (pids are reused)."""
    found = {}
    for pid_file in sorted(scratch_root.glob(f"*/{PID_FILE}")):
        try:
            pid = int(pid_file.read_text())
        except (OSError, ValueError):
            continue
        if _is_worker(pid, pid_file.parent):
            found[pid_file.parent.name] = pid
    return found


def stop_workers(scratch_root: Path, names: Collection[str] | None = None,
                 grace: float = 5.0) -> int:
    """Power off the live workers under ``scratch_root`` (all, or those of ``names``) as
    ``delete`` would: SIGTERM first (the worker kills its jobs and reports them), then every
    job session it started and its own session. Returns how many were alive; when it returns,
    none of them or their jobs is."""
    stopped = [(pid, scratch_root / name) for name, pid in live_workers(scratch_root).items()
               if names is None or name in names]
    for pid, _scratch in stopped:
        signal_pid(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_is_worker(p, s) for p, s in stopped):
        time.sleep(0.1)
    for pid, scratch in stopped:
        power_off_pid(pid, scratch)
    return len(stopped)


def signal_pid(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _is_worker(pid: int, scratch: Path) -> bool:
    """Whether ``pid`` is a live worker agent of the "VM" ``scratch`` (Linux /proc)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    args = [a.decode(errors="replace") for a in argv]
    return ("expo_executor.worker.agent" in args and "--scratch" in args
            and args.index("--scratch") + 1 < len(args)
            and Path(args[args.index("--scratch") + 1]) == scratch
            and pid in session_members(pid))
