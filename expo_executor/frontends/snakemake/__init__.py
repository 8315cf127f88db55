"""``snakemake --executor expocloud``: the executor, the description of a Snakemake job (key,
hardness point, deadline, CPUs; ``describe``), the rules it plans to run, read before the run
(``planned_rules``), which ready jobs Snakemake hands over (``job_selection``), the
lost-annotations check of the workflow profile (``workflow_profile``)
and the run's request budget line (``run_budget``). May import what ``frontends`` may; imports
Snakemake."""
