"""A direct job on the GCE path, on its worker (worker/direct_staged.py): the workflow's sources
unpacked and checked, inputs fetched to their local copies, old outputs removed, the command
run in the job's root with its environment, outputs stored only when it succeeded and left them
all, logs always. Storage is a dictionary of objects standing for GCS at its HTTP boundary; the
command is a Python function standing for the shell line (the unit tier starts no process: the
real line runs in tests/e2e/test_direct_jobs_gce.py)."""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

import pytest

from expo_executor.core.records import AttemptEnd
from expo_executor.worker import direct_staged

SOURCES = "gs://b/wf/snakemake-workflow-sources.tar.xz"


class Memory(direct_staged.Objects):
    """Objects by URL in a dictionary; what was deleted is remembered."""

    def __init__(self, objects: dict[str, bytes]) -> None:
        super().__init__()
        self.objects, self.deleted = dict(objects), []

    def download_to(self, url: str, path: Path) -> int:
        if url not in self.objects:
            raise FileNotFoundError(f"{url} is missing from storage")
        path.write_bytes(self.objects[url])
        return path.stat().st_size

    def upload_from(self, url: str, path: Path) -> int:
        self.objects[url] = path.read_bytes()
        return len(self.objects[url])

    def delete(self, url: str) -> None:
        self.deleted.append(url)
        self.objects.pop(url, None)

    def under(self, url: str) -> list[str]:
        return sorted(name for name in self.objects if name.startswith(url + "/"))


