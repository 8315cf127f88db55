"""Jobs that cannot finish their business: outputs the bucket refuses, a worker's disk that
fills. Each ends as a job error whose reason says why (in jobs.jsonl and Snakemake's error),
the other jobs and the worker carry on, and the run ends: no hang, no VM left."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("google.cloud.storage")
pytest.importorskip("gcp_storage_emulator")

from expo_executor.emulator.compute import FakeCompute  # noqa: E402
from expo_executor.emulator.faulty_proxy import FaultyProxy  # noqa: E402
from expo_executor.runs.files import RunFiles  # noqa: E402

from tests.emulated_gce import emulated_args, emulated_env, fake_compute  # noqa: F401,E402
from tests.gcs_emulator import fresh_bucket, gcs_emulator  # noqa: F401,E402
from tests.helpers import SNAKEMAKE, run_dirs, wait_until, write_inbox  # noqa: E402
from .conftest import size  # noqa: E402

SWEEP = """
N = int(config.get("jobs", 6))
BIG = int(config.get("big", -1))

rule all:
    input: expand("out/{i}.txt", i=range(N))

rule write:
    output: "out/{i}.txt"
    params: mb=lambda w: 64 if int(w.i) == BIG else 0
    # the big one fills the disk; Snakemake removes a failed job's output, freeing it again
    shell: "head -c {params.mb}M /dev/zero > {output} && echo {wildcards.i} > {output}"
"""


def _records(workdir: Path) -> list[dict]:
    return RunFiles(run_dirs(workdir)[-1]).jobs()


def _run(workdir: Path, fake: FakeCompute, endpoint: str, jobs: int,
         *config: str) -> subprocess.CompletedProcess:
    (workdir / "Snakefile").write_text(SWEEP)
    args = emulated_args(fake, endpoint, None, "--keep-going", "--expocloud-max-workers", "2",
                         "--config", f"jobs={jobs}", *config)
    return subprocess.run([SNAKEMAKE, *args], cwd=workdir, capture_output=True, text=True,
                          timeout=600, env=emulated_env(endpoint))


def test_refused_output_upload_is_a_job_error_with_its_reason(
        tmp_path: Path, fake_compute: FakeCompute, gcs_emulator: str,  # noqa: F811
        fault_figures) -> None:
    """The bucket answers 403 to every upload of one job's output: that job fails, its reason
    names the refused upload, every other job succeeds and the run ends with an error."""
    jobs = size(4, 10)
    with FaultyProxy(gcs_emulator, rate=0.0) as proxy:
        proxy.refuse_uploads("wf/out/2.txt")
        result = _run(tmp_path, fake_compute, proxy.endpoint, jobs)
        refused = proxy.refused[403]
    assert result.returncode != 0
    records = {r["wildcards"]["i"]: r for r in _records(tmp_path) if r["rule"] == "write"}
    assert {i for i, r in records.items() if r["outcome"] == "solved"} == \
        {str(i) for i in range(jobs)} - {"2"}
    failed = records["2"]
    assert failed["outcome"] == "failed"
    assert "Failed to store output in storage gs://" in failed["reason"], failed["reason"]
    assert "out/2.txt: Forbidden: 403" in failed["reason"], failed["reason"]
    # Snakemake's own error says it too, with the job's log tail
    assert "out/2.txt: Forbidden: 403" in result.stderr, result.stderr[-3000:]
    assert refused > 0
    assert wait_until(lambda: not fake_compute.instances(), timeout=60), \
        fake_compute.instances()
    fault_figures("output upload refused (403)", injected=refused, survived=refused,
                  jobs=jobs, detail=f"a job error with the reason, the other {jobs - 1} jobs "
                                    f"finished; reason: {failed['reason'][:200]}")


def test_staged_job_whose_outputs_are_refused_says_why(
        tmp_path: Path, gcs_emulator: str, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
        fault_figures) -> None:
    """A CWL job's command succeeds but the bucket refuses its outputs (403): its verdict is
    ``failed`` and says that uploading the outputs failed, and why; no manifest appears, so
    the runner cannot take partial outputs for the job's."""
    from expo_executor.frontends.cwl.staging import Staging
    from expo_executor.protocol.gcs_bucket import GcsBucket
    from expo_executor.worker.staged_job import main as staged_main
    from expo_executor.worker.staged_job import STAGED_SPEC, verdict_path

    url = f"gs://{fresh_bucket(gcs_emulator)}/run"
    root = tmp_path / "runner"
    outdir, tmpdir = root / "out1", root / "tmp1"
    for d in (outdir, tmpdir):
        d.mkdir(parents=True)
    staging = Staging(GcsBucket(url, endpoint=gcs_emulator), root)
    stage = staging.manifest("c1", [], str(outdir), str(tmpdir))
    spec = {"argv": ["/bin/sh", "-c", "echo result > answer.txt"], "cwd": str(outdir),
            "env": {"HOME": str(outdir), "PATH": os.environ["PATH"]},
            "stage": {**stage, "stdin": None, "stdout": None, "stderr": None,
                      "outdir": str(outdir), "timelimit": None, "success_codes": [0]},
            "bucket": url, "worker": "w-1"}
    here = tmp_path / "worker" / "jobs" / "c1"
    here.mkdir(parents=True)
    spec_path = here / STAGED_SPEC
    spec_path.write_text(json.dumps(spec))
    with FaultyProxy(gcs_emulator, rate=0.0) as proxy:
        proxy.refuse_uploads("run/stage/out/")
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.endpoint)
        assert staged_main([str(spec_path)]) != 0
        refused = proxy.refused[403]
    verdict = json.loads(verdict_path(spec_path).read_text())
    assert verdict["outcome"] == "failed" and verdict["returncode"] == 0
    assert verdict["reason"].startswith("uploading outputs to the bucket failed: Forbidden: 403")
    assert (here / "root" / "out1" / "answer.txt").read_text() == "result\n"
    assert GcsBucket(url, endpoint=gcs_emulator).list("stage/out/") == {}
    fault_figures("staged (CWL) job's output upload refused (403)", injected=refused,
                  survived=refused, jobs=1,
                  detail=f"a job error with the reason; verdict: {verdict['reason'][:200]}")


