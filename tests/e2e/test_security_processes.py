"""Security properties of issue 6 (docs/security.md), each checked on the real thing:

- nothing of ours listens: the socket tables of the coordinator, every worker and every job
  session, sampled during a local run and an emulated GCE run, hold no LISTEN TCP socket and no
  bound UDP socket;
- write access to the bucket cannot make a worker run a command: a forged (wrong key), replayed
  (older seq), oversized or pickled inbox is ignored by a real worker, and a command it names
  never runs;
- a worker's key appears in no log, no run directory, no worker's disk, no bucket object and
  no job's environment; on GCE nothing secret is in instance metadata;
  a CWL secret appears in no bucket object and no log, yet the job gets it, and a failing
  job that prints it reports it blanked out;
- the startup script quotes every rendered value.

What the coordinator does with forged statuses and results, forged output manifests and
replaced staged inputs, and the package's source free of shell strings and unpickling, in
process: tests/unit/test_security.py.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import pickle
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from expo_executor.protocol import messages
from expo_executor.engines.gce import startup
from expo_executor.protocol.bucket import LocalBucket
from expo_executor.emulator.gcs import EmulatorProcess
from expo_executor.worker.agent import Worker
from expo_executor.protocol.keys import WORKER_ATTRIBUTE, WORKER_KEY_ENV, inbox_key, result_key

from tests.emulated_gce import emulated_args, emulated_env, fake_compute  # noqa: F401
from tests.helpers import SNAKEMAKE, processes_under, running_worker, wait_until

EXPOCLOUD_CWL = str(Path(sys.executable).parent / "expocloud-cwl")
KEY = b"s" * 32

SNAKEFILE = """
rule all:
    input: expand("out/{n}.txt", n=[1, 2, 3])

rule work:
    output: "out/{n}.txt"
    threads: 1
    shell: "sleep 3; echo {wildcards.n} > {output}"
