"""``snakemake --executor expocloud``: the executor, the description of a Snakemake job (key,
hardness point, deadline, CPUs; ``describe``), the rules it plans to run, read before the run
(``planned_rules``), the lost-annotations check of the workflow profile (``workflow_profile``),
the run's request budget line (``run_budget``) and the existence checks in the GCS default
storage answered from one listing of its prefix (``storage_listing``). May import what
``frontends`` may; imports Snakemake (and, lazily, its GCS storage plugin)."""