def test_staged_job_whose_upload_outlasts_its_allowance_is_no_timeout(
        tmp_path: Path, gcs_emulator: str, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
        fault_figures) -> None:
    """C7: a CWL job's command ends well within its 1 s time limit, then its outputs crawl to the
    bucket (every upload held 2 s at the storage boundary) past the worker's start-up and
    staging allowance (1 s here; 1800 s by default): the worker ends it as a failure that names
    the staging, never as a timeout, so it can never enter a frontier."""
    import threading

    from expo_executor.emulator.faulty_proxy import uploads_under
    from expo_executor.frontends.cwl.staging import Staging
    from expo_executor.protocol import messages
    from expo_executor.protocol.gcs_bucket import GcsBucket
    from expo_executor.protocol.keys import result_key
    from expo_executor.protocol.records import JobSpec
    from expo_executor.worker.agent import Worker

    key = b"k" * 32
    url = f"gs://{fresh_bucket(gcs_emulator)}/run"
    root = tmp_path / "runner"
    outdir, tmpdir = root / "out1", root / "tmp1"
    for d in (outdir, tmpdir):
        d.mkdir(parents=True)
    stage = Staging(GcsBucket(url, endpoint=gcs_emulator), root).manifest(
        "c1", [], str(outdir), str(tmpdir))
    job = {"argv": ["/bin/sh", "-c", "echo result > answer.txt"], "cwd": str(outdir),
           "env": {"HOME": str(outdir), "PATH": os.environ["PATH"]}, "deadline_s": None,
           "cpus": 1, "stage": {**stage, "stdin": None, "stdout": None, "stderr": None,
                                "outdir": str(outdir), "timelimit": 1, "success_codes": [0]}}
    with FaultyProxy(gcs_emulator, rate=0.0) as proxy:
        proxy.slow_down(uploads_under("run/stage/out/"), 2.0)
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.endpoint)  # the staged job's too
        bucket = GcsBucket(url, endpoint=proxy.endpoint)
        worker = Worker(bucket, "w-1", 1, key, tmp_path / "vm", poll=0.05, heartbeat=0.5,
                        allowance=1.0)
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        try:
            write_inbox(bucket, "w-1", 1, {"c1": JobSpec.from_wire(job)}, key=key)
            assert wait_until(lambda: bucket.read(result_key("c1", "w-1")) is not None, 60)
        finally:
            worker.request_stop("terminated")
            thread.join(timeout=30)
    result = messages.decode("result", bucket.read(result_key("c1", "w-1")).data, key)
    assert result["outcome"] == "failed", result
    assert "start-up and file staging took more than their allowance of 1 s (after its " \
        "command ended" in result["reason"], result["reason"]
    assert result["command_s"] < 5
    fault_figures("staged (CWL) job's output upload slower than its allowance", injected=1,
                  survived=1, jobs=1, detail=f"a failure, not a timeout: {result['reason'][:200]}")


# -- a full disk ----------------------------------------------------------------------------------

MOUNT_SCRIPT = 'mount -t tmpfs -o size={size} tmpfs "$1" && shift && exec "$@"'


def _can_mount_tmpfs() -> str | None:
    """Why a private tmpfs cannot be mounted here (None: it can). Root and unshare(1) give a
    real small disk: writes past its size fail with ENOSPC, as on a full VM disk."""
    if shutil.which("unshare") is None:
        return "no unshare(1)"
    probe = subprocess.run(["unshare", "-m", "sh", "-c",
                            MOUNT_SCRIPT.format(size="64k"), "sh", "/mnt", "true"],
                           capture_output=True, text=True, timeout=30)
    return None if probe.returncode == 0 else f"cannot mount a tmpfs: {probe.stderr.strip()}"


