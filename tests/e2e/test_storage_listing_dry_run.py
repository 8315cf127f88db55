"""Snakemake's existence checks in the GCS default storage, answered from one listing of the
prefix (frontends/snakemake/storage_listing.py), counted at a proxy in front of the emulator:
a listing reads one call per page; a real dry run through ``--executor expocloud`` makes one
listing and no call per file, where plain Snakemake makes several per file; and an output a job
writes during a real run on the emulated GCE path is seen."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("google.cloud.storage")
pytest.importorskip("gcp_storage_emulator")

from google.auth.credentials import AnonymousCredentials  # noqa: E402
from google.cloud import storage  # noqa: E402

from expo_executor.emulator.compute import FakeCompute  # noqa: E402
from expo_executor.emulator.faulty_proxy import FaultyProxy  # noqa: E402
from expo_executor.frontends.snakemake.storage_listing import FIELDS, list_prefix  # noqa: E402

from tests.emulated_gce import (PROJECT, REPO, emulated_args, emulated_env,  # noqa: E402
                                fake_compute)  # noqa: F401
from tests.gcs_emulator import fresh_bucket, gcs_emulator  # noqa: F401,E402
from tests.helpers import SNAKEMAKE, wait_until  # noqa: E402

POINTS = 24  # outputs of the dry run's sweep, half of them in the bucket beforehand
SWEEP = """
rule all:
    input: [f"results/{i // 10}/{i}.txt" for i in range(%d)]

rule point:
    output: "results/{a}/{i}.txt"
    shell: "echo {wildcards.i} > {output}"
""" % POINTS
CHAIN = """
rule all:
    input: "out/b.txt"

rule first:
    output: "out/a.txt"
    shell: "echo a > {output}"

rule second:
    input: "out/a.txt"
    output: "out/b.txt"
    shell: "cat {input} > {output} && echo b >> {output}"
"""


@pytest.fixture
def proxy(gcs_emulator: str) -> Iterator[FaultyProxy]:  # noqa: F811
    with FaultyProxy(gcs_emulator, rate=0.0) as counting:
        yield counting


def _client(endpoint: str) -> storage.Client:
    return storage.Client(project=PROJECT, credentials=AnonymousCredentials(),
                          client_options={"api_endpoint": endpoint})


def _upload(endpoint: str, bucket: str, names: list[str]) -> None:
    target = _client(endpoint).bucket(bucket)
    for name in names:
        target.blob(name).upload_from_string(name.encode())


def test_a_listing_is_one_call_per_page(proxy: FaultyProxy, gcs_emulator: str) -> None:  # noqa: F811
    bucket = fresh_bucket(gcs_emulator)
    _upload(gcs_emulator, bucket, [f"wf/r/{i}.txt" for i in range(7)] + ["other/x.txt"])
    blobs = _client(proxy.endpoint).list_blobs(bucket, prefix="wf/", page_size=3, fields=FIELDS)
    listing = list_prefix(iter(blobs.pages))
    assert listing.complete and listing.pages == 3
    # three calls for three pages (google-cloud-storage may also read the bucket's metadata
    # once, in the background: not a listing)
    assert proxy.listings == {"wf/": 3}, proxy.calls
    assert sorted(item.name for item in listing.objects) == [f"wf/r/{i}.txt" for i in range(7)]
    assert {item.size for item in listing.objects} == {len("wf/r/0.txt")}
    assert all(item.mtime > 0 for item in listing.objects)


def _dry_run(workdir: Path, endpoint: str, prefix: str, *how: str) -> str:
    workdir.mkdir()
    (workdir / "Snakefile").write_text(SWEEP)
    result = subprocess.run(
        [SNAKEMAKE, "-n", *how, "--default-storage-prefix", prefix], cwd=workdir,
        capture_output=True, text=True, timeout=300, env=emulated_env(endpoint))
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout + result.stderr


def _planned(output: str, rule: str) -> int:
    """How many jobs of ``rule`` a dry run's job stats table plans."""
    found = re.search(rf"^{rule}\s+(\d+)\s*$", output, re.M)
    return int(found.group(1)) if found else 0


def _prepared_bucket(endpoint: str) -> str:
    """A bucket holding half the sweep's outputs and objects of no concern beside them."""
    bucket = fresh_bucket(endpoint)
    _upload(endpoint, bucket, [f"wf/results/{i // 10}/{i}.txt" for i in range(0, POINTS, 2)]
            + [f"elsewhere/{i}.txt" for i in range(5)])
    return bucket


def test_dry_run_answers_existence_from_one_listing(tmp_path: Path, proxy: FaultyProxy,
                                                    gcs_emulator: str) -> None:  # noqa: F811
    bucket = _prepared_bucket(gcs_emulator)
    ours = _dry_run(tmp_path / "ours", proxy.endpoint, f"gs://{bucket}/wf",
                    "--profile", str(REPO / "profiles" / "gce-emulated"),
                    "--expocloud-gce-endpoint", "http://127.0.0.1:9")
    calls, listings = dict(proxy.calls), dict(proxy.listings)
    assert _planned(ours, "point") == POINTS // 2, ours[-3000:]  # the missing half
    # one listing of the prefix (one page), no call per file, nothing outside the prefix;
    # google-cloud-storage itself may read the bucket's metadata once, in the background
    assert listings == {"wf/": 1}, (calls, listings)
    assert calls["list"] == 1 and calls.get("bucket", 0) <= 1, calls
    assert set(calls) <= {"list", "bucket"}, calls

    # plain Snakemake with the same storage (the plugin's own inventory) asks per file
    plain = _dry_run(tmp_path / "plain", proxy.endpoint, f"gs://{bucket}/wf",
                     "--default-storage-provider", "gcs", "--storage-gcs-project", PROJECT)
    assert _planned(plain, "point") == POINTS // 2, plain[-3000:]
    plain_calls = sum(proxy.calls.values()) - sum(calls.values())
    assert plain_calls >= POINTS, dict(proxy.calls)


def test_an_output_a_job_writes_during_the_run_is_seen(
        tmp_path: Path, proxy: FaultyProxy, fake_compute: FakeCompute,  # noqa: F811
        gcs_emulator: str) -> None:  # noqa: F811
    """The listing before the run says out/a.txt is absent; the first job writes it and the
    second reads it: Snakemake asks storage itself once the run starts, so both succeed."""
    (tmp_path / "Snakefile").write_text(CHAIN)
    args = emulated_args(fake_compute, proxy.endpoint, None)
    prefix = args[args.index("--default-storage-prefix") + 1]
    bucket = prefix.removeprefix("gs://").split("/")[0]
    result = subprocess.run([SNAKEMAKE, *args], cwd=tmp_path, capture_output=True, text=True,
                            timeout=600, env=emulated_env(proxy.endpoint))
    assert result.returncode == 0, result.stderr[-4000:]
    assert proxy.listings["wf/"] == 1  # the DAG's one listing, before any job
    b = _client(gcs_emulator).bucket(bucket).blob("wf/out/b.txt").download_as_text()
    assert b == "a\nb\n"
    assert wait_until(lambda: not fake_compute.instances(), timeout=60), \
        fake_compute.instances()
