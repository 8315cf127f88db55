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

Before each selection Snakemake's job scheduler also checks every ready job's resources against
``-j`` and ``--resources`` (``JobScheduler.validate_job``, which evaluates them: input
functions, resource callables) and finds the sizes of every ready job's inputs for the MILP
(``update_input_sizes``: an existence and a size question per input, to storage in a GCS run).
For 50,000 ready points that held the first hand-over 7 s, with the first VM ready and waiting.
While this selection is Snakemake's, the sizes are not asked for (nothing reads them), and a
job is checked when the selection first looks at it, with Snakemake's own check: a job that
asks for more than there is still fails the run with Snakemake's words, once the selection
comes to it, and one it never needs to look at is never evaluated (the order itself reads a
rule's hardness and deadline from the rule: ``JobDescriber.order``).
"""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable, Iterable, Mapping

from snakemake_interface_scheduler_plugins.registry import SchedulerPluginRegistry

ILP = "ilp"  # Snakemake's default scheduler, replaced


# what every job needs one of (Snakemake 9: ``Job._get_scheduler_resources`` sets
# ``_job_count`` to 1, and every rule and group job needs one ``_nodes``)
ONE_EACH = ("_job_count", "_nodes")


def first_fit(jobs: Iterable[Any], available: Mapping[str, int | str],
              key: Callable[[Any], tuple],
              check: Callable[[Any], None] = lambda job: None) -> list[Any]:
    """Every job in ``key`` order that fits what the jobs before it left of ``available``
    (Snakemake's free resources: ``_nodes`` is what ``-j`` leaves, ``_cores`` ``--cores``;
    text-valued ones constrain nothing), each job's needs its ``scheduler_resources``, each
    job ``check``-ed (Snakemake's ``validate_job``: raises on one that can never fit) as it is
    looked at. One pass: its cost grows with the ready jobs, never with their product. It ends
    once ``-j`` is used up (:data:`ONE_EACH`): no later job could fit, and Snakemake evaluates a
    job's resources (its input functions, its resource callables) only when asked for them,
    so 5,000 ready jobs under ``-j 100`` are not all evaluated at the first selection."""
    left = {name: value for name, value in available.items() if isinstance(value, int)}
    chosen = []
    for job in sorted(jobs, key=key):
        if any(left.get(name, 1) <= 0 for name in ONE_EACH):
            break
        check(job)
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
        # Snakemake's check of one job, bound to its job scheduler (take_over)
        self.check: Callable[[Any], None] = lambda job: None

    def select(self, jobs: Iterable[Any], available: Mapping[str, int | str]) -> list[Any]:
        self.selections += 1
        jobs = list(jobs)
        chosen = first_fit(jobs, available, self._key, self.check)
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
    from snakemake.scheduling.job_scheduler import JobScheduler  # loaded by now: it builds us

    ilp = SchedulerPluginRegistry().get_plugin(ILP).scheduler
    snakemakes = ilp.select_jobs, JobScheduler.validate_job, JobScheduler.update_input_sizes
    validate = snakemakes[1]

    def select_jobs(self: Any, selectable_jobs: Iterable[Any], remaining_jobs: Any,
                    available_resources: Mapping[str, int | str], input_sizes: Any) -> list:
        return selection.select(selectable_jobs, available_resources)

    def check_when_looked_at(job_scheduler: Any, job: Any) -> None:
        """Snakemake calls this for every ready job before each selection: the job is
        checked when the selection looks at it (see the module)."""
        if getattr(selection.check, "args", None) != (job_scheduler,):
            selection.check = functools.partial(validate, job_scheduler)

    async def no_input_sizes(job_scheduler: Any, jobs: Iterable[Any]) -> None:
        """Only Snakemake's MILP reads them (see the module)."""

    ilp.select_jobs = select_jobs
    JobScheduler.validate_job = check_when_looked_at
    JobScheduler.update_input_sizes = no_input_sizes
    info("expocloud: ready jobs are handed over in one pass, in the order the coordinator runs "
         "them (Snakemake's ilp job selection would solve a MILP over them each time; "
         "--scheduler greedy keeps Snakemake's greedy one)")

    def give_back() -> None:
        ilp.select_jobs, JobScheduler.validate_job, JobScheduler.update_input_sizes = snakemakes

    return give_back
