"""Which job commands the worker's zygote runs: the Snakemake front end's shell line, word for
word as the shell would split it, and nothing the shell would do more with."""

from __future__ import annotations

import os
import sys

import pytest

from expo_executor.worker import command_clock
from expo_executor.worker.forked import job_chain, snakemake_chain, split_and

PY = sys.executable
PATH = os.path.dirname(sys.executable)
CLOCK = f"{PY} -m {command_clock.__name__} -m snakemake"


def _sh(line: str) -> list[str]:
    return ["/bin/sh", "-c", f"{command_clock.ANNOUNCE}; {line}"]


def test_the_front_ends_line_becomes_the_same_words() -> None:
    line = (f"{CLOCK} --snakefile '/w/my Snakefile' --target-jobs 't:i=4' "
            "--config 'x=\"a b\"' \"k=v\" --default-resources base64//dG1w --mode remote")
    assert snakemake_chain(_sh(line), PATH) == [[
        "clock", "--snakefile", "/w/my Snakefile", "--target-jobs", "t:i=4",
        "--config", 'x="a b"', "k=v", "--default-resources", "base64//dG1w",
        "--mode", "remote"]]


def test_a_directory_change_and_the_sources_precommand_are_steps() -> None:
    """On GCE Snakemake deploys the workflow's sources first, then runs the job."""
    line = (f"cd '/scratch/work/j1' && python -m snakemake --deploy-sources "
            f"gs://b/src.tar.gz 1234 && {CLOCK} --mode remote")
    assert snakemake_chain(_sh(line), PATH) == [
        ["cd", "/scratch/work/j1"],
        ["snakemake", "--deploy-sources", "gs://b/src.tar.gz", "1234"],
        ["clock", "--mode", "remote"]]


@pytest.mark.parametrize("line", [
    f"{CLOCK} --config x=$HOME",  # an expansion
    f"{CLOCK} --config \"x=$HOME\"",  # one inside double quotes
    f"{CLOCK} --config `id`",
    f"{CLOCK} --mode remote > out.txt",  # a redirection
    f"{CLOCK} --mode remote; rm -rf /",  # another command
    f"{CLOCK} --mode remote || true",
    f"{CLOCK} --mode remote &",
    f"{CLOCK} --snakefile *.smk",  # a glob
    f"{CLOCK} --snakefile ~/Snakefile",
    f"{CLOCK} --snakefile 'unterminated",
    f"{CLOCK} --mode remote \\\n --nolock",
    "export X='1' && " + CLOCK,  # Snakemake's envvar declarations: not this front end's
    f"mkdir -p \"$EXPOCLOUD_DEPLOY_DIR\" && flock x /bin/sh -c 'y' && {CLOCK}",  # conda
    f"/usr/bin/python3 -m {command_clock.__name__} -m snakemake",  # another interpreter
    "python -m snakemake --mode remote",  # no command clock last
    f"{PY} -m expo_executor.worker.staged_job spec.json",
])
def test_anything_else_runs_in_a_fresh_process(line: str) -> None:
    assert snakemake_chain(_sh(line), PATH) is None


def test_only_the_announced_shell_line_is_taken() -> None:
    line = f"{CLOCK} --mode remote"
    assert snakemake_chain(["/bin/sh", "-c", line], PATH) is None  # no announcement
    assert snakemake_chain(["bash", "-c", f"{command_clock.ANNOUNCE}; {line}"], PATH) is None
    assert snakemake_chain([PY, "-m", command_clock.__name__, "-m", "snakemake"], PATH) is None


def test_split_and_takes_quotes_as_the_shell_does() -> None:
    assert split_and("a 'b && c' && d\"e\"f") == [["a", "b && c"], ["def"]]
    assert split_and("a && && b") is None  # an empty command
    assert split_and("a \"b\\\"c\"") is None  # a backslash inside double quotes
    assert split_and("a 'b\nc' \"\" '$x'") == [["a", "b\nc", "", "$x"]]
    assert split_and("a\rb") is None  # the shell splits at no carriage return: it runs it
    assert split_and("a 'b") is None  # a quote never closed
    assert split_and("a & b") is None  # a lone &


def test_a_staged_jobs_wrapper_is_forked_and_only_as_the_agent_starts_it() -> None:
    wrapper = [PY, "-m", "expo_executor.worker.staged_job", "/vm/jobs/c1.json"]
    assert job_chain(wrapper, PATH) == [["staged", "/vm/jobs/c1.json"]]
    assert job_chain(["python", *wrapper[1:]], PATH) is None
    assert job_chain([*wrapper, "extra"], PATH) is None
    line = f"{CLOCK} --mode remote"
    assert job_chain(_sh(line), PATH) == snakemake_chain(_sh(line), PATH) == [
        ["clock", "--mode", "remote"]]