needs_tmpfs = pytest.mark.skipif(_can_mount_tmpfs() is not None,
                                 reason=str(_can_mount_tmpfs()))


class SmallDiskWorker:
    """An ``expocloud-worker`` process whose whole scratch disk is a 1 MiB tmpfs of its own
    mount namespace; the bucket (a directory) is outside it, as GCS is outside a VM."""

    def __init__(self, tmp_path: Path, size: str = "1m") -> None:
        from expo_executor.protocol.bucket import LocalBucket

        self.key = b"k" * 32
        self.bucket = LocalBucket(tmp_path / "bucket")
        self.scratch = tmp_path / "vm"
        self.scratch.mkdir()
        self.seq = 0
        self.log = open(tmp_path / "worker.log", "wb")
        self.proc = subprocess.Popen(
            ["unshare", "-m", "sh", "-c", MOUNT_SCRIPT.format(size=size), "sh",
             str(self.scratch), sys.executable, "-m", "expo_executor.worker.agent",
             "--bucket", str(self.bucket.root), "--worker-id", "w-1", "--slots", "1",
             "--scratch", str(self.scratch), "--poll", "0.05", "--grace", "120",
             "--heartbeat", "1"],
            env={**os.environ, "EXPOCLOUD_WORKER_KEY": self.key.hex()}, stdout=self.log,
            stderr=subprocess.STDOUT, start_new_session=True)

    def send(self, jobs: dict) -> None:
        from expo_executor.protocol.records import JobSpec

        self.seq += 1
        write_inbox(self.bucket, "w-1", self.seq,
                    {name: JobSpec.from_wire(job) for name, job in jobs.items()}, key=self.key)

    def result(self, key: str) -> dict | None:
        from expo_executor.protocol import messages
        from expo_executor.protocol.keys import result_key

        blob = self.bucket.read(result_key(key, "w-1"))
        return messages.decode("result", blob.data) if blob else None

    def run(self, key: str, script: str) -> dict:
        """Run one job in a directory the worker makes for it, on the small disk."""
        self.send({key: {"argv": ["sh", "-c", script], "cwd": "", "env": {},
                         "deadline_s": 60, "cpus": 1}})
        assert wait_until(lambda: self.result(key) is not None, 60), \
            (self.proc.poll(), Path(self.log.name).read_text())
        return self.result(key)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait()
        self.log.close()


@needs_tmpfs
def test_full_disk_fails_the_job_with_the_reason_and_the_worker_carries_on(
        tmp_path: Path, fault_figures) -> None:
    """A job fills the worker's disk (a real ENOSPC), a second job's output cannot reach its
    log: both fail saying "No space left on device"; the worker keeps going (its own
    bookkeeping survives the full disk), runs jobs again once space is freed, and stops
    cleanly. A job that fills the disk inside its own directory gives the space back as it
    ends (the worker removes the directory)."""
    worker = SmallDiskWorker(tmp_path)
    try:
        own = worker.run("own", "head -c 4M /dev/zero > big")
        assert own["outcome"] == "failed" and "No space left on device" in own["reason"], own
        after = worker.run("after", "head -c 100k /dev/zero > small && echo fine")
        assert after["outcome"] == "solved", after  # its directory went, and the space with it
        # outside its own directory (cwd is work/<key> on the scratch disk): the disk stays full
        filled = worker.run("fill", "head -c 4M /dev/zero > ../../big")
        assert filled["outcome"] == "failed", filled
        assert "No space left on device" in filled["reason"], filled
        # its output goes to its log, on the same full disk (a few pages may come free as
        # the worker replaces its own small files: more than that)
        silent = worker.run("chatty", "head -c 256k /dev/zero")
        assert silent["outcome"] == "failed", silent
        assert "No space left on device" in silent["reason"], silent
        assert worker.run("free", "rm -f ../../big")["outcome"] == "solved"
        again = worker.run("again", "head -c 100k /dev/zero > small && echo fine")
        assert again["outcome"] == "solved", again
        worker.proc.send_signal(signal.SIGTERM)
        assert worker.proc.wait(timeout=60) == 0, Path(worker.log.name).read_text()
    finally:
        worker.stop()
    fault_figures("worker disk full (ENOSPC on a 1 MiB tmpfs)", injected=3, survived=3,
                  jobs=6, detail=f"reasons: {filled['reason']!r}; {silent['reason']!r}")