def _archive(files: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:xz") as tar:
        for name, text in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    return buffer.getvalue()


LOCAL = ".snakemake/storage/gcs/b/wf"


def _spec(archive: bytes) -> dict:
    stage = {"direct": True, "host_env": True,
             "fetch": [[f"{LOCAL}/in.txt", "gs://b/wf/in.txt"]],
             "outputs": [[f"{LOCAL}/out/a.txt", "gs://b/wf/out/a.txt"]],
             "logs": [[f"{LOCAL}/logs/a.log", "gs://b/wf/logs/a.log"]],
             "sources": [SOURCES, hashlib.sha256(archive).hexdigest()]}
    return {"argv": ["/bin/sh", "-c", "the line"], "env": {"GREETING": "hi"}, "stage": stage}


def _line(code: int, output: bool = True, log: bool = True, ran: list | None = None):
    """A command standing for the shell line: reads the script and the input as the line
    would, in its working directory, and writes the output and log it is told to."""
    def command(argv: list[str], cwd: str, env: dict[str, str]):
        root = Path(cwd)
        if ran is not None:
            ran.append(argv)
        said = (root / "scripts/say.sh").read_text().split()[0]
        text = f"{said} {env['GREETING']} {(root / LOCAL / 'in.txt').read_text()}"
        if output:
            (root / LOCAL / "out/a.txt").write_text(text)
        if log:
            (root / LOCAL / "logs/a.log").write_text("logged\n")
        return AttemptEnd.SOLVED, code, None
    return command


@pytest.fixture
def storage() -> tuple[Memory, bytes]:
    archive = _archive({"scripts/say.sh": 'echo "$GREETING $1"\n'})
    return Memory({SOURCES: archive, "gs://b/wf/in.txt": b"input\n",
                   "gs://b/wf/out/a.txt": b"stale\n"}), archive


def test_a_job_that_succeeds_stores_its_outputs_and_logs(tmp_path: Path, storage) -> None:
    objects, archive = storage
    outcome = direct_staged.run(_spec(archive), tmp_path / "root", _line(0), objects)
    assert outcome == (AttemptEnd.SOLVED, 0, None)
    assert objects.objects["gs://b/wf/out/a.txt"] == b"echo hi input\n"
    assert objects.objects["gs://b/wf/logs/a.log"] == b"logged\n"
    # the old objects went first, as Job.remove_existing_output removes them
    assert objects.deleted == ["gs://b/wf/out/a.txt", "gs://b/wf/logs/a.log"]
    # no deploy directory (a job alone): the archive is kept beside the root, in the job's own
    # directory that the worker removes with it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["root", "sources"]


def test_a_vm_downloads_each_version_of_the_sources_once(tmp_path: Path, storage,
                                                          monkeypatch) -> None:
    """The jobs of a run share one version of the sources: the VM's deploy directory keeps
    it, checked at each use; a copy that no longer matches is downloaded again."""
    objects, archive = storage
    reads: list[str] = []
    download = objects.download_to

    def counted(url: str, path: Path) -> int:
        reads.append(url)
        return download(url, path)

    objects.download_to = counted  # type: ignore[method-assign]
    monkeypatch.setenv(direct_staged.DEPLOY_DIR_ENV, str(tmp_path / "deploy"))
    for job in ("j1", "j2"):
        objects.objects["gs://b/wf/in.txt"] = b"input\n"
        assert direct_staged.run(_spec(archive), tmp_path / job / "root", _line(0),
                                 objects)[0] is AttemptEnd.SOLVED
    assert reads.count(SOURCES) == 1
    cached = tmp_path / "deploy" / "sources" / f"{hashlib.sha256(archive).hexdigest()}.tar"
    assert cached.read_bytes() == archive and not list(cached.parent.glob("*.part"))
    cached.write_bytes(b"changed by a job")
    assert direct_staged.run(_spec(archive), tmp_path / "j3" / "root", _line(0),
                             objects)[0] is AttemptEnd.SOLVED
    assert reads.count(SOURCES) == 2 and cached.read_bytes() == archive


def test_a_failed_job_stores_its_logs_and_no_output(tmp_path: Path, storage) -> None:
    objects, archive = storage
    outcome = direct_staged.run(_spec(archive), tmp_path / "root", _line(3), objects)
    assert outcome == (AttemptEnd.FAILED, 3, None)  # the worker reads "exit code 3"
    assert "gs://b/wf/out/a.txt" not in objects.objects
    assert objects.objects["gs://b/wf/logs/a.log"] == b"logged\n"


def test_a_missing_output_fails_the_job_and_stores_none(tmp_path: Path, storage) -> None:
    objects, archive = storage
    outcome = direct_staged.run(_spec(archive), tmp_path / "root", _line(0, output=False),
                                objects)
    assert outcome == (AttemptEnd.FAILED, 0, f"missing output files: {LOCAL}/out/a.txt")
    assert "gs://b/wf/out/a.txt" not in objects.objects
    assert objects.objects["gs://b/wf/logs/a.log"] == b"logged\n"


def test_an_output_storage_refuses_fails_the_job_naming_its_object(tmp_path: Path,
                                                                  storage) -> None:
    """As the plugin's ``managed_store`` says it (a 403, say): the object, then the error."""
    objects, archive = storage

    class Forbidden(Exception):  # google.api_core's, for a 403
        pass

    def refused(url: str, path: Path) -> int:
        raise Forbidden("403 POST .../upload")

    objects.upload_from = refused  # type: ignore[method-assign]
    outcome, code, reason = direct_staged.run(_spec(archive), tmp_path / "root", _line(0),
                                              objects)
    assert (outcome, code) == (AttemptEnd.FAILED, 0)
    assert reason == ("storing outputs failed: Failed to store output in storage "
                      "gs://b/wf/out/a.txt: Forbidden: 403 POST .../upload")


def test_sources_that_do_not_match_their_checksum_fail_before_the_command(
        tmp_path: Path, storage) -> None:
    objects, archive = storage
    spec, ran = _spec(archive), []
    spec["stage"]["sources"][1] = "0" * 64
    outcome, code, reason = direct_staged.run(spec, tmp_path / "root", _line(0, ran=ran),
                                              objects)
    assert (outcome, code) == (AttemptEnd.FAILED, None)
    assert "do not match their checksum" in reason and ran == []


def test_a_missing_input_fails_before_the_command(tmp_path: Path, storage) -> None:
    objects, archive = storage
    del objects.objects["gs://b/wf/in.txt"]
    ran: list = []
    outcome, code, reason = direct_staged.run(_spec(archive), tmp_path / "root",
                                              _line(0, ran=ran), objects)
    assert (outcome, code) == (AttemptEnd.FAILED, None)
    assert "gs://b/wf/in.txt is missing" in reason and ran == []


@pytest.mark.parametrize("path", ["../outside.txt", "/etc/passwd", ""])
def test_a_local_path_outside_the_jobs_root_is_refused(tmp_path: Path, storage, path) -> None:
    objects, archive = storage
    spec = _spec(archive)
    spec["stage"]["fetch"] = [[path, "gs://b/wf/in.txt"]]
    outcome, _, reason = direct_staged.run(spec, tmp_path / "root", _line(0), objects)
    assert outcome is AttemptEnd.FAILED and "unsafe staged path" in reason


def test_object_urls_name_a_bucket_and_an_object() -> None:
    objects = direct_staged.Objects()
    with pytest.raises(ValueError, match="no object name"):
        objects._at("gs://b/")
    with pytest.raises(ValueError, match="not a gs:// URL"):
        objects._at("s3://b/x")


def test_a_verdict_of_a_command_that_failed_on_its_own_reads_as_its_exit_code(
        tmp_path: Path) -> None:
    from expo_executor.worker.running_jobs import _read_verdict

    verdict = tmp_path / "job.verdict.json"
    verdict.write_text('{"outcome": "failed", "returncode": 3, "reason": null}')
    assert _read_verdict(verdict, AttemptEnd.FAILED, 3, None) == (
        AttemptEnd.FAILED, 3, "exit code 3")
    verdict.write_text('{"outcome": "failed", "returncode": 0, "reason": "missing output"}')
    assert _read_verdict(verdict, AttemptEnd.FAILED, 1, None)[2] == "missing output"


@pytest.mark.parametrize("given", [None, "explicit"])
def test_the_tmpdir_is_the_jobs_own_or_this_machines(tmp_path: Path, storage, given) -> None:
    import tempfile

    objects, archive = storage
    spec, seen = _spec(archive), {}
    path = str(tmp_path / "t") if given else None
    spec["stage"]["tmpdir"] = [path, ["TMPDIR", "TEMP"]]

    def command(argv, cwd, env):
        seen.update(env)
        return _line(0)(argv, cwd, env)

    assert direct_staged.run(spec, tmp_path / "root", command, objects)[0] is AttemptEnd.SOLVED
    expected = path or tempfile.gettempdir()
    assert seen["TMPDIR"] == seen["TEMP"] == expected and Path(expected).is_dir()


def test_an_input_that_is_a_folder_in_storage_is_fetched_whole(tmp_path: Path, storage) -> None:
    objects, archive = storage
    del objects.objects["gs://b/wf/in.txt"]
    objects.objects.update({"gs://b/wf/in.txt/a": b"A", "gs://b/wf/in.txt/sub/b": b"B"})
    spec, seen = _spec(archive), {}

    def command(argv, cwd, env):
        folder = Path(cwd) / LOCAL / "in.txt"
        seen.update({p.relative_to(folder).as_posix(): p.read_bytes()
                     for p in folder.rglob("*") if p.is_file()})
        (Path(cwd) / LOCAL / "out/a.txt").write_text("x")
        return AttemptEnd.SOLVED, 0, None

    assert direct_staged.run(spec, tmp_path / "root", command, objects)[0] is AttemptEnd.SOLVED
    assert seen == {"a": b"A", "sub/b": b"B"}