"""


# -- socket tables -----------------------------------------------------------------------------
def _net_table() -> dict[int, tuple[str, str, str]]:
    """Socket inode -> (protocol, local address, TCP state) for this network namespace."""
    table = {}
    for proto in ("tcp", "tcp6", "udp", "udp6"):
        try:
            lines = Path(f"/proc/net/{proto}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            table[int(cols[9])] = (proto, cols[1], cols[3])
    return table


def _socket_inodes(pid: int) -> set[int]:
    inodes = set()
    try:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(int(target[8:-1]))
    except OSError:
        pass
    return inodes


def _listeners(pid: int) -> list[str]:
    """The LISTEN TCP sockets and bound UDP sockets a process holds."""
    table = _net_table()
    found = []
    for inode in _socket_inodes(pid):
        if inode not in table:
            continue  # a Unix or netlink socket: no port
        proto, local, state = table[inode]
        port = int(local.rsplit(":", 1)[1], 16)
        if (proto.startswith("tcp") and state == "0A") or (proto.startswith("udp") and port):
            found.append(f"{proto} {local} state {state}")
    return found


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def _descendants(roots: set[int]) -> set[int]:
    tree, found, todo = _children(), set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(tree.get(pid, []))
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


class SocketWatch:
    """Samples the run's processes while it runs: the coordinator and its descendants, every
    worker (``expo_executor.worker.agent``: children of the fake Compute on the emulated path) and
    their job sessions. Test infrastructure (this process: the fake Compute and metadata
    servers; the GCS emulator) is excluded by pid."""

    def __init__(self, coordinator_pid: int, root: Path, exclude: set[int]) -> None:
        self.coordinator_pid = coordinator_pid
        self.root = root
        self.exclude = exclude | {os.getpid()}
        self.seen: dict[int, str] = {}
        self.problems: list[str] = []
        self.run_keys: set[str] = set()  # worker keys seen in a process's environment
        self.job_envs_with_key: list[int] = []
        self.run_key: bytes | None = None  # the run's, while its coordinator keeps it

    def sample(self) -> None:
        for path in self.root.glob(".expocloud/runs/*/run.key"):
            try:
                self.run_key = bytes.fromhex(path.read_text())
            except (OSError, ValueError):
                pass
        workers = {pid for pid, _ in processes_under(self.root)
                   if "expo_executor.worker.agent" in _cmdline(pid)}
        workers |= {pid for pid in _descendants({os.getpid()})
                    if "expo_executor.worker.agent" in _cmdline(pid)}
        worker_tree = _descendants(workers)
        pids = (_descendants({self.coordinator_pid}) | worker_tree
                | {pid for pid, _ in processes_under(self.root)}) - self.exclude
        for pid in pids:
            kind = ("coordinator" if pid == self.coordinator_pid else
                    "worker" if pid in workers else
                    "job" if pid in worker_tree else "other")
            # a process caught between fork and exec still shows its parent's command line:
            # a later sample that knows what it became wins over "other"
            if self.seen.get(pid, "other") == "other":
                self.seen[pid] = kind
            for problem in _listeners(pid):
                self.problems.append(f"{kind} {pid} ({_cmdline(pid)[:80]}): {problem}")
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            for item in environ:
                if item.startswith(WORKER_KEY_ENV.encode() + b"="):
                    if kind == "job":
                        self.job_envs_with_key.append(pid)
                    self.run_keys.add(item.split(b"=", 1)[1].decode())

    def kinds(self) -> set[str]:
        return set(self.seen.values())


def _watch_run(argv: list[str], cwd: Path, env: dict | None, exclude: set[int],
               timeout: float) -> tuple[subprocess.CompletedProcess, SocketWatch]:
    with open(cwd / "run.out", "w") as out:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        watch = SocketWatch(proc.pid, cwd, exclude)
        deadline = time.monotonic() + timeout
        while proc.poll() is None and time.monotonic() < deadline:
            watch.sample()
            time.sleep(0.1)
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    text = (cwd / "run.out").read_text()
    return subprocess.CompletedProcess(argv, proc.returncode, text, ""), watch


# -- secrets in files and objects ----------------------------------------------------------------
def _files(root: Path) -> Iterator[Path]:
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            yield path


def _holding(needles: list[bytes], root: Path, skip: tuple[str, ...] = ()) -> list[str]:
    return [str(path) for path in _files(root)
            if not any(part in skip for part in path.parts)
            and any(n in path.read_bytes() for n in needles)]


def _key_needles(hex_key: str) -> list[bytes]:
    raw = bytes.fromhex(hex_key)
    return [hex_key.encode(), hex_key.upper().encode(), raw]


def test_local_run_listens_on_no_port_and_leaks_no_worker_key(tmp_path: Path) -> None:
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    result, watch = _watch_run([SNAKEMAKE, "--executor", "expocloud", "-j", "3",
                                "--expocloud-run-id", "sec"], tmp_path, None, set(), 300)
    assert result.returncode == 0, result.stdout[-3000:]
    assert {"coordinator", "worker", "job"} <= watch.kinds(), watch.seen
    assert watch.problems == [], watch.problems
    # issue 30: no process shows a worker's key in /proc/<pid>/environ (the local engine
    # hands it over a pipe), let alone a job
    assert watch.run_keys == set() and watch.job_envs_with_key == []
    assert watch.run_key is not None, "the run's key was never seen"
    from expo_executor.protocol.worker_keys import worker_key

    vms = tmp_path / ".expocloud" / "runs" / "sec" / "vms"
    keys = [worker_key(watch.run_key, vm.name).hex() for vm in vms.iterdir()]
    assert keys, "no worker ran"
    needles = [n for key in keys for n in _key_needles(key)]
    assert (tmp_path / ".expocloud" / "runs" / "sec" / "bucket").is_dir()
    assert _holding(needles, tmp_path) == []  # logs, run dir, bucket, scratch


def _bucket_objects(endpoint: str, bucket: str) -> dict[str, bytes]:
    from expo_executor.protocol.gcs_bucket import GcsBucket

    gcs = GcsBucket(f"gs://{bucket}", endpoint=endpoint)
    found = {}
    for key in gcs.list(""):
        blob = gcs.read(key)
        if blob is not None:
            found[key] = blob.data
    return found


def test_emulated_gce_run_listens_on_no_port_and_puts_no_key_in_metadata(
        tmp_path: Path, fake_compute) -> None:  # noqa: F811
    emulator = EmulatorProcess()
    try:
        (tmp_path / "Snakefile").write_text(SNAKEFILE)
        args = emulated_args(fake_compute, emulator.endpoint)
        bucket = args[args.index("--default-storage-prefix") + 1].split("/")[2]
        # the bucket is kept, to see how the workers got their keys
        result, watch = _watch_run([SNAKEMAKE, *args, "--expocloud-run-id", "sec",
                                    "--expocloud-keep-bucket"], tmp_path,
                                   emulated_env(emulator.endpoint), {emulator.proc.pid}, 600)
        assert result.returncode == 0, result.stdout[-3000:]
        objects = _bucket_objects(emulator.endpoint, bucket)
    finally:
        emulator.stop()
    assert {"coordinator", "worker", "job"} <= watch.kinds(), watch.seen
    assert watch.problems == [], watch.problems
    inserts = [r for r in fake_compute.requests if r["op"] in ("insert", "bulkInsert")]
    items = [i for r in inserts for i in
             (r["json"].get("metadata") or r["json"].get("instanceProperties", {})
              .get("metadata", {})).get("items", [])]
    # anyone with compute.instances.get reads metadata: the settings, never a key
    assert items and {i["key"] for i in items} == {"startup-script", WORKER_ATTRIBUTE,
                                                   "expocloud-halt"}, items
    settings = [json.loads(i["value"]) for i in items if i["key"] == WORKER_ATTRIBUTE]
    assert [name for config in settings for name in config if "key" in name] \
        == ["grant_verify_key"] * len(settings), settings  # a public key: checks, cannot sign
    assert all(len(bytes.fromhex(config["grant_verify_key"])) == 32 for config in settings)
    assert watch.run_keys == set(), "a worker on a VM had a key in its environment"
    # each worker asked for its key through the bucket, and got it only encrypted to itself
    assert any(name.endswith("/key-request.json") for name in objects), sorted(objects)
    assert any(name.endswith("/key.json") for name in objects), sorted(objects)


# -- inboxes a worker must ignore ---------------------------------------------------------------
def _job(marker: Path) -> dict:
    return {"argv": ["/bin/sh", "-c", f"touch '{marker}'"], "cwd": None, "env": {},
            "deadline_s": None, "cpus": 1}


def _inbox(seq: int, jobs: dict) -> dict:
    return {"seq": seq, "jobs": jobs, "cancel": []}


def _signed_oversized(seq: int, jobs: dict, key: bytes) -> bytes:
    """A correctly signed inbox just over the size bound (encode() itself refuses to make it)."""
    body = _inbox(seq, jobs)
    first = next(iter(body["jobs"].values()))
    first["env"] = {"PAD": "x" * messages.MAX_BYTES}
    mac = hmac.new(key, messages._canonical(body), hashlib.sha256).hexdigest()
    data = json.dumps({"v": messages.VERSION, "kind": "inbox", "body": body, "mac": mac}).encode()
    assert len(data) > messages.MAX_BYTES
    return data


class _Exploit:
    """Unpickling this runs a command: a worker that unpickled its inbox would be owned."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, (f"touch '{self.marker}'",))


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[tuple[Worker, LocalBucket]]:
    with running_worker(tmp_path, KEY) as (agent, bucket):
        yield agent, bucket


