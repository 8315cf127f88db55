"""``snakemake --executor expocloud``: the executor, the description of a Snakemake job (key,
hardness point, deadline, CPUs; ``describe``), the rules it plans to run, read before the run
(``planned_rules``), which ready jobs Snakemake hands over (``job_selection``), the
lost-annotations check of the workflow profile (``workflow_profile``), the run's request budget
line (``run_budget``), what a job's own snakemake stores of its temp, pipe and service
outputs (``temp_outputs``) and the default and set resources it is given, in their units
(``resource_args``), the outputs the main process checks or writes itself
(``job_outputs``: harvested results, placeholders), and the existence checks in the GCS default
storage answered from one listing of its prefix (``storage_listing``), and the plain shell
jobs whose workers run only their shell lines (``direct_jobs``; on GCE, with their storage
files moved by the worker: ``staged_direct``). May import what
``frontends`` may; imports Snakemake (and, lazily, its GCS storage plugin)."""
