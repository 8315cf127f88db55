"""A trivial task for the original ExpoCloud: what benchmark 1's Snakemake job does.

Benchmark 1's rule runs ``echo {i} > out/{i}.txt``; this task writes the same file from the
worker process the original forks per task (its tasks are Python callables, not commands).
"""

from __future__ import annotations

import os

from src.abstract_task import AbstractTask


class Trivial:
    """The 'algorithm' AbstractTask wants: it only carries the task's index as its instance."""

    def __init__(self, i: int) -> None:
        self.options: set = set()
        self.instance = i


class Task(AbstractTask):
    def __init__(self, i: int, timeout: float = 60) -> None:
        super().__init__(Trivial(i), timeout)

    def parameter_titles(self) -> tuple:
        return ("i",)

    def parameters(self) -> tuple:
        return (self.instance,)

    def hardness_parameters(self) -> tuple:
        return (self.instance,)

    def result_titles(self) -> tuple:
        return ("written",)

    def run(self) -> tuple:
        with open(os.path.join("out", f"{self.instance}.txt"), "w") as f:
            f.write(f"{self.instance}\n")
        return (1,)