def _deliver(agent: Worker, bucket: LocalBucket, data: bytes) -> None:
    """Write an inbox and wait (bounded) until the worker has read exactly this object."""
    generation = bucket.write(inbox_key("w1"), data)
    assert wait_until(lambda: agent.inbox_generation == generation, timeout=10), \
        "the worker never read the inbox"


def test_bucket_write_access_alone_cannot_make_a_worker_run_a_command(
        tmp_path: Path, worker: tuple[Worker, LocalBucket]) -> None:
    agent, bucket = worker
    markers = {name: tmp_path / f"{name}.ran" for name in
               ("forged", "unsigned", "genuine", "replayed", "oversized", "copied", "pickled",
                "later")}
    _deliver(agent, bucket, messages.encode(
        "inbox", _inbox(1, {"forged": _job(markers["forged"])}), b"w" * 32))
    _deliver(agent, bucket, messages.encode(
        "inbox", _inbox(2, {"unsigned": _job(markers["unsigned"])})))
    # a genuine assignment, then a replay of an older genuine one (lower seq)
    _deliver(agent, bucket, messages.encode(
        "inbox", _inbox(5, {"genuine": _job(markers["genuine"])}), KEY))
    assert wait_until(markers["genuine"].exists, timeout=10), "the genuine job did not run"
    _deliver(agent, bucket, messages.encode(
        "inbox", _inbox(3, {"replayed": _job(markers["replayed"])}), KEY))
    _deliver(agent, bucket, _signed_oversized(9, {"oversized": _job(markers["oversized"])}, KEY))
    # another worker's genuine inbox (higher seq), copied into this worker's inbox
    _deliver(agent, bucket, messages.encode(
        "inbox", {**_inbox(8, {"copied": _job(markers["copied"])}), "to": "w2"}, KEY))
    _deliver(agent, bucket, pickle.dumps(_Exploit(markers["pickled"])))
    _deliver(agent, bucket, b"\x00\xff not json at all")
    # the worker is alive and obeys the next genuine assignment: it would have seen the others
    _deliver(agent, bucket, messages.encode(
        "inbox", {**_inbox(6, {"later": _job(markers["later"])}), "to": "w1"}, KEY))
    assert wait_until(markers["later"].exists, timeout=10), "the worker stopped obeying"
    assert wait_until(lambda: not agent.running, timeout=10)
    ran = sorted(name for name, path in markers.items() if path.exists())
    assert ran == ["genuine", "later"], ran
    assert agent.seq == 6


