"""A finished checkpoint's storage outputs, fetched when an input function asks for them: the
job ran on another machine, so there is no local copy to glob until Snakemake retrieves one."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from snakemake.checkpoints import Checkpoint
from snakemake.exceptions import IncompleteCheckpointException, InputOpenException

from expo_executor.worker import checkpoint_copies, command_clock

from tests.helpers import keep_job_hooks_local, storage_file


class Storage:
    """A storage object that holds the checkpoint's output (or not), and may be retrieved."""

    print_query = "gs://bucket/wf/clustering/a"

    def __init__(self, present: bool = True, retrieve: bool = True) -> None:
        self.present, self.retrieve, self.asked = present, retrieve, 0

    def exists(self) -> bool:
        self.asked += 1
        return self.present


def finished(*outputs: object):
    """What Snakemake's ``Checkpoint.get`` returns once the checkpoint has run."""
    job = SimpleNamespace(output=list(outputs))
    return lambda self, **wildcards: job


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Checkpoint, "get", Checkpoint.get)  # restored after the test
    assert checkpoint_copies.install() is None


def test_an_output_in_storage_with_no_local_copy_is_asked_for(tmp_path: Path) -> None:
    """Snakemake's job factory catches InputOpenException, retrieves the file and asks again
    (what it does for a checkpoint output's ``.open()``)."""
    wanted = storage_file(tmp_path / "clustering" / "a", Storage())
    get = checkpoint_copies.fetching(finished(wanted), InputOpenException)
    with pytest.raises(InputOpenException) as raised:
        get(None, sample="a")
    assert raised.value.iofile is wanted


def test_a_local_copy_is_used_and_storage_is_not_asked(tmp_path: Path) -> None:
    (tmp_path / "clustering" / "a").mkdir(parents=True)
    storage = Storage()
    job = checkpoint_copies.fetching(finished(storage_file(tmp_path / "clustering" / "a",
                                                            storage)), InputOpenException)
    assert job(None, sample="a").output and storage.asked == 0


@pytest.mark.parametrize("storage", [Storage(present=False), Storage(retrieve=False)],
                         ids=["missing-from-storage-too", "retrieval-turned-off"])
def test_what_plain_snakemake_would_not_fetch_is_left_as_it_is(tmp_path: Path,
                                                                storage: Storage) -> None:
    get = checkpoint_copies.fetching(finished(storage_file(tmp_path / "a", storage)),
                                     InputOpenException)
    assert get(None).output


def test_a_file_outside_storage_is_left_as_it_is(tmp_path: Path) -> None:
    plain = SimpleNamespace(is_storage=False, file=str(tmp_path / "absent"))
    get = checkpoint_copies.fetching(finished(plain), InputOpenException)
    assert get(None).output == [plain]


def test_an_unfinished_checkpoint_raises_as_before(installed) -> None:
    """Snakemake's own answer (IncompleteCheckpointException: the DAG waits for the checkpoint)
    comes first: the wrapper looks only at a finished checkpoint's outputs."""
    rule = SimpleNamespace(wildcard_names=set(), expand_output=lambda wildcards: (["a"], None))
    unfinished = SimpleNamespace(rule=rule, checkpoints=SimpleNamespace(created_output=set()))
    with pytest.raises(IncompleteCheckpointException):
        Checkpoint.get(unfinished)


def test_installing_twice_wraps_once(installed) -> None:
    wrapped = Checkpoint.get
    assert checkpoint_copies.install() is None and Checkpoint.get is wrapped


def test_a_changed_snakemake_is_left_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    from snakemake.io import _IOFile
    monkeypatch.setattr(Checkpoint, "get", Checkpoint.get)
    monkeypatch.delattr(_IOFile, "should_not_be_retrieved_from_storage")
    before = Checkpoint.get
    why = checkpoint_copies.install()
    assert why is not None and "not the expected" in why and Checkpoint.get is before


def test_the_job_hook_installs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    keep_job_hooks_local(monkeypatch)
    command_clock.hook_job(None)
    assert getattr(Checkpoint.get, checkpoint_copies.MARK, False)
