"""Storage faults: a proxy in front of the faithful GCS emulator answers 503 and 429 and drops
connections, before and after forwarding, on a seeded 10% of the calls. The bucket layer still
keeps its contract, and a whole emulated GCE sweep (coordinator, workers and Snakemake's GCS
storage plugin all going through the proxy) completes with the right results."""

from __future__ import annotations

import io
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("google.cloud.storage")
pytest.importorskip("gcp_storage_emulator")

from google.auth.credentials import AnonymousCredentials  # noqa: E402
from google.cloud import storage  # noqa: E402

from expo_executor.protocol.bucket import PreconditionFailed  # noqa: E402
from expo_executor.emulator.faulty_proxy import CORRUPT, KINDS, FaultyProxy  # noqa: E402
from expo_executor.protocol.gcs_bucket import GcsBucket  # noqa: E402

from tests.emulated_gce import PROJECT, emulated_args, emulated_env, fake_compute  # noqa: F401,E402
from tests.gcs_emulator import fresh_bucket, gcs_emulator  # noqa: F401,E402
from tests.helpers import SNAKEMAKE, job_records, run_dirs, wait_until, write_inbox  # noqa: E402
from .conftest import size  # noqa: E402

RATE = 0.1
SEED = 6


@pytest.fixture
def proxy(gcs_emulator: str) -> Iterator[FaultyProxy]:  # noqa: F811
    """A proxy with no random faults; each test sets its own rate or script."""
    with FaultyProxy(gcs_emulator, rate=0.0, seed=SEED) as faulty:
        yield faulty


def _bucket(endpoint: str, url: str) -> GcsBucket:
    # short real backoff: the point is that retries happen, not how long they wait
    return GcsBucket(url, endpoint=endpoint, base=0.01, cap=0.2)


# -- the bucket layer ---------------------------------------------------------------------------


def test_create_only_write_whose_answer_is_lost_is_ours(proxy: FaultyProxy,
                                                         gcs_emulator: str) -> None:  # noqa: F811
    """The write lands, its answer is lost (dropped, or replaced by 503/429), the retry meets
    412: the object holds our bytes, so the write is ours, not a lost race."""
    url = f"gs://{fresh_bucket(gcs_emulator)}/run"
    bucket = _bucket(proxy.endpoint, url)
    direct = _bucket(gcs_emulator, url)
    bucket.write("warm-up", b"")  # the client's first upload also fetches the bucket once
    bucket.ops.clear()
    for n, kind in enumerate(("drop-after", "503-after", "429-after")):
        proxy.inject_next(kind)
        generation = bucket.write(f"results/j{n}/w.json", b"mine", if_generation_match=0)
        stored = direct.read(f"results/j{n}/w.json")
        assert stored is not None and stored.data == b"mine"
        assert stored.generation == generation
    assert proxy.injected == {"drop-after": 1, "503-after": 1, "429-after": 1}
    assert bucket.ops["A"] == 6, "one lost and one answered upload per write"


def test_real_race_still_loses_through_faults(proxy: FaultyProxy,
                                              gcs_emulator: str) -> None:  # noqa: F811
    """Another writer's object is a lost race however many faults came first."""
    url = f"gs://{fresh_bucket(gcs_emulator)}/run"
    bucket = _bucket(proxy.endpoint, url)
    direct = _bucket(gcs_emulator, url)
    bucket.write("warm-up", b"")
    for n, kinds in enumerate((("drop-before",), ("drop-after",), ("503-before", "429-after"))):
        direct.write(f"lease{n}", b"theirs", if_generation_match=0)
        proxy.inject_next(*kinds)
        with pytest.raises(PreconditionFailed):
            bucket.write(f"lease{n}", b"mine", if_generation_match=0)
        assert direct.read(f"lease{n}").data == b"theirs"
    # a conditional overwrite against a stale generation loses too
    current = direct.read("lease0").generation
    direct.write("lease0", b"newer", if_generation_match=current)
    proxy.inject_next("drop-after")
    with pytest.raises(PreconditionFailed):
        bucket.write("lease0", b"mine", if_generation_match=current)