def test_a_local_worker_gets_its_key_through_a_pipe_never_its_environment(tmp_path: Path) -> None:
    """Issue 30: the local engine handed each worker its key in an environment variable; the
    worker unset it, but ``/proc/<pid>/environ`` shows a process's environment as it started,
    for its whole life. The key now comes through an inherited pipe, read once."""
    from expo_executor.core.scheduler import Pool
    from expo_executor.engines.local import LocalEngine, LocalEngineConfig, live_workers
    from expo_executor.protocol.keys import status_key
    from expo_executor.protocol.records import WorkerStatus
    from expo_executor.protocol.worker_keys import worker_key

    bucket = LocalBucket(tmp_path / "bucket")
    engine = LocalEngine(LocalEngineConfig(bucket.root, tmp_path / "vms", KEY, poll=0.05,
                                           grace=30, heartbeat=1))
    key = worker_key(KEY, "w-1")
    engine.create(["w-1"], Pool.SPOT, 1)
    try:
        def signed_status() -> bool:  # the worker has its key: it signs with it
            blob = bucket.read(status_key("w-1"))
            return blob is not None and WorkerStatus.decode(blob.data, key).worker == "w-1"

        assert wait_until(signed_status, timeout=30), (tmp_path / "vms" / "w-1" /
                                                         "worker.log").read_text()
        pid = live_workers(tmp_path / "vms")["w-1"]
        for name in ("environ", "cmdline"):
            shown = Path(f"/proc/{pid}/{name}").read_bytes()
            assert not any(needle in shown for needle in _key_needles(key.hex())), name
    finally:
        engine.close()
    assert not processes_under(tmp_path)


def test_a_real_worker_process_ignores_an_inbox_signed_with_another_key(tmp_path: Path) -> None:
    bucket = LocalBucket(tmp_path / "bucket")
    marker, probe = tmp_path / "forged.ran", tmp_path / "probe.ran"
    env = {**os.environ, WORKER_KEY_ENV: KEY.hex()}
    with open(tmp_path / "worker.err", "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "expo_executor.worker.agent", "--bucket",
                                 str(bucket.root), "--worker-id", "w1", "--slots", "1",
                                 "--scratch", str(tmp_path / "scratch"), "--poll", "0.05"],
                                env=env, stdout=err, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            bucket.write(inbox_key("w1"), messages.encode(
                "inbox", _inbox(1, {"forged": _job(marker)}), b"w" * 32))
            assert wait_until(lambda: b"bad signature" in (tmp_path / "worker.err").read_bytes(),
                              timeout=20), (tmp_path / "worker.err").read_text()
            bucket.write(inbox_key("w1"), messages.encode(
                "inbox", _inbox(2, {"probe": _job(probe)}), KEY))
            assert wait_until(probe.exists, timeout=20), "the worker ignored a genuine inbox"
            assert not marker.exists(), "a forged assignment ran"
        finally:
            proc.terminate()
            proc.wait(timeout=20)
    assert not processes_under(tmp_path)


