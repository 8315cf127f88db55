"""A newcomer follows the README's first screen on a pipeline that is not ours, and gets hardness.

The pipeline is written here: a rule ``solve`` over ``{size}/{seed}`` writing JSON, whose jobs
take ``size`` seconds. Its ``profiles/default/config.yaml`` is the first YAML block of README.md,
copied out of the README itself (never duplicated here), and the commands are those of the
README's "in your workflow's folder" block, run as written with this environment's binaries
(the install block before it is what made them; it clones from the network, which tests never
reach: tests/unit/test_docs.py checks its shape). Then the same pipeline on the emulated GCE path
with the engine profile given as the README says, ``--profile profiles/gce-emulated``.

What must hold, read from the run's records: the solve jobs were handed to workers easiest first
(assigned.jsonl), the smallest sizes were solved, a size past the README's deadline timed out,
and every job at least as large was skipped, never run to its end.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from expo_executor.runs.files import RunFiles

from tests.emulated_gce import emulated_args, emulated_env, fake_compute  # noqa: F401
from tests.gcs_emulator import gcs_emulator  # noqa: F401
from tests.helpers import REPO, SNAKEMAKE, run_dirs, wait_until

pytestmark = pytest.mark.slow

BIN = Path(SNAKEMAKE).parent
SIZES = (1, 2, 30, 40)  # seconds of work: well under, and well over, the README's deadline
SEEDS = (0, 1)
SNAKEFILE = f"""
SIZES = {list(SIZES)}
SEEDS = {list(SEEDS)}

rule all:
    input: expand("results/{{size}}/{{seed}}.json", size=SIZES, seed=SEEDS)

rule solve:
    output: "results/{{size}}/{{seed}}.json"
    shell: "sleep {{wildcards.size}} && echo '{{{{\\"size\\": {{wildcards.size}}}}}}' > {{output}}"
"""


def readme_blocks(language: str) -> list[list[str]]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    return [b.splitlines() for b in re.findall(rf"^```{language}\n(.*?)^```", text, re.S | re.M)]


def first_screen_profile() -> str:
    """The profile lines the README's first screen gives (its first YAML block)."""
    return "\n".join(readme_blocks("yaml")[0]) + "\n"


def first_screen_commands() -> list[list[str]]:
    """The commands of the README's first block run in the user's workflow folder."""
    block = next(b for b in readme_blocks("bash") if b[0].strip() == "# in your workflow's folder")
    return [shlex.split(line, comments=True) for line in block[1:] if line.strip()]


def deadline_s() -> float:
    match = re.search(r"deadline:\s*(\d+)s", first_screen_profile())
    assert match, "the README's profile gives a deadline in seconds"
    return float(match.group(1))


def newcomer_pipeline(root: Path) -> Path:
    root.mkdir()
    (root / "Snakefile").write_text(SNAKEFILE)
    (root / "profiles" / "default").mkdir(parents=True)
    (root / "profiles" / "default" / "config.yaml").write_text(first_screen_profile())
    return root


def run(words: list[str], cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    """A README command with this environment's binary for its program."""
    return subprocess.run([str(BIN / Path(words[0]).name), *words[1:]], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def solve_records(run_dir: Path) -> dict[str, dict]:
    records = RunFiles(run_dir).jobs()
    return {r["key"]: r for r in records if r["rule"] == "solve"}


def check_hardness_held(run_dir: Path) -> None:
    records = solve_records(run_dir)
    assert len(records) == len(SIZES) * len(SEEDS), records
    size = {key: int(r["wildcards"]["size"]) for key, r in records.items()}
    outcome = {key: r["outcome"] for key, r in records.items()}
    # handed to workers easiest first: sizes in the order of assignment never go down
    assigned = [json.loads(line)["key"] for line in
                (run_dir / "assigned.jsonl").read_text().splitlines()]
    order = [size[key] for key in assigned if key in size]
    assert order == sorted(order), order
    # the easy ones solved, one past the deadline timed out, and what it dominates was skipped
    limit = deadline_s()
    assert all(outcome[k] == "solved" for k in size if size[k] < limit / 2), outcome
    timed_out = [size[k] for k in size if outcome[k] == "timeout"]
    assert timed_out and min(timed_out) > limit, outcome
    for key in size:
        if size[key] > min(timed_out):
            assert outcome[key] == "skipped", (key, outcome)


def test_the_first_screen_gives_hardness_on_the_local_engine(tmp_path: Path) -> None:
    assert all(size < deadline_s() / 2 or size > deadline_s() for size in SIZES)
    workflow = newcomer_pipeline(tmp_path / "my-sweep")
    commands = first_screen_commands()
    assert Path(commands[0][0]).name == "snakemake"
    results = [run(words, workflow) for words in commands]
    # timed-out and skipped jobs are errors to Snakemake: the run fails, having kept going
    assert results[0].returncode != 0
    assert "timed out after" in results[0].stderr and "skipped: as hard as" in results[0].stderr
    assert "declares what this run does not have" not in results[0].stderr
    for result in results[1:]:
        assert result.returncode == 0, result.stderr[-2000:]
    check_hardness_held(run_dirs(workflow)[-1])
    assert (workflow / "results" / "1" / "0.json").exists()


def test_the_first_screen_gives_hardness_on_emulated_gce(tmp_path: Path, fake_compute,  # noqa: F811
                                                          gcs_emulator) -> None:  # noqa: F811
    workflow = newcomer_pipeline(tmp_path / "my-sweep")
    args = emulated_args(fake_compute, gcs_emulator, REPO / "profiles" / "gce-emulated",
                         flag="--profile")
    result = subprocess.run([SNAKEMAKE, *args], cwd=workflow, capture_output=True, text=True,
                            timeout=300, env=emulated_env(gcs_emulator))
    assert result.returncode != 0  # the timeouts and skips, as on the local engine
    assert "timed out after" in result.stderr, result.stderr[-4000:]
    assert "declares what this run does not have" not in result.stderr
    check_hardness_held(run_dirs(workflow)[-1])
    assert wait_until(lambda: not fake_compute.instances(), timeout=60), \
        fake_compute.instances()


def test_the_workflow_profile_trap_is_named_in_one_line(tmp_path: Path) -> None:
    """What the README warns against: --workflow-profile replaces profiles/default."""
    workflow = newcomer_pipeline(tmp_path / "my-sweep")
    result = subprocess.run([SNAKEMAKE, "--workflow-profile", str(REPO / "profiles" / "local"),
                             "results/1/0.json"],
                            cwd=workflow, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines()
             if "declares what this run does not have" in line]
    assert len(lines) == 1 and "rule solve: hardness and deadline" in lines[0], result.stderr
    assert "--profile" in lines[0]