@needs_tmpfs
def test_job_filling_a_vm_disk_is_a_job_error_in_snakemake(
        tmp_path: Path, gcs_emulator: str, fault_figures) -> None:  # noqa: F811
    """On the emulated GCE path, each VM's work disk is a small tmpfs: the job that writes more
    than fits fails, jobs.jsonl and Snakemake's error both say "No space left on device", the
    other jobs (some on the same VM, after it) succeed, the run ends and no VM is left."""
    jobs = size(4, 10)

    def small_disk(name: str, host: str, scratch: Path) -> list[str]:
        work = scratch / "work"
        work.mkdir(parents=True, exist_ok=True)
        return ["unshare", "-m", "sh", "-c", MOUNT_SCRIPT.format(size="24m"), "sh", str(work),
                sys.executable, "-m", "expo_executor.worker.agent", "--from-metadata",
                "--scratch", str(scratch)]

    fake = FakeCompute(tmp_path / "fake-vms", boot_delay=0.3, notice_s=0.5,
                       command=small_disk).start()
    try:
        workdir = tmp_path / "wf"
        workdir.mkdir()
        result = _run(workdir, fake, gcs_emulator, jobs, "big=1")
        assert result.returncode != 0
        records = {r["wildcards"]["i"]: r for r in _records(workdir) if r["rule"] == "write"}
        assert {i for i, r in records.items() if r["outcome"] == "solved"} == \
            {str(i) for i in range(jobs)} - {"1"}
        failed = records["1"]
        assert failed["outcome"] == "failed"
        assert "No space left on device" in failed["reason"], failed["reason"]
        assert "No space left on device" in result.stderr, result.stderr[-3000:]
        assert wait_until(lambda: not fake.instances(), timeout=60), fake.instances()
    finally:
        fake.stop()
    fault_figures("VM work disk full (ENOSPC on a tmpfs)", injected=1, survived=1,
                  jobs=jobs, detail=f"a job error with the reason, the other {jobs - 1} jobs "
                                    f"finished; reason: {failed['reason'][:200]}")


# -- a worker whose own disk fails (C5), emulated GCE ----------------------------------------------

BROKEN_DISK_SNAKEFILE = """
rule all:
    input: "out/held.txt", "out/after.txt"

rule breaker:  # breaks its VM's work disk once: no job directory can be made there any more
    output: "out/breaker.txt"
    shell: "if [ ! -e {flag} ]; then touch {flag}; d=$(dirname $EXPOCLOUD_DEPLOY_DIR); "
           "mv $d/work $d/work.gone && touch $d/work; fi; echo b > {{output}}"

rule after:  # assigned to the broken VM's free slot once breaker is done
    input: "out/breaker.txt"
    output: "out/after.txt"
    shell: "echo after >> {ledger}; echo a > {{output}}"

rule held:  # runs beside them until the test lets it end
    output: "out/held.txt"
    shell: "echo held >> {ledger}; while [ ! -e {release} ]; do sleep 0.2; done; echo h > {{output}}"
"""


def test_a_worker_whose_own_disk_fails_on_gce_loses_its_jobs_to_another(
        tmp_path: Path, fake_compute, gcs_emulator: str) -> None:  # noqa: F811
    """C5 on the emulated GCE path: a VM's work disk stops taking job directories while one
    job runs there; the next job assigned to it cannot start. That is the worker's failure,
    not the jobs': it reports both lost and goes, and they run on another VM; none fails."""
    ledger, release = tmp_path / "ledger", tmp_path / "release"
    workdir = tmp_path / "wf"
    workdir.mkdir()
    (workdir / "Snakefile").write_text(BROKEN_DISK_SNAKEFILE.format(
        flag=tmp_path / "broken", ledger=ledger, release=release))
    args = emulated_args(fake_compute, gcs_emulator, None, "--expocloud-max-workers", "1",
                         "--expocloud-slots-per-worker", "2")
    with open(tmp_path / "snakemake.log", "w") as log:
        proc = subprocess.Popen([SNAKEMAKE, *args], cwd=workdir, stdout=log,
                                stderr=subprocess.STDOUT, env=emulated_env(gcs_emulator))
        try:
            def held_twice() -> bool:
                return ledger.exists() and ledger.read_text().split().count("held") == 2

            assert wait_until(held_twice, 240), (tmp_path / "snakemake.log").read_text()[-4000:]
            release.touch()
            returncode = proc.wait(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    output = (tmp_path / "snakemake.log").read_text()
    assert returncode == 0, output[-6000:]
    crash = [line for line in output.splitlines() if "crashed" in line and "failed (" in line]
    assert crash and "NotADirectoryError" in crash[0], output[-6000:]
    records = _records(workdir)
    assert {r["rule"]: r["outcome"] for r in records} == {
        "breaker": "solved", "after": "solved", "held": "solved"}, records
    assert ledger.read_text().split().count("after") == 1  # it never started on the broken VM
    assert wait_until(lambda: not fake_compute.instances(), timeout=60)