def test_bucket_contract_holds_at_ten_percent_faults(
        proxy: FaultyProxy, gcs_emulator: str, fault_figures) -> None:  # noqa: F811
    """Writes, create-only writes, reads, lists and deletes through 10% faults of every kind:
    every call returns what the fault-free emulator says, and every kind was injected."""
    url = f"gs://{fresh_bucket(gcs_emulator)}/run"
    bucket = _bucket(proxy.endpoint, url)
    direct = _bucket(gcs_emulator, url)
    proxy.set_rate(RATE)
    objects = size(60, 300)
    for i in range(objects):
        key = f"o/{i:04d}"
        data = f"payload {i}".encode()
        generation = bucket.write(key, data, if_generation_match=0 if i % 2 else None)
        assert bucket.read(key).data == data
        assert direct.read(key).generation == generation
        if i % 3 == 0:
            with pytest.raises(PreconditionFailed):
                bucket.write(key, b"second", if_generation_match=0)
        if i % 10 == 9:
            assert bucket.list("o/") == direct.list("o/")
    for i in range(0, objects, 2):
        bucket.delete(f"o/{i:04d}")
    assert set(direct.list("o/")) == {f"o/{i:04d}" for i in range(1, objects, 2)}
    assert all(proxy.injected[kind] > 0 for kind in KINDS), proxy.injected
    fault_figures("storage 503/429/dropped connections, bucket layer",
                  injected=proxy.total_injected, survived=proxy.total_injected,
                  detail=f"{proxy.requests} storage calls, {dict(proxy.injected)}",
                  calls=proxy.requests, by_kind=dict(proxy.injected))


def test_corrupted_downloads_are_read_again_never_returned(
        gcs_emulator: str, fault_figures) -> None:  # noqa: F811
    """Half the whole-object downloads have a bit flipped on the way (their x-goog-hash kept):
    the client's CRC32C check catches each, the bucket layer reads again, and every read
    returns exactly what was written. (Snakemake's GCS plugin does not retry the client's
    DataCorruption: docs/RELIABILITY.md.)"""
    url = f"gs://{fresh_bucket(gcs_emulator)}/run"
    objects = size(40, 200)
    with FaultyProxy(gcs_emulator, rate=0.5, seed=SEED, kinds=(CORRUPT,)) as faulty:
        bucket = _bucket(faulty.endpoint, url)
        for i in range(objects):
            data = f"payload {i} ".encode() * (i + 1)
            generation = bucket.write(f"o/{i:04d}", data)
            blob = bucket.read(f"o/{i:04d}")
            assert blob is not None and blob.data == data and blob.generation == generation
    assert faulty.injected[CORRUPT] >= objects // 4, faulty.injected
    fault_figures("corrupted downloads (bit flipped, hash kept), bucket layer",
                  injected=faulty.injected[CORRUPT], survived=faulty.injected[CORRUPT],
                  detail=f"{objects} objects written and read back exactly",
                  calls=faulty.requests)


def test_proxy_carries_ranges_and_resumable_uploads(proxy: FaultyProxy,
                                                    gcs_emulator: str) -> None:  # noqa: F811
    """The google client's other traffic: a resumable upload (its session URL must point back
    at the proxy) and ranged downloads, with faults that its own retry policy absorbs."""
    name = fresh_bucket(gcs_emulator)
    client = storage.Client(project=PROJECT, credentials=AnonymousCredentials(),
                            client_options={"api_endpoint": proxy.endpoint})
    blob = client.bucket(name).blob("big.bin")
    blob.chunk_size = 256 * 1024
    data = bytes(range(256)) * 4096 * 2  # 2 MiB in 8 chunks
    # no size given: the client cannot use one multipart request and starts a resumable session
    blob.upload_from_file(io.BytesIO(data), if_generation_match=0)
    forwarded = proxy.forwarded
    assert forwarded >= 9, "a resumable session: one start and a request per chunk"
    again = client.bucket(name).blob("big.bin")
    assert again.download_as_bytes(start=1000, end=1999) == data[1000:2000]
    proxy.inject_next("503-before", "drop-after")
    assert again.download_as_bytes() == data  # the client's default retry for reads


# -- a whole emulated GCE sweep -----------------------------------------------------------------

