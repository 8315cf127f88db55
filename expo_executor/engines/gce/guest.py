"""What a worker knows of the VM it runs on: its metadata, the preemption notice, self-deletion.

Everything comes from the metadata server (``GCE_METADATA_HOST``, default
``metadata.google.internal``), which only the VM itself can reach: the worker's settings never
travel on a command line. Its key is not in metadata (anyone with compute.instances.get reads
that): :func:`worker_key` asks the coordinator for it with the VM's identity token
(key_channel.py). Used by ``expocloud-worker --from-metadata``.
"""

from __future__ import annotations

import json
import os
import threading
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import quote

from expo_executor.engines.gce.clients import delete_call, make_clients
from expo_executor.gcp.errors import is_transient, is_transient_metadata
from expo_executor.engines.gce.key_channel import obtain_key
from expo_executor.gcp.retry import retry_call
from expo_executor.protocol.bucket import Bucket
from expo_executor.protocol.keys import WORKER_ATTRIBUTE

NOTICE_POLL_S = 25  # seconds one long poll of the preemption notice is held by the server


def metadata_host() -> str:
    return os.environ.get("GCE_METADATA_HOST", "metadata.google.internal")


def metadata_get(path: str, timeout: float = 10.0) -> str:
    """GET ``computeMetadata/v1/<path>``; transient failures are retried (the server may be
    slow just after boot), a 404 is not."""
    request = urllib.request.Request(f"http://{metadata_host()}/computeMetadata/v1/{path}",
                                     headers={"Metadata-Flavor": "Google"})

    def fetch() -> str:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.read().decode()

    return retry_call(fetch, is_transient=is_transient_metadata, attempts=6, base=0.5, cap=5.0)


@dataclass(frozen=True)
class Boot:
    """The worker's settings as the coordinator put them in the instance's metadata."""

    name: str
    zone: str
    project: str
    bucket: str
    slots: int
    poll: float
    grace: float
    heartbeat: float
    grant_verify_key: bytes  # checks the coordinator's answer to our key request (public)
    slow_poll: float | None = None
    report_delay: float | None = None  # worker/result_reports.py; None: the heartbeat
    pulse: float | None = None  # the coordinator's heartbeat, when it writes a pulse
    storage_emulator_host: str | None = None
    compute_endpoint: str | None = None
    self_delete: bool = True

    @classmethod
    def from_metadata(cls) -> Boot:
        config = json.loads(metadata_get(f"instance/attributes/{WORKER_ATTRIBUTE}"))
        if config.get("v") != 1:
            raise ValueError(f"unsupported {WORKER_ATTRIBUTE} version {config.get('v')!r}")
        return cls(
            name=metadata_get("instance/name"),
            zone=metadata_get("instance/zone").rsplit("/", 1)[-1],
            project=metadata_get("project/project-id"),
            bucket=str(config["bucket"]), slots=int(config["slots"]),
            poll=float(config["poll"]), grace=float(config["grace"]),
            heartbeat=float(config["heartbeat"]),
            grant_verify_key=bytes.fromhex(config["grant_verify_key"]),
            slow_poll=float(config["slow_poll"]) if config.get("slow_poll") else None,
            report_delay=float(config["report_delay"]) if config.get("report_delay") else None,
            pulse=float(config["pulse"]) if config.get("pulse") else None,
            storage_emulator_host=config.get("storage_emulator_host"),
            compute_endpoint=config.get("compute_endpoint"),
            self_delete=bool(config.get("self_delete", True)),
        )


def identity_token(audience: str) -> str:
    """This VM's identity token for ``audience``, with its instance claims (``format=full``):
    signed by Google, obtainable only from this VM's metadata server."""
    return metadata_get("instance/service-accounts/default/identity?audience="
                        f"{quote(audience, safe='')}&format=full")


def worker_key(boot: Boot, bucket: Bucket) -> bytes:
    """This worker's own key, from the coordinator through the bucket (key_channel.py); raises
    TimeoutError when none comes within the grace period (the coordinator gone or refusing)."""
    return obtain_key(bucket, boot.name, boot.bucket, boot.grant_verify_key, identity_token,
                      give_up_after=boot.grace, poll=boot.poll,
                      slow_poll=boot.slow_poll or boot.poll)


def preempted_now() -> bool:
    """One quick look at the notice (on SIGTERM: was this a preemption or a plain stop?)."""
    try:
        return metadata_get("instance/preempted", timeout=2.0).strip().upper() == "TRUE"
    except Exception:  # noqa: BLE001 - no answer: assume an ordinary stop
        return False


def watch_preemption(on_notice: Callable[[], None], stop: threading.Event) -> threading.Thread:
    """Long-poll the preemption notice in a daemon thread; call ``on_notice`` once if it comes.

    A Spot VM gets about 30 s between the notice and the hard power-off: enough to kill the
    jobs and report them as preempted, so the coordinator re-queues them at once.
    """
    def loop() -> None:
        while not stop.is_set():
            try:
                value = metadata_get(f"instance/preempted?wait_for_change=true"
                                     f"&timeout_sec={NOTICE_POLL_S}", timeout=NOTICE_POLL_S + 10)
            except Exception:  # noqa: BLE001 - metadata server hiccup: look again shortly
                stop.wait(5.0)
                continue
            if value.strip().upper() == "TRUE":
                on_notice()
                return

    thread = threading.Thread(target=loop, name="preemption-watch", daemon=True)
    thread.start()
    return thread


def delete_self(boot: Boot) -> None:
    """Delete this VM through the Compute API (the worker's service account may delete only
    expocloud's instances; see docs/gce.md): the engine's own delete, one request id for all
    its retries. Emulated runs use anonymous credentials."""
    client, _operations = make_clients(boot.compute_endpoint)
    delete_call(client, boot.project, boot.zone, boot.name, 60.0,
                lambda fn: retry_call(fn, is_transient=is_transient, attempts=5, base=1.0,
                                      cap=10.0))