def test_a_sealed_part_opens_only_for_its_run_and_job(
        tmp_path: Path, worker: tuple[Worker, LocalBucket]) -> None:
    agent, bucket = worker
    out = tmp_path / "secret.out"
    argv = ["/bin/sh", "-c", 'printf %s "$TOKEN" > "$1"', "x", str(out)]
    sealed = messages.seal(argv, {"TOKEN": "hunter2"}, KEY, "s1")
    job = {**_job(tmp_path / "unused"), "argv": messages.SEALED_ARGV, "sealed": sealed}
    moved = {**job, "sealed": messages.seal(argv, {"TOKEN": "x"}, b"o" * 32, "s2")}
    data = messages.encode("inbox", _inbox(1, {"s1": job, "s2": moved}), KEY)
    assert b"hunter2" not in data
    _deliver(agent, bucket, data)
    assert wait_until(lambda: bucket.read(result_key("s2", "w1")) is not None, timeout=10)
    failed = messages.decode("result", bucket.read(result_key("s2", "w1")).data)
    assert failed["outcome"] == "failed" and "does not open" in failed["reason"]
    assert wait_until(lambda: out.exists() and out.read_text() == "hunter2", timeout=10), \
        "the sealed job did not get its environment"


def test_a_sealed_job_that_prints_its_secret_reports_it_blanked_out(
        tmp_path: Path, worker: tuple[Worker, LocalBucket]) -> None:
    """A failing command that echoes what it was given: its log tail and reason travel through
    the bucket, so the secrets the runner named are blanked out before the result is written."""
    argv = ["/bin/sh", "-c", 'echo "token is $TOKEN, arg is $1" >&2; exit 3', "x", "s3cr3t-arg"]
    sealed = messages.seal(argv, {"TOKEN": "hunter2"}, KEY, "s1",
                                     ["hunter2", "s3cr3t-arg"])
    job = {**_job(tmp_path / "unused"), "argv": messages.SEALED_ARGV, "sealed": sealed}
    _deliver(agent := worker[0], bucket := worker[1],
             messages.encode("inbox", _inbox(1, {"s1": job}), KEY))
    assert wait_until(lambda: bucket.read(result_key("s1", "w1")) is not None, timeout=20)
    data = bucket.read(result_key("s1", "w1")).data
    result = messages.decode("result", data, KEY)
    assert result["outcome"] == "failed" and result["returncode"] == 3
    assert "token is ********, arg is ********" in result["log_tail"], result
    assert b"hunter2" not in data and b"s3cr3t-arg" not in data
    assert agent.specs == {}  # its opened spec (and secrets) forgotten once reported


# -- CWL secrets ----------------------------------------------------------------------------------
SECRET_TOOL = """cwlVersion: v1.2
class: CommandLineTool
$namespaces: {cwltool: "http://commonwl.org/cwltool#"}
hints:
  cwltool:Secrets:
    secrets: [password]
requirements:
  EnvVarRequirement:
    envDef: {PASSWORD_ENV: $(inputs.password)}
  InlineJavascriptRequirement: {}
inputs:
  password: {type: string, inputBinding: {position: 1}}
baseCommand: [sh, -c, 'sleep 2; printf "%s %s" "$1" "$PASSWORD_ENV" | sha256sum | cut -c1-64 > digest',
              x]
outputs:
  digest: {type: File, outputBinding: {glob: digest}}
"""


def test_a_cwl_secret_travels_sealed_and_reaches_the_job(tmp_path: Path) -> None:
    """Bucket staging on the local engine: the bucket is a directory, watched while the run
    goes (inboxes are deleted with their workers), and read once more at the end."""
    secret = "pw-" + os.urandom(8).hex()
    (tmp_path / "tool.cwl").write_text(SECRET_TOOL)
    (tmp_path / "job.yml").write_text(f"password: {secret}\n")
    argv = [EXPOCLOUD_CWL, "--outdir", str(tmp_path / "out"), "--expocloud-state-dir",
            str(tmp_path / "state"), "--expocloud-staging", "bucket", "tool.cwl", "job.yml"]
    leaks: set[str] = set()
    sealed_inboxes = 0
    with open(tmp_path / "run.out", "w") as out, open(tmp_path / "run.err", "w") as err:
        proc = subprocess.Popen(argv, cwd=tmp_path, stdout=out, stderr=err)
        deadline = time.monotonic() + 300
        while proc.poll() is None and time.monotonic() < deadline:
            for path in (tmp_path / "state").glob("runs/*/bucket/**/*"):
                try:
                    data = path.read_bytes() if path.is_file() else b""
                except OSError:
                    continue
                if secret.encode() in data:
                    leaks.add(str(path))
                if path.name == "inbox.json" and b'"sealed"' in data:
                    sealed_inboxes += 1
            time.sleep(0.05)
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    output = (tmp_path / "run.out").read_text() + (tmp_path / "run.err").read_text()
    assert proc.returncode == 0, output[-3000:]
    digest = (tmp_path / "out" / "digest").read_text().strip()
    assert digest == hashlib.sha256(f"{secret} {secret}".encode()).hexdigest(), \
        "the job did not get the secret"
    assert leaks == set(), "a secret in the bucket"
    assert sealed_inboxes, "no sealed assignment was seen in the bucket"
    assert secret not in output
    run_dir = next((tmp_path / "state" / "runs").glob("*"))
    needles = [secret.encode()]
    assert _holding(needles, run_dir / "bucket") == [], "a secret in the bucket"
    # every log and record of the run (the workers' own disks hold the job's spec: not a log)
    assert _holding(needles, run_dir, skip=("bucket", "vms")) == []
    logs = list((run_dir / "vms").rglob("*.log"))
    assert logs and [str(p) for p in logs if secret.encode() in p.read_bytes()] == []


