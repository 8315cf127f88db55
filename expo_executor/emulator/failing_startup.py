"""What a fake VM whose startup script fails runs instead of the worker.

The real startup script (``engines.gce.startup``) halts the VM on any setup error, after it
leaves the last lines of its log in the run's bucket (``keys.boot_log_key``). A fake VM with
the ``startup_fails`` boot fault runs this instead: the same object, then a non-zero exit,
which the fake turns into a guest power-off (TERMINATED), as on Compute Engine. ``--silent``
leaves no log, as a VM whose account cannot write the bucket. Like the real script, it learns
the bucket from the metadata server (plain HTTP, as curl does there).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.request
from datetime import datetime, timezone

from expo_executor.protocol.keys import WORKER_ATTRIBUTE, boot_log_key

#: What the fake startup log says went wrong (a failure a first real run meets).
REASON = ("this VM has Python 3.11 but the submitting host runs 3.13: use an image whose "
          "python3 is 3.13, or image mode")


def metadata(path: str) -> str:
    host = os.environ.get("GCE_METADATA_HOST", "metadata.google.internal")
    request = urllib.request.Request(f"http://{host}/computeMetadata/v1/{path}",
                                     headers={"Metadata-Flavor": "Google"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        return answer.read().decode()


def boot_log(name: str) -> str:
    """A startup log as the real script writes it, ending in its error."""
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return "".join(f"{stamp} expocloud-startup: {line}\n" for line in (
        f"mode pip, Python 3.13, on {name}", f"ERROR: {REASON}", "exit status 1",
        "halting: poweroff"))


def leave_log(name: str) -> None:
    """Write ``boot_log(name)`` where the real script would (the run's bucket prefix)."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    config = json.loads(metadata(f"instance/attributes/{WORKER_ATTRIBUTE}"))
    bucket, _, prefix = str(config["bucket"]).removeprefix("gs://").partition("/")
    endpoint = config.get("storage_emulator_host") or os.environ["STORAGE_EMULATOR_HOST"]
    client = storage.Client(project="fake", credentials=AnonymousCredentials(),
                            client_options={"api_endpoint": endpoint})
    prefix = prefix.strip("/")
    key = f"{prefix}/{boot_log_key(name)}" if prefix else boot_log_key(name)
    client.bucket(bucket).blob(key).upload_from_string(boot_log(name))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--silent", action="store_true", help="leave no log in the bucket")
    args = parser.parse_args(argv)
    if not args.silent:
        leave_log(metadata("instance/name"))
    print(f"expocloud-startup: ERROR: {REASON}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
