"""A case of Snakemake's own suite with a GCS bucket (the emulator) as Snakemake's default
storage: what a run through the emulated GCE path needs around it, and what plain Snakemake
needs to be measured beside it on the same storage.

Shared by ``tests/e2e/test_snakemake_workflows.py`` (its GCE cases) and
``bench/snakemake_on_gce.py`` (every readable case, plain and through expocloud, side by side),
so that the test and the measurement stage, run and judge a case the same way.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from tests import snakemake_suite as suite
from tests.emulated_gce import PROJECT

# Fast polls and a short idle time for a case through profiles/gce-emulated: the profile keeps
# a real run's slow poll (15 s), which would make each step of a case wait on it. They change
# how soon the coordinator looks, not what it decides.
FAST_POLLS = ("--expocloud-poll-interval", "0.2", "--expocloud-slow-poll-interval", "0.5",
              "--expocloud-idle-timeout", "1")


def plain_storage_args(prefix_url: str) -> list[str]:
    """Plain Snakemake's arguments for the same storage the emulated profile gives expocloud
    (``STORAGE_EMULATOR_HOST`` in the environment points the GCS plugin at the emulator)."""
    return ["--default-storage-provider", "gcs", "--default-storage-prefix", prefix_url,
            "--storage-gcs-project", PROJECT]


def git_init(workdir: Path) -> None:
    """Without a shared file system Snakemake ships the workflow's git-tracked sources."""
    for git in (["init", "-q"], ["add", "."]):
        subprocess.run(["git", *git], cwd=workdir, check=True, capture_output=True)


def bucket(endpoint: str, url: str) -> tuple[storage.Bucket, str]:
    """The bucket and the prefix of a ``gs://BUCKET/PREFIX`` url, on the emulator."""
    client = storage.Client(project=PROJECT, credentials=AnonymousCredentials(),
                            client_options={"api_endpoint": endpoint})
    name, _, prefix = url.removeprefix("gs://").partition("/")
    return client.bucket(name), prefix


def stage_inputs(workdir: Path, bucket: storage.Bucket, prefix: str) -> None:
    """What a user of a storage-backed run does first: the workflow's input files go to the
    storage prefix (Snakemake reads every input from there; sources travel by git)."""
    for path in sorted(workdir.rglob("*")):
        relative = path.relative_to(workdir)
        if path.is_file() and relative.parts[0] not in (".git", "expected-results") \
                and path.name != "Snakefile":
            bucket.blob(f"{prefix}/{relative}").upload_from_filename(str(path))


def fetch_results(tests_dir: Path, case: suite.Case, bucket: storage.Bucket, prefix: str,
                  dest: Path) -> None:
    """The expected results' counterparts, from the storage prefix the run wrote them to."""
    expected = tests_dir / case.folder / "expected-results"
    for path in expected.rglob("*") if expected.is_dir() else []:
        blob = bucket.blob(f"{prefix}/{path.relative_to(expected)}")
        if path.is_file() and blob.exists():
            target = dest / path.relative_to(expected)
            target.parent.mkdir(parents=True, exist_ok=True)
            blob.download_to_filename(str(target))


def storage_verdict(tests_dir: Path, case: suite.Case, workdir: Path, results: Path,
                    proc: subprocess.CompletedProcess) -> str:
    """'' when a storage-backed run did what the case asks, else what went wrong. A run that
    ended well is judged on the results fetched from storage into ``results`` (the working
    directory holds none of them); one that failed, on its exit code and output."""
    if case.kwargs.get("shouldfail") or proc.returncode != 0:
        return suite.verdict(tests_dir, case, workdir, proc)
    return "; ".join(suite.compare_results(tests_dir, case, results))