def test_a_cwl_job_that_prints_its_secret_and_fails_shows_it_blanked_out(
        tmp_path: Path) -> None:
    """cwltool prints a failed job's output; ours comes from the worker's report, whose log
    tail the worker blanked out with the secrets the runner sealed with the job."""
    secret = "pw-" + os.urandom(8).hex()
    (tmp_path / "tool.cwl").write_text(SECRET_TOOL.replace(
        "'sleep 2; printf \"%s %s\" \"$1\" \"$PASSWORD_ENV\" | sha256sum | cut -c1-64 > digest'",
        "'echo \"given $1 and $PASSWORD_ENV\"; exit 4'"))
    assert "exit 4" in (tmp_path / "tool.cwl").read_text()
    (tmp_path / "job.yml").write_text(f"password: {secret}\n")
    result = subprocess.run([EXPOCLOUD_CWL, "--outdir", str(tmp_path / "out"),
                             "--expocloud-state-dir", str(tmp_path / "state"), "tool.cwl",
                             "job.yml"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-3000:]
    assert "exited with status: 4" in output and "given ******** and ********" in output, \
        output[-3000:]
    assert secret not in output
    assert _holding([secret.encode()], tmp_path / "state", skip=("vms",)) == []


# -- the startup script quotes what it renders -------------------------------------------------


HOSTILE = ["$(touch /tmp/expocloud-pwned)", "';touch /tmp/expocloud-pwned;'",
           "`touch /tmp/expocloud-pwned`", 'a"b\'c\\d $HOME ${PATH} \n!x*?[a]']


@pytest.mark.parametrize("hostile", HOSTILE)
def test_the_startup_script_quotes_every_rendered_value(
        tmp_path: Path, hostile: str, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = Path("/tmp/expocloud-pwned")
    marker.unlink(missing_ok=True)
    for name in ("VENV", "SCRATCH", "HOME_DIR", "LOG", "LOCK", "SYSTEMD_DIR"):
        monkeypatch.setattr(startup, name, f"/x/{name}{hostile}")
    pip = startup.WorkerSoftware(
        mode="pip", pins=("pyyaml==6.0",), wheel_bucket=f"bkt{hostile}",
        wheel_object=f"runs/{hostile}/expocloud-0.1.0-py3-none-any.whl",
        wheel_sha256="a" * 64, index_url=f"https://pypi.example/{hostile}",
        storage_host=f"https://storage.example/{hostile}", package_version=f"0.1{hostile}",
        run_bucket=f"bkt{hostile}", run_prefix=f"runs/{hostile}/")
    image = startup.WorkerSoftware(mode="image", pins=(), wheel_object=None, wheel_sha256=None,
                                   find_links=f"/wheels/{hostile}")
    variables = {"INDEX_URL": pip.index_url, "STORAGE_HOST": pip.storage_host.rstrip("/"),
                 "PACKAGE_VERSION": pip.package_version,
                 "WHEEL_BUCKET": startup.quote(pip.wheel_bucket, safe=""),
                 "WHEEL_OBJECT": startup.quote(pip.wheel_object, safe=""),
                 "WHEEL_FILE": pip.wheel_file,
                 "BOOT_LOG_BUCKET": startup.quote(pip.run_bucket, safe=""),
                 "BOOT_LOG_PREFIX": startup.quote(f"{pip.run_prefix}boot/", safe=""),
                 **{n: getattr(startup, n) for n in
                    ("VENV", "SCRATCH", "HOME_DIR", "LOG", "LOCK", "SYSTEMD_DIR")}}
    for software, expect in ((pip, variables), (image, {"FIND_LINKS": image.find_links})):
        script = startup.render(software)
        check = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True)
        assert check.returncode == 0, check.stderr
        # every rendered assignment (they precede the script's own), then what bash holds
        assert "\nreadonly METADATA=" in script
        assignments = script.split("\nreadonly METADATA=", 1)[0]
        names = sorted(expect)
        shown = subprocess.run(["bash", "-c", assignments + "\nprintf '%s\\0' "
                                + " ".join(f'"${n}"' for n in names)],
                               capture_output=True, env={"PATH": os.environ["PATH"]})
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.decode().split("\0")[:-1] == [expect[n] for n in names]
    assert not marker.exists(), "a rendered value ran as a command"


# -- a Snakemake job's environment ---------------------------------------------------------------
ENVVARS_SNAKEFILE = """
envvars: "EXPO_TEST_SECRET"

rule all:
    input: expand("out/{n}.txt", n=[1, 2])

rule work:
    output: "out/{n}.txt"
    shell: "sleep 2; printf %s \\"$EXPO_TEST_SECRET\\" | sha256sum | cut -c1-64 > {output}"
"""


def test_a_snakemake_envvars_secret_travels_sealed_and_reaches_the_job(tmp_path: Path) -> None:
    """Issue 16 C6: the Snakefile's envvars: (and storage plugins' secrets) went into the inbox
    objects in the clear. The bucket (a directory on the local engine) is watched while the run
    goes, since inboxes are deleted with their workers."""
    secret = "sm-" + os.urandom(8).hex()
    (tmp_path / "Snakefile").write_text(ENVVARS_SNAKEFILE)
    env = {**os.environ, "EXPO_TEST_SECRET": secret}
    leaks: set[str] = set()
    inboxes = 0
    with open(tmp_path / "run.out", "w") as out:
        proc = subprocess.Popen([SNAKEMAKE, "--executor", "expocloud", "-j", "2",
                                 "--expocloud-run-id", "envvars"], cwd=tmp_path, env=env,
                                stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 300
        while proc.poll() is None and time.monotonic() < deadline:
            for path in (tmp_path / ".expocloud").glob("runs/*/bucket/**/*"):
                try:
                    data = path.read_bytes() if path.is_file() else b""
                except OSError:
                    continue
                if secret.encode() in data:
                    leaks.add(str(path))
                inboxes += path.name == "inbox.json" and b'"sealed"' in data
            time.sleep(0.05)
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    output = (tmp_path / "run.out").read_text()
    assert proc.returncode == 0, output[-3000:]
    digest = hashlib.sha256(secret.encode()).hexdigest()
    assert (tmp_path / "out" / "1.txt").read_text().strip() == digest, "the job lacked it"
    assert inboxes, "no sealed assignment was seen in the bucket"
    assert leaks == set(), "an envvars: secret in the bucket"
    assert _holding([secret.encode()], tmp_path / ".expocloud" / "runs" / "envvars" /
                    "bucket") == []


# -- the GCE key channel: a metadata and bucket reader cannot forge an assignment -------------
def _key_service(bucket: LocalBucket, run_key: bytes, url: str, vm_name: str,
                 issuer, lines: list[str]):  # type: ignore[no-untyped-def]
    """The coordinator's side of the key channel, as its round runs it."""
    from expo_executor.coordinator.channel import Channel
    from expo_executor.coordinator.vms import Vm
    from expo_executor.core.scheduler import Pool
    from expo_executor.engines.gce.key_channel import KeyGrantor

    certs = "https://www.googleapis.com/oauth2/v1/certs"
    grantor = KeyGrantor(run_key, "proj", url, lambda name: "europe-west1-b", certs,
                         issuer.transport(certs))
    channel = Channel(bucket, run_key, lines.append, grantor)
    vm = Vm(vm_name, time.time(), Pool.SPOT)
    return lambda: channel.statuses([vm])


def test_a_metadata_and_bucket_reader_cannot_forge_an_assignment_a_gce_worker_accepts(
        tmp_path: Path) -> None:
    """Issue 16: the run key was an instance metadata attribute, which roles/viewer and
    roles/compute.viewer read. Now a real worker on a (fake) VM asks for its key with its
    identity token. The attacker reads every metadata attribute and every bucket object, and
    may write to the bucket: it answers the key request first with a key of its own, asks for
    the worker's key with the copied token and a key pair of its own, and signs assignments
    with everything it found. The worker runs none of them; the genuine coordinator's still
    run."""
    from expo_executor.emulator.identity import IdentityIssuer
    from expo_executor.emulator.metadata import FakeMetadata
    from expo_executor.protocol import worker_keys
    from expo_executor.protocol.keys import key_grant_key, key_request_key, status_key

    run_key, name = os.urandom(32), "expo-r1-w1"
    bucket = LocalBucket(tmp_path / "bucket")
    url = str(bucket.root)
    issuer = IdentityIssuer()
    config = {"v": 1, "bucket": url, "slots": 1, "poll": 0.05, "grace": 60, "heartbeat": 5,
              "grant_verify_key": worker_keys.grant_verify_key(run_key).hex(),
              "self_delete": False}
    meta = FakeMetadata(project="proj", zone="europe-west1-b", name=name, identity=issuer,
                        attributes={WORKER_ATTRIBUTE: json.dumps(config)}).start()
    lines: list[str] = []
    coordinator_round = _key_service(bucket, run_key, url, name, issuer, lines)
    markers = {m: tmp_path / f"{m}.ran" for m in ("forged", "genuine")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "expo_executor.worker.agent", "--from-metadata", "--scratch",
         str(tmp_path / "scratch")], env={**os.environ, "GCE_METADATA_HOST": meta.host},
        stdout=open(tmp_path / "worker.log", "wb"), stderr=subprocess.STDOUT,
        start_new_session=True)
    try:
        assert wait_until(lambda: bucket.read(key_request_key(name)) is not None, timeout=30), \
            (tmp_path / "worker.log").read_text()
        # what the attacker reads: every metadata attribute and the worker's key request
        seen = [value.encode() for value in meta.attributes.values()]
        seen += [bytes.fromhex(value) for value in meta.attributes.values()
                 if re.fullmatch(r"(?:[0-9a-f]{2})+", value)]  # how the run key was stored
        request = json.loads(bucket.read(key_request_key(name)).data)
        public = base64.b64decode(request["public"])
        # 1. answer first, with a key of its own, encrypted to the worker's public key
        mine = os.urandom(32)
        forged_grant = worker_keys.grant(mine, name, public, os.urandom(32))
        bucket.write(key_grant_key(name), forged_grant)
        # 2. ask the coordinator for the worker's key with the copied token and its own pair
        _, own_public = worker_keys.new_key_pair()
        bucket.write(key_request_key(name), json.dumps(
            {**request, "public": base64.b64encode(own_public).decode()}).encode())
        coordinator_round()
        assert [line for line in lines if "refusing the key request" in line
                and "does not verify" in line], lines
        assert bucket.read(key_grant_key(name)).data == forged_grant  # no key for it
        # the worker's own request again (it wrote it once): the coordinator answers it
        bucket.write(key_request_key(name), json.dumps(request).encode())
        assert wait_until(lambda: (coordinator_round(), bucket.read(status_key(name)))[1]
                          is not None, timeout=30), (tmp_path / "worker.log").read_text()
        # 3. assignments signed with whatever the attacker has: none runs
        job = {"f": _job(markers["forged"])}
        keys = [mine, request["token"].encode(), public, *seen,
                bytes.fromhex(config["grant_verify_key"])]
        for seq, key in enumerate(keys, start=10):
            bucket.write(inbox_key(name), messages.encode(
                "inbox", {**_inbox(seq, job), "to": name}, key))
            assert wait_until(lambda: (tmp_path / "worker.log").read_text()
                              .count("bad signature") == seq - 9, timeout=20), \
                (tmp_path / "worker.log").read_text()
        genuine = worker_keys.worker_key(run_key, name)
        from expo_executor.protocol.records import Inbox, JobSpec
        bucket.write(inbox_key(name), Inbox(99, name, {"g": JobSpec(
            ["/bin/sh", "-c", f"touch '{markers['genuine']}'"], None, {}, None, 1)})
            .encode(genuine))
        assert wait_until(markers["genuine"].exists, timeout=20), \
            (tmp_path / "worker.log").read_text()
        assert not markers["forged"].exists(), "a forged assignment ran"
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        meta.stop()
