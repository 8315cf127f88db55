"""The nested sweep of issue 31: ``points`` trivial jobs writing ``results/{a}/{n}/{s}.txt``.

    make(folder, points)   # writes folder/Snakefile; returns the paths of its outputs

Ten values of ``a``, ten of ``n`` and as many of ``s`` as needed, the first ``points`` of
them in that order: 5,000 points are ``a`` 0-9 x ``n`` 0-9 x ``s`` 0-49, so every leaf folder
holds 50 files (many objects under each storage "folder", as a real sweep has). Each job echoes
its wildcards into its output; ``rule all`` is a local rule, as in any sweep.
"""

from __future__ import annotations

from pathlib import Path

A_VALUES = 10
N_VALUES = 10

SNAKEFILE = """\
POINTS = {points}
S_VALUES = {s_values}
TARGETS = [f"results/{{a}}/{{n}}/{{s}}.txt"
           for a in range({a_values}) for n in range({n_values}) for s in range(S_VALUES)][:POINTS]

localrules: all

rule all:
    input: TARGETS

rule point:
    output: "results/{{a}}/{{n}}/{{s}}.txt"
    shell: "echo {{wildcards.a}} {{wildcards.n}} {{wildcards.s}} > {{output}}"
"""


def s_values(points: int) -> int:
    """Values of the innermost wildcard that ``points`` needs."""
    return max(1, -(-points // (A_VALUES * N_VALUES)))


def outputs(points: int) -> list[str]:
    """The sweep's output paths, in the Snakefile's order."""
    return [f"results/{a}/{n}/{s}.txt" for a in range(A_VALUES) for n in range(N_VALUES)
            for s in range(s_values(points))][:points]


def make(folder: Path | str, points: int) -> list[str]:
    """Write ``folder/Snakefile`` (the folder is made if missing) for a sweep of ``points``
    jobs; the outputs it makes, relative to the folder."""
    if points < 1:
        raise ValueError(f"a sweep needs at least one point, not {points}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "Snakefile").write_text(SNAKEFILE.format(
        points=points, s_values=s_values(points), a_values=A_VALUES, n_values=N_VALUES))
    return outputs(points)