SWEEP = """
N = int(config.get("jobs", 12))

rule all:
    input: expand("out/{i}.txt", i=range(N))

rule square:
    output: "out/{i}.txt"
    shell: "echo $(( {wildcards.i} * {wildcards.i} )) > {output}"
"""


def _objects(endpoint: str, bucket: str, prefix: str) -> dict[str, bytes]:
    client = storage.Client(project=PROJECT, credentials=AnonymousCredentials(),
                            client_options={"api_endpoint": endpoint})
    # fresh blobs: a listed one's media link names the host it was uploaded through (the proxy)
    names = [b.name for b in client.list_blobs(bucket, prefix=prefix)]
    return {name: client.bucket(bucket).blob(name).download_as_bytes() for name in names}


def test_emulated_sweep_completes_through_storage_faults(tmp_path: Path, fake_compute,  # noqa: F811
                                                         gcs_emulator: str,  # noqa: F811
                                                         fault_figures) -> None:
    """All storage traffic of a GCE run (the coordinator, every worker from its boot
    metadata, Snakemake's storage plugin on both sides) through 10% faults: exit 0, every
    output right, faults of every kind injected, no VM left.

    Spared: Snakemake's own delete of its source archive as the run ends. The GCS storage
    plugin's ``remove`` does not survive a fault answered after the delete landed: the
    client retries and meets 404, and Snakemake exits 1 with every job done
    (docs/RELIABILITY.md, Limits)."""
    jobs = size(12, 100)
    (tmp_path / "Snakefile").write_text(SWEEP)
    with FaultyProxy(gcs_emulator, rate=RATE, seed=SEED) as faulty:
        faulty.spare(lambda request: request.method == "DELETE"
                     and "snakemake-workflow-sources." in request.target)
        args = emulated_args(fake_compute, faulty.endpoint, None, "--expocloud-max-workers",
                             str(size(3, 6)), "--config", f"jobs={jobs}")
        prefix = args[args.index("--default-storage-prefix") + 1]
        started = time.monotonic()
        result = subprocess.run([SNAKEMAKE, *args], cwd=tmp_path, capture_output=True,
                                text=True, timeout=900, env=emulated_env(faulty.endpoint))
        seconds = time.monotonic() - started
        (tmp_path / "snakemake.log").write_text(result.stderr)  # for a post-mortem
        assert result.returncode == 0, result.stderr[-6000:]
        injected = dict(faulty.injected)
        calls = faulty.requests
    bucket_name, _, path = prefix.removeprefix("gs://").partition("/")
    stored = _objects(gcs_emulator, bucket_name, f"{path}/out/")
    assert stored == {f"{path}/out/{i}.txt": f"{i * i}\n".encode() for i in range(jobs)}
    records = job_records(run_dirs(tmp_path)[-1])
    assert len(records) == jobs and {r["outcome"] for r in records.values()} == {"solved"}
    assert all(injected.get(kind, 0) > 0 for kind in KINDS), injected
    assert wait_until(lambda: not fake_compute.instances(), timeout=60), \
        fake_compute.instances()
    fault_figures("storage 503/429/dropped connections, emulated GCE sweep",
                  injected=sum(injected.values()), survived=sum(injected.values()),
                  jobs=jobs, jobs_lost=jobs - len(records), orphan_vms=0,
                  detail=f"{calls} storage calls through the proxy at {RATE:.0%}, "
                         f"{seconds:.0f} s; by kind {json.dumps(injected)}",
                  calls=calls, by_kind=injected, seconds=round(seconds, 1))


# -- expocloud emulator --storage-fault-rate ----------------------------------------------------


