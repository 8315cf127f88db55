"""``expocloud-worker``: the agent on each VM (or local process standing in for one).

The command line: its settings (from arguments, or on a VM from the metadata server, with the
worker's key asked of the coordinator through the bucket), its signals (SIGTERM: stop; on a VM
possibly a preemption), and on a VM the dead man's switch's last step, deleting the VM. The
agent itself, its loop and its parts: ``worker/agent_loop.py``.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from pathlib import Path

from expo_executor.protocol.bucket import open_bucket
from expo_executor.protocol.keys import WORKER_KEY_ENV
from expo_executor.worker.agent_loop import ALLOWANCE_ENV, STAGING_ALLOWANCE_S, Worker, zygote_for
from expo_executor.worker.console import guard_output

__all__ = ["Worker", "main"]  # Worker: the agent, imported from here by its callers


def main(argv: list[str] | None = None) -> int:
    guard_output()  # a closed stdout (the VM shutting down) must not cost the last report
    parser = argparse.ArgumentParser(prog="expocloud-worker", description=__doc__.splitlines()[0])
    parser.add_argument("--from-metadata", action="store_true",
                        help="on a VM: read every setting from the metadata server and ask the "
                        "coordinator for this worker's key through the bucket")
    parser.add_argument("--bucket", help="bucket URL of the run")
    parser.add_argument("--worker-id")
    parser.add_argument("--slots", type=int)
    parser.add_argument("--scratch", type=Path, required=True, help="this VM's local disk")
    parser.add_argument("--poll", type=float, default=0.2)
    parser.add_argument("--grace", type=float, default=60.0)
    parser.add_argument("--heartbeat", type=float, default=10.0)
    parser.add_argument("--report-delay", type=float, default=None,
                        help="seconds a solved result may wait to share its object with "
                        "others (default: the heartbeat)")
    parser.add_argument("--pulse", type=float, default=None,
                        help="the coordinator's heartbeat: with no new inbox for this long, "
                        "read its pulse (default: the inbox alone keeps the worker alive)")
    parser.add_argument("--key-fd", type=int, default=None,
                        help="read this worker's key (hex) from this inherited descriptor, "
                        f"then close it (the local engine's way: {WORKER_KEY_ENV} would stay "
                        "in /proc/<pid>/environ); without it, from " + WORKER_KEY_ENV)
    parser.add_argument("--boot-delay", type=float, default=0.0,
                        help="seconds to wait before reporting ready (emulates a VM booting)")
    parser.add_argument("--staging-allowance", type=float, default=_allowance(),
                        help="seconds of start-up and file staging a job with a deadline may "
                        f"take besides its command (default {STAGING_ALLOWANCE_S:g}, or "
                        f"{ALLOWANCE_ENV})")
    args = parser.parse_args(argv)
    if args.from_metadata:
        return _main_on_vm(args.scratch)
    missing = [f"--{n.replace('_', '-')}" for n in ("bucket", "worker_id", "slots")
               if getattr(args, n) is None]
    if missing:
        parser.error(f"{', '.join(missing)} required without --from-metadata")
    if args.pulse is not None and args.pulse <= 0:
        parser.error(f"--pulse {args.pulse:g}: give the coordinator's heartbeat in seconds (> 0)")
    key = _read_key(args.key_fd) if args.key_fd is not None else \
        _hex_key(os.environ.pop(WORKER_KEY_ENV, ""))
    if key is None:
        print(f"expocloud-worker: no key ({WORKER_KEY_ENV} is not set, or --key-fd gave no "
              "64 hex digits); fix: start workers through the coordinator, which hands each "
              "one its key", file=sys.stderr)
        return 2
    worker = Worker(open_bucket(args.bucket), args.worker_id, args.slots,
                    key, args.scratch, args.poll, args.grace, args.heartbeat,
                    allowance=args.staging_allowance, report_delay=args.report_delay,
                    pulse=args.pulse)
    _stop_on_signals(worker, on_vm=False)
    time.sleep(args.boot_delay)
    return _run(worker)


def _read_key(fd: int) -> bytes | None:
    """The key the local engine wrote to an inherited pipe (``engines/local.py``), once."""
    try:
        with os.fdopen(fd, "rb") as pipe:
            return _hex_key(pipe.read(1024).decode("ascii", "replace"))
    except OSError:
        return None


def _hex_key(text: str) -> bytes | None:
    try:
        key = bytes.fromhex(text.strip())
    except ValueError:
        return None
    return key if len(key) == 32 else None


def _main_on_vm(scratch: Path) -> int:
    """A worker on a (real or fake) GCE VM: settings from metadata, preemption watched, and
    the VM deleted when the coordinator has gone silent (the dead man's switch)."""
    from expo_executor.engines.gce import guest

    boot = guest.Boot.from_metadata()
    if boot.storage_emulator_host:
        os.environ["STORAGE_EMULATOR_HOST"] = boot.storage_emulator_host
    bucket = open_bucket(boot.bucket)
    zygote = zygote_for(scratch, boot.name)
    if zygote is not None:
        zygote.start()  # Snakemake's imports overlap the wait for the key (the first job's way)
    try:
        key = guest.worker_key(boot, bucket)
    except OSError as exc:  # no key (TimeoutError: no coordinator to work for; or the
        # metadata server gave no identity token): stop as when the coordinator falls silent
        if zygote is not None:
            zygote.close()
        why = f"worker {boot.name}: cannot get its key: {exc}"
        print(f"{why}; deleting this VM" if boot.self_delete else why, flush=True)
        if boot.self_delete:
            guest.delete_self(boot)
        return 3
    worker = Worker(bucket, boot.name, boot.slots, key, scratch,
                    boot.poll, boot.grace, boot.heartbeat, boot.slow_poll, _allowance(),
                    zygote=zygote if zygote is not None else False,
                    report_delay=boot.report_delay, pulse=boot.pulse)
    stop_watching = threading.Event()
    guest.watch_preemption(lambda: worker.request_stop("preempted"), stop_watching)
    _stop_on_signals(worker, on_vm=True)
    try:
        code = _run(worker)
    finally:
        stop_watching.set()
    if boot.self_delete and worker.stop_reason not in ("terminated", "preempted"):
        print(f"worker {boot.name}: {worker.stop_reason}; deleting this VM", flush=True)
        guest.delete_self(boot)
    return code


def _allowance() -> float:
    """The start-up and staging allowance: ``EXPOCLOUD_STAGING_ALLOWANCE_S`` or the default."""
    try:
        value = float(os.environ.get(ALLOWANCE_ENV, STAGING_ALLOWANCE_S))
    except ValueError:
        value = STAGING_ALLOWANCE_S
    return value if value > 0 else STAGING_ALLOWANCE_S


def _stop_on_signals(worker: Worker, on_vm: bool) -> None:
    def stop(*_: object) -> None:
        # On a VM, SIGTERM also comes with a preemption's soft power-off: ask the notice.
        if on_vm:
            from expo_executor.engines.gce.guest import preempted_now
            worker.request_stop("preempted" if preempted_now() else "terminated")
        else:
            worker.request_stop("terminated")

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)


def _run(worker: Worker) -> int:
    try:
        return worker.run()
    except Exception as exc:  # report the crash in our last breath, then die loudly
        worker.crashed(exc)
        raise


if __name__ == "__main__":
    sys.exit(main())
