"""A group job's own snakemake is told not to store its members' pipe and service outputs
(storing a FIFO blocks forever), read back with Snakemake's own command-line parser."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from snakemake.cli import get_argument_parser
from snakemake.io import pipe, service, temp

from expo_executor.frontends.snakemake.temp_outputs import (transient_outputs,
                                                          with_transient_outputs)

ARGS = "--target-jobs 'a:i=0' 'b:i=0' --allowed-rules a b --cores all --attempt 1"


@dataclass
class Job:
    """A stand-in for Snakemake's job: its outputs carry Snakemake's own flags."""

    output: list = field(default_factory=list)
    jobs: list = field(default_factory=list)

    def is_group(self) -> bool:
        return bool(self.jobs)


def _unneeded(args: str) -> set[str]:
    parsed = get_argument_parser().parse_args(shlex.split(args))
    return set(parsed.unneeded_temp_files)


def test_a_pipe_groups_pipe_and_service_outputs_are_not_stored() -> None:
    group = Job(jobs=[Job([pipe("test.0.txt"), "log.0"]), Job(["test.0.out"]),
                      Job([service("socket")])])
    assert transient_outputs(group) == ["socket", "test.0.txt"]
    assert _unneeded(with_transient_outputs(ARGS, group, [])) == {"socket", "test.0.txt"}


def test_the_groups_unneeded_temp_files_stay_listed() -> None:
    """Snakemake keeps the flag's last list: the one added holds Snakemake's own too."""
    group = Job(jobs=[Job([pipe("p")]), Job([temp("t")])])
    args = f"{ARGS} --unneeded-temp-files 't'"
    assert _unneeded(args) == {"t"}
    assert _unneeded(with_transient_outputs(args, group, [temp("t")])) == {"p", "t"}


def test_arguments_without_pipes_are_left_as_snakemake_made_them() -> None:
    lone = Job([pipe("p")])  # not a group: Snakemake never submits a pipe's producer alone
    plain_group = Job(jobs=[Job([temp("t")]), Job(["u"])])
    args = f"{ARGS} --unneeded-temp-files 't'"
    assert with_transient_outputs(args, lone, []) == args
    assert with_transient_outputs(args, plain_group, [temp("t")]) == args
