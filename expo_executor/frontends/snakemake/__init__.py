"""``snakemake --executor expocloud``: the executor, the description of a Snakemake job (key,
hardness point, deadline, CPUs; ``describe``), the rules it plans to run, read before the run
(``planned_rules``), which ready jobs Snakemake hands over (``job_selection``), the
lost-annotations check of the workflow profile (``workflow_profile``), the run's request budget
line (``run_budget``), what a job's own snakemake stores of its temp, pipe and service
outputs (``temp_outputs``), and the outputs the main process checks or writes itself
(``job_outputs``: harvested results, placeholders). May import what ``frontends`` may; imports
Snakemake."""
