"""What makes a loaded workflow (worker/loaded_workflow.py) the one a job would load: its
Snakemake arguments but the job's own, and the files its load read, unchanged. Jobs forked
from a real template: tests/e2e/test_workflow_template.py."""

from __future__ import annotations

import os
from pathlib import Path

from snakemake.cli import parse_args

from expo_executor.worker import command_clock
from expo_executor.worker.loaded_workflow import (Loaded, Watched, _Reads, differences, key_of,
                                                  signature, stale)
from expo_executor.worker.workflow_template import template_key


def _key(tmp_path: Path, *extra: str) -> dict:
    (tmp_path / "Snakefile").touch()
    _, args = parse_args(["--snakefile", str(tmp_path / "Snakefile"), "--cores", "1",
                          "--mode", "remote", *extra])
    return key_of(args)


def test_the_jobs_own_arguments_are_not_the_workflows(tmp_path: Path) -> None:
    one = _key(tmp_path, "--target-jobs", "t:i=1", "--allowed-rules", "t", "--attempt", "1",
               "--force-use-threads", "--unneeded-temp-files", "a.tmp", "--config", "x=1")
    two = _key(tmp_path, "--target-jobs", "t:i=2", "u:j=3", "--allowed-rules", "t", "u",
               "--attempt", "3", "--config", "x=1")
    assert differences(one, two) == []
    other = _key(tmp_path, "--target-jobs", "t:i=1", "--config", "x=2")
    assert differences(one, other) == ["--config"]


def test_a_changed_or_removed_file_the_load_read_makes_it_stale(tmp_path: Path) -> None:
    snakefile, data = tmp_path / "Snakefile", tmp_path / "samples.tsv"
    snakefile.write_text("rule a:\n    shell: 'true'\n")
    data.write_text("s1\n")
    loaded = Loaded({}, None, [], [Watched(str(p), signature(str(p))) for p in (snakefile, data)])
    assert stale(loaded) is None
    snakefile.write_text("rule a:\n    shell: 'false'\n")
    assert stale(loaded) == f"{snakefile} changed"
    loaded.watched[0] = Watched(str(snakefile), signature(str(snakefile)))
    data.unlink()
    assert stale(loaded) == f"{data} changed"


def test_only_what_the_load_reads_and_lists_outside_python_is_watched(tmp_path: Path) -> None:
    read, written, listed = tmp_path / "config.yaml", tmp_path / "out.txt", tmp_path / "data"
    read.write_text("x: 1\n")
    written.write_text("")
    listed.mkdir()
    own = tmp_path / "cache"
    own.mkdir()
    (own / "entry").write_text("")
    reads = _Reads()
    reads.hook("open", (str(read), "r", 0))  # off: nothing recorded
    reads.on = True
    reads.hook("open", (str(read), "rb", 0))
    reads.hook("open", (str(written), "w", 0))
    reads.hook("open", (str(written), None, os.O_WRONLY | os.O_CREAT))
    reads.hook("os.scandir", (str(listed),))
    reads.hook("open", (str(own / "entry"), "r", 0))
    reads.hook("open", (os.__file__, "rb", 0))  # Python's own
    reads.hook("open", (3, "r", 0))  # a descriptor: no path
    watched = [w.path for w in reads.watched((str(own),))]
    assert watched == [str(read), str(listed)]


def test_only_a_snakemake_chain_has_a_template_and_its_stamps_do_not_count() -> None:
    env = {"PATH": "/bin", command_clock.STAMPS_ENV: "/w/1.stamps"}
    clock = ["clock", "--snakefile", "S"]
    one = template_key({"chain": [["cd", "sub"], clock], "cwd": "/w", "env": env})
    other = template_key({"chain": [clock], "cwd": "/w/sub",
                          "env": {**env, command_clock.STAMPS_ENV: "/w/2.stamps"}})
    assert one is not None and one == other
    assert template_key({"chain": [clock], "cwd": "/w", "env": {"PATH": "/usr/bin"}}) != other
    assert template_key({"chain": [["snakemake", "--deploy-sources", "q", "c"], clock],
                         "cwd": "/w", "env": env}) is None
    assert template_key({"chain": [["staged", "spec"]], "cwd": "/w", "env": env}) is None
