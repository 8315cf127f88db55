"""A job's Snakemake arguments taken from its template's parse (worker/job_arguments.py): the
same values as Snakemake's whole parse, or no shortcut at all."""

from __future__ import annotations

from pathlib import Path

from snakemake.cli import parse_args

from expo_executor.worker.job_arguments import Spare, reparse, split
from expo_executor.worker.loaded_workflow import JOB_ONLY, differences, key_of


def _argv(tmp_path: Path, *own: str, config: str = "xv=1") -> list[str]:
    (tmp_path / "Snakefile").touch()
    return ["--snakefile", str(tmp_path / "Snakefile"), *own, "--cores", "1",
            "--config", config, "--mode", "remote"]


def _spare(argv: list[str]) -> Spare:
    parser, args = parse_args(argv)
    return Spare(parser, args, split(argv, parser, JOB_ONLY)[1])


def test_a_jobs_own_options_parse_as_snakemake_parses_them(tmp_path: Path) -> None:
    first = _argv(tmp_path, "--target-jobs", "t:i=1", "--attempt", "1",
                  "--unneeded-temp-files", "a.tmp", "b.tmp")
    job = _argv(tmp_path, "--target-jobs", "t:i=2", "u:j=3", "--allowed-rules", "t", "u",
                "--attempt=4", "--force-use-threads")
    args = reparse(_spare(first), job, JOB_ONLY)
    _, whole = parse_args(job)
    assert args is not None
    assert differences(key_of(args), key_of(whole)) == []
    for dest in JOB_ONLY:
        assert getattr(args, dest) == getattr(whole, dest), dest
    assert args.attempt == 4 and not args.unneeded_temp_files  # not the first job's


def test_other_words_or_an_unreadable_form_leave_the_whole_parse(tmp_path: Path) -> None:
    first = _argv(tmp_path, "--target-jobs", "t:i=1")
    assert reparse(_spare(first), _argv(tmp_path, "--target-jobs", "t:i=2", config="xv=2"),
                   JOB_ONLY) is None
    assert reparse(_spare(first), _argv(tmp_path, "--target-jobs", "-x"), JOB_ONLY) is None
    assert reparse(_spare(first), _argv(tmp_path, "--target-job", "t:i=2"), JOB_ONLY) is None
