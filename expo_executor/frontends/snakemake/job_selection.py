"""Which ready jobs Snakemake hands the executor, chosen in one pass instead of Snakemake's MILP.

At every selection (a run starts, a job ends) Snakemake's scheduler picks which ready jobs to
submit. Its default, ``--scheduler ilp``, builds and solves a MILP over every ready job each
time (CBC, up to 10 s a solve), then falls back to its greedy heuristic, whose cost grows with
ready jobs times the jobs it picks. A sweep has thousands of points ready at once: a local run
sat at 4,015 of 5,000 jobs for over 10 minutes with nothing queued, each freed slot waiting for
a solve, and Ctrl-C is not acted on while the solver runs.

What the MILP optimises does not matter under expocloud: the coordinator orders the jobs it is
given itself (priority, then hardness: ``core.tasks.TaskEntry.order``) and decides what runs
where. Snakemake only has to hand over, at once, every ready job that fits its ``-j`` and
``--resources``, and, when ``-j`` holds some back, the ones the coordinator would run first.
That is one pass (:func:`first_fit`), in the coordinator's order, so it never reorders what
the hardness ordering decides.

The hook. Snakemake picks its scheduler from ``--scheduler`` (default ``ilp``) before the
executor exists, an executor plugin has no say, and a scheduler plugin needs the flag (one
named ``ilp`` is replaced by Snakemake's own). But Snakemake builds the executor inside its job
scheduler's constructor, just before that reads the scheduler's ``select_jobs``: the executor
sets ours on the ILP plugin's class then (:func:`take_over`) and puts Snakemake's back at
shutdown. An explicit ``--scheduler greedy``, or any plugin, is used as given; ``ilp`` cannot
be told from the default, so it is replaced, in one logged line. Were Snakemake ever to read the
method earlier, the first hand-over would find this selection never ran and say so
(:meth:`Selection.handed_over`).
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Iterable, Mapping

from snakemake_interface_scheduler_plugins.registry import SchedulerPluginRegistry

ILP = "ilp"  # Snakemake's default scheduler, replaced


# what every job needs one of (Snakemake 9: ``Job._get_scheduler_resources`` sets
# ``_job_count`` to 1, and every rule and group job needs one ``_nodes``)
ONE_EACH = ("_job_count", "_nodes")


def first_fit(jobs: Iterable[Any], available: Mapping[str, int | str],
              key: Callable[[Any], tuple]) -> list[Any]:
    """Every job in ``key`` order that fits what the jobs before it left of ``available``
    (Snakemake's free resources: ``_nodes`` is what ``-j`` leaves, ``_cores`` ``--cores``;
    text-valued ones constrain nothing), each job's needs its ``scheduler_resources``.
    One pass: its cost grows with the ready jobs, never with their product. It ends once
    ``-j`` is used up (:data:`ONE_EACH`): no later job could fit, and Snakemake evaluates a
    job's resources (its input functions, its resource callables) only when asked for them,
    so 5,000 ready jobs under ``-j 100`` are not all evaluated at the first selection."""
    left = {name: value for name, value in available.items() if isinstance(value, int)}
    chosen = []
    for job in sorted(jobs, key=key):
        if any(left.get(name, 1) <= 0 for name in ONE_EACH):
            break
        needs = job.scheduler_resources
        if all(needs.get(name, 0) <= free for name, free in left.items()):
            for name in left:
                left[name] -= needs.get(name, 0)
            chosen.append(job)
    return chosen


class Selection:
    """Snakemake's job selection for one run: :func:`first_fit` in ``order`` (the
    coordinator's, each job's computed once), each selection's counts in the debug log."""

    def __init__(self, order: Callable[[Any], tuple], debug: Callable[[str], None],
                 warn: Callable[[str], None]) -> None:
        self.order = order
        self.debug = debug
        self.warn = warn
        self.selections = 0  # how often Snakemake asked this selection
        self._keys: dict[Any, tuple] = {}  # ready job -> its order, until handed over
        self._checked = False

    def select(self, jobs: Iterable[Any], available: Mapping[str, int | str]) -> list[Any]:
        self.selections += 1
        jobs = list(jobs)
        chosen = first_fit(jobs, available, self._key)
        for job in chosen:
            self._keys.pop(job, None)
        limits = ", ".join(f"{name}={free}" for name, free in available.items()
                           if isinstance(free, int) and free < sys.maxsize)
        self.debug(f"expocloud: job selection {self.selections}: {len(chosen)} of "
                   f"{len(jobs)} ready jobs handed over (free: {limits or 'no limit'})")
        return chosen

    def _key(self, job: Any) -> tuple:
        key = self._keys.get(job)
        if key is None:
            key = self._keys[job] = self.order(job)
        return key

    def handed_over(self) -> None:
        """Called as Snakemake hands over jobs: one warning if it chose them without us."""
        if not self._checked:
            self._checked = True
            if not self.selections:
                self.warn("expocloud: Snakemake chose these jobs with its own scheduler, not "
                          "expocloud's one-pass selection: with thousands of ready jobs each "
                          "choice can take seconds (docs/further.md, FAQ)")


def take_over(scheduler: str, selection: Selection,
              info: Callable[[str], None]) -> Callable[[], None]:
    """Make ``selection`` Snakemake's, if ``scheduler`` (its ``--scheduler``) is ``ilp``;
    call from the executor's ``__post_init__``. Returns what puts Snakemake's back."""
    if scheduler != ILP:
        return lambda: None  # the user named a scheduler: theirs
    ilp = SchedulerPluginRegistry().get_plugin(ILP).scheduler
    snakemakes = ilp.select_jobs

    def select_jobs(self: Any, selectable_jobs: Iterable[Any], remaining_jobs: Any,
                    available_resources: Mapping[str, int | str], input_sizes: Any) -> list:
        return selection.select(selectable_jobs, available_resources)

    ilp.select_jobs = select_jobs
    info("expocloud: ready jobs are handed over in one pass, in the order the coordinator runs "
         "them (Snakemake's ilp job selection would solve a MILP over them each time; "
         "--scheduler greedy keeps Snakemake's greedy one)")
    return lambda: setattr(ilp, "select_jobs", snakemakes)