def test_emulator_command_serves_storage_through_faults(tmp_path: Path) -> None:
    """``expocloud emulator --storage-fault-rate``: the exported endpoint is the faulty proxy,
    the bucket layer comes through it, and Ctrl-C says what was injected."""
    from tests.helpers import EXPOCLOUD

    proc = subprocess.Popen([EXPOCLOUD, "emulator", "--compute-port", "0", "--storage-port",
                             "0", "--dir", str(tmp_path / "vms"), "--storage-fault-rate",
                             "0.3", "--seed", "3", "--bucket", "faulty"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=emulated_env(""))
    try:
        lines = []
        while not lines or not lines[-1].startswith("export STORAGE_EMULATOR_HOST="):
            line = proc.stdout.readline()
            assert line, "".join(lines)
            lines.append(line.strip())
        endpoint = lines[-1].split("=", 1)[1]
        assert any(line.startswith("storage faults:      30%") for line in lines), lines
        bucket = _bucket(endpoint, "gs://faulty/p")
        for i in range(30):
            bucket.write(f"k{i}", b"v", if_generation_match=0)
        assert len(bucket.list("")) == 30
        proc.send_signal(2)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0
    injected = [line for line in out.splitlines() if line.startswith("storage faults injected:")]
    assert injected and not injected[0].startswith("storage faults injected: 0 "), out


def test_emulator_refuses_a_fault_rate_that_is_not_a_fraction() -> None:
    from tests.helpers import EXPOCLOUD

    result = subprocess.run([EXPOCLOUD, "emulator", "--storage-fault-rate", "10"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "expocloud emulator: --storage-fault-rate 10 is not a fraction; fix: pass a number "
        "between 0 and 1 (0.1: one call in ten)"]


# -- an outage longer than the bucket layer's retries -----------------------------------------


def test_worker_outlives_a_storage_outage_and_reports_afterwards(
        tmp_path: Path, proxy: FaultyProxy, gcs_emulator: str,  # noqa: F811
        capfd: pytest.CaptureFixture[str]) -> None:
    """Every storage call fails for a while (longer than the bucket's own retries): the worker
    keeps its job running, says in one line per call what it could not do, and reports the
    result once the bucket answers again; nothing is lost, and it stops cleanly."""
    import threading

    from expo_executor.protocol import messages
    from expo_executor.protocol.keys import result_key
    from expo_executor.protocol.records import JobSpec
    from expo_executor.worker.agent import Worker

    key = b"k" * 32
    url = f"gs://{fresh_bucket(gcs_emulator)}/run"
    direct = _bucket(gcs_emulator, url)
    flaky = GcsBucket(url, endpoint=proxy.endpoint, attempts=3, base=0.01, cap=0.05)
    worker = Worker(flaky, "w-1", 1, key, tmp_path / "vm", poll=0.05, grace=60.0,
                    heartbeat=0.5)
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(worker.run()), daemon=True)
    thread.start()

    def send(seq: int, jobs: dict) -> None:
        write_inbox(direct, "w-1", seq,
                    {name: JobSpec.from_wire(job) for name, job in jobs.items()}, key=key)

    try:
        send(1, {"j": {"argv": ["sh", "-c", "sleep 1; echo done"], "cwd": str(tmp_path),
                       "env": {}, "deadline_s": 60, "cpus": 1}})
        assert wait_until(lambda: "j" in worker.running, 30)
        proxy.set_rate(1.0)  # the outage starts while the job runs
        # every call fails now, so a held result stays held until the outage ends
        assert wait_until(lambda: "j" not in worker.running and "j" in worker.unsent, 30)
        seen = proxy.requests  # the outage lasts for a few more rounds of the worker's calls
        assert wait_until(lambda: proxy.requests >= seen + 30, 30)
        proxy.set_rate(0.0)
        assert wait_until(lambda: direct.read(result_key("j", "w-1")) is not None, 30)
        result = messages.decode("result", direct.read(result_key("j", "w-1")).data)
        assert result["outcome"] == "solved"
        assert thread.is_alive()
        worker.request_stop("terminated")
        thread.join(timeout=30)
        assert codes == [0]
    finally:
        worker.request_stop("terminated")
        thread.join(timeout=10)
    err = capfd.readouterr().err
    assert "worker w-1: cannot report the result of j (trying again later)" in err, \
        sorted({line[:60] for line in err.splitlines()})


# -- a 60-second outage of all storage, mid-run -------------------------------------------------

OUTAGE_S = 60.0
HOLD_SNAKEFILE = """
rule all:
    input: "out/sum.txt"

rule sum:
    input: expand("out/{{i}}.txt", i=range({jobs}))
    output: "out/sum.txt"
    shell: "cat {{input}} | paste -sd+ | bc > {{output}}"

rule hold:
    output: "out/{{i}}.txt"
    shell: "{python} {script} {{wildcards.i}} {{output}} {ledger} {release}"
"""
HOLD_JOB = """
import json, os, sys, time
job, out, ledger, release = sys.argv[1:5]

def note(event):
    with open(ledger, "a") as handle:
        handle.write(json.dumps({"job": job, "event": event, "pid": os.getpid()}) + "\\n")

note("start")
while not os.path.exists(release):  # held until the test says so: across the outage
    time.sleep(0.2)
os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
with open(out, "w") as handle:
    handle.write(f"{job}\\n")
note("end")
"""


@pytest.mark.slow
def test_a_sixty_second_storage_outage_mid_run_loses_nothing(
        tmp_path: Path, fake_compute, gcs_emulator: str, fault_figures) -> None:  # noqa: F811
    """Every storage call of an emulated GCE run (coordinator, workers, Snakemake's storage
    plugin) fails for 60 s while two jobs run (the workers' grace is 180 s): the coordinator
    rides it out and says so, no job fails or runs twice, the job that needs their outputs
    runs after it, every output is right, and no VM is left."""
    import sys

    jobs = 2
    ledger, release = tmp_path / "ledger.jsonl", tmp_path / "release"
    (tmp_path / "hold.py").write_text(HOLD_JOB)
    workdir = tmp_path / "wf"
    workdir.mkdir()
    (workdir / "Snakefile").write_text(HOLD_SNAKEFILE.format(
        jobs=jobs, python=sys.executable, script=tmp_path / "hold.py", ledger=ledger,
        release=release))

    def events(kind: str) -> list[str]:
        lines = ledger.read_text().splitlines() if ledger.exists() else []
        return [json.loads(line)["job"] for line in lines if json.loads(line)["event"] == kind]

    with FaultyProxy(gcs_emulator, rate=0.0, seed=SEED) as faulty, \
            open(tmp_path / "snakemake.log", "w") as log:
        args = emulated_args(fake_compute, faulty.endpoint, None, "--expocloud-max-workers",
                             "2", "--expocloud-slots-per-worker", "1",
                             "--expocloud-heartbeat-grace", "180",
                             "--expocloud-boot-timeout", "300s")
        prefix = args[args.index("--default-storage-prefix") + 1]
        proc = subprocess.Popen([SNAKEMAKE, *args], cwd=workdir, stdout=log,
                                stderr=subprocess.STDOUT, text=True,
                                env=emulated_env(faulty.endpoint))
        try:
            assert wait_until(lambda: len(events("start")) == 2, 240), \
                (tmp_path / "snakemake.log").read_text()[-4000:]
            faulty.set_rate(1.0)  # the outage: every storage call fails
            seen = faulty.requests
            time.sleep(OUTAGE_S)  # its length is the point of the test
            faulty.set_rate(0.0)
            failed_calls = faulty.requests - seen
            release.touch()
            returncode = proc.wait(timeout=600)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    output = (tmp_path / "snakemake.log").read_text()
    assert returncode == 0, output[-6000:]
    assert failed_calls >= 10, "the outage was felt"
    assert sum("calls fail" in line for line in output.splitlines()) == 1, output[-6000:]
    assert "succeed again" in output
    assert sorted(events("start")) == sorted(events("end")) == [str(i) for i in range(jobs)], \
        "every job ran exactly once"
    stored = _objects(gcs_emulator, *prefix.removeprefix("gs://").split("/", 1))
    path = prefix.removeprefix("gs://").split("/", 1)[1]
    assert {k: v for k, v in stored.items() if "/out/" in k} == {
        **{f"{path}/out/{i}.txt": f"{i}\n".encode() for i in range(jobs)},
        f"{path}/out/sum.txt": f"{sum(range(jobs))}\n".encode()}
    records = job_records(run_dirs(workdir)[-1])
    assert len(records) == jobs + 1, records
    assert {r["outcome"] for r in records.values()} == {"solved"}
    assert wait_until(lambda: not fake_compute.instances(), timeout=60), \
        fake_compute.instances()
    fault_figures("a 60-s outage of all storage mid-run, emulated GCE sweep",
                  injected=failed_calls, survived=failed_calls, jobs=jobs + 1, jobs_lost=0,
                  orphan_vms=0, detail=f"{failed_calls} storage calls failed during the outage; "
                                       "no job failed or ran twice")
