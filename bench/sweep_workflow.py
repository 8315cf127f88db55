"""The nested parameter sweep the issue 31 benchmarks share: ``points`` trivial jobs, each
writing ``results/{a}/{n}/{s}.txt`` (100 files a folder, 10 folders ``n`` per ``a``), and a
target rule that asks for all of them.

``make(folder, points)`` writes the workflow's Snakefile into ``folder`` and returns the
folder; ``output_paths(points)`` lists the outputs (workflow-relative), e.g. to upload them
beforehand for a rerun whose outputs all exist. Run as a script it writes one:
``python bench/sweep_workflow.py FOLDER POINTS``.
"""

from __future__ import annotations

import sys
from pathlib import Path

SNAKEFILE = '''\
POINTS = {points}


def point(i):
    return f"results/{{i // 1000}}/{{i // 100 % 10}}/{{i % 100}}.txt"


rule all:
    input: [point(i) for i in range(POINTS)]


rule point:
    output: "results/{{a}}/{{n}}/{{s}}.txt"
    shell: "echo {{wildcards.a}} {{wildcards.n}} {{wildcards.s}} > {{output}}"
'''


def output_paths(points: int) -> list[str]:
    """Every output of the sweep, as the Snakefile names it."""
    return [f"results/{i // 1000}/{i // 100 % 10}/{i % 100}.txt" for i in range(points)]


def make(folder: Path | str, points: int) -> Path:
    """Write the sweep's Snakefile into ``folder`` (created if absent) and return the folder."""
    if points < 1:
        raise ValueError(f"a sweep needs at least one point, not {points}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "Snakefile").write_text(SNAKEFILE.format(points=points))
    return folder


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python bench/sweep_workflow.py FOLDER POINTS")
    print(make(sys.argv[1], int(sys.argv[2])))
